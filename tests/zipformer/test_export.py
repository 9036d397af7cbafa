"""The causal Zipformer's ONNX streaming encoder (encoder_chunk.onnx of
wenet/export/onnx_streaming.py) run chunk by chunk in onnxruntime with fixed-size caches
equals the eager chunk-by-chunk forward, the last (shorter) chunk included."""
import numpy as np
import pytest
import torch

from wenet.export.onnx import export_onnx_models
from wenet.models import init_model
from tests.zipformer.test_model import tiny_config

ort = pytest.importorskip("onnxruntime")


def test_onnx_streaming_encoder_equals_eager(tmp_path, one_thread):
    torch.manual_seed(0)
    model = init_model(tiny_config(True)).eval()
    chunk, left = 4, 2
    required = chunk * left
    paths = export_onnx_models(model, tiny_config(True), str(tmp_path), chunk_size=chunk,
                               left_chunks=left)
    sess = ort.InferenceSession(paths["encoder_chunk"])
    meta = sess.get_modelmeta().custom_metadata_map
    att_shape, cnn_shape = model.encoder.streaming_cache_shapes(required)
    assert (int(meta["num_blocks"]), int(meta["head"])) == att_shape[:2]
    assert int(meta["decoding_window"]) == (chunk - 1) * 4 + 11
    # the offset is all the Zipformer needs to mask unfilled cache slots: no att_mask input
    assert [i.name for i in sess.get_inputs()] == ["chunk", "offset", "att_cache", "cnn_cache"]
    x = torch.randn(1, 4 * chunk * 5 + 13, 20)  # the last window is shorter
    with torch.no_grad():
        want, _ = model.encoder.forward_chunk_by_chunk(x, chunk, left)
    att, cnn = np.zeros(att_shape, np.float32), np.zeros(cnn_shape, np.float32)
    outs, offset = [], 0
    window = int(meta["decoding_window"])
    for cur in range(0, x.size(1) - 9 + 1, 4 * chunk):
        y, att, cnn = sess.run(None, {"chunk": x[:, cur:cur + window].numpy(),
                                      "offset": np.array([offset], np.int64),
                                      "att_cache": att, "cnn_cache": cnn})
        outs.append(y)
        offset += y.shape[1]
    got = np.concatenate(outs, axis=1)
    assert got.shape == tuple(want.shape)
    assert np.abs(got - want.numpy()).max() < 1e-5
