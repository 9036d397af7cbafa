"""Put this directory on PYTHONPATH and ``import torch`` (torchaudio, torchcodec) fails in
that Python process: how the runtime tests prove that ``wenet.runtime`` needs no torch.
The project's other dependencies that requirements-runtime.txt leaves out are blocked
too, so the runtime is shown to run on that file alone."""
import importlib.abc
import sys

BLOCKED = ("torch", "torchaudio", "torchcodec",
           # requirements.txt / requirements-test.txt entries the runtime must not need
           "yaml", "tqdm", "tensorboardX", "matplotlib", "websockets", "onnx", "onnxscript")


class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in BLOCKED:
            raise ImportError(f"{fullname} is blocked: this process runs without torch")
        return None


sys.meta_path.insert(0, _NoTorch())
