"""Recognition with the exported ONNX models and no torch (issue 37): numpy fbank,
onnxruntime sessions, the searches of ``wenet.decode`` on numpy arrays.
``python -m wenet.runtime --help``; docs/onnx_format.md describes the model directory."""
