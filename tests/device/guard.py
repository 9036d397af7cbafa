"""The device guard of the tests in this folder, and the exact comparison they use.

Under :func:`meta_default` the model and its inputs stay on the CPU while torch's default
device is ``meta``: a tensor that library code creates without ``device=`` (the bug that
works on a CPU and breaks on a GPU) is a meta tensor, and the first operation that mixes
it with a real tensor raises "Tensor on device meta is not on the expected device cpu!".
A meta tensor mixed only with CPU scalars (0-dim tensors may meet any device) instead
turns the result into meta, which :func:`assert_identical` refuses: the guarded run must
give *exactly* the unguarded run's outputs, on the CPU.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

META = torch.device("meta")


@contextlib.contextmanager
def meta_default() -> Iterator[None]:
    """Make ``meta`` the default device of factory calls (``torch.zeros(n)``, ``torch.tensor``,
    ``torch.arange``, ...) inside the block."""
    with torch.device(META):
        yield


def assert_identical(ref: Any, out: Any, where: str = "output") -> None:
    """``out`` equals ``ref`` exactly: the same structure, and tensors of the same device,
    dtype, shape and values (NaN equal to NaN)."""
    if isinstance(ref, torch.Tensor):
        assert isinstance(out, torch.Tensor), f"{where}: a {type(out).__name__}, not a tensor"
        assert out.device == ref.device, f"{where}: on {out.device}, expected {ref.device}"
        assert (out.dtype, out.shape) == (ref.dtype, ref.shape), \
            f"{where}: {out.dtype} {tuple(out.shape)}, expected {ref.dtype} {tuple(ref.shape)}"
        same = (torch.allclose(out.detach(), ref.detach(), rtol=0.0, atol=0.0, equal_nan=True)
                if ref.is_floating_point() else torch.equal(out, ref))
        assert same, f"{where}: values differ"
    elif isinstance(ref, dict):
        assert isinstance(out, dict) and list(out) == list(ref), \
            f"{where}: keys {list(out) if isinstance(out, dict) else out}, expected {list(ref)}"
        for key in ref:
            assert_identical(ref[key], out[key], f"{where}[{key!r}]")
    elif isinstance(ref, (list, tuple)):
        assert type(out) is type(ref) and len(out) == len(ref), \
            f"{where}: {type(out).__name__} of {len(out)}, expected {type(ref).__name__} of {len(ref)}"
        for i, (r, o) in enumerate(zip(ref, out)):
            assert_identical(r, o, f"{where}[{i}]")
    else:
        assert out == ref, f"{where}: {out!r}, expected {ref!r}"
