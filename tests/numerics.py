"""Tolerances for floating-point comparisons, stated from the dtype and the problem size.

Why: a float32 result compared with a tolerance picked by eye, or one rounding error
compared with another (``err(a) <= err(b)``), passes or fails with the CPU's kernels:
AVX2, AVX512 and AVX512-BF16 builds of the same op sum in different orders, with or
without FMA, and land a few ulps apart. So a test here evaluates the same computation
once more in float64 (whose own error, ~1e-16, is nothing at float32's scale) and asks
the low-precision result to lie within

    bound = k * eps(dtype) * sqrt(n) * depth        (relative, in the 2-norm)

of it, where

- ``eps``: the dtype's machine epsilon (2**-23 for float32, 2**-52 for float64), twice
  the unit roundoff u of one rounded operation;
- ``sqrt(n)``: ``n`` is the longest sum or dot product the computation contains. With
  rounding errors that behave as independent, zero-mean variables (what blocked SIMD
  kernels give), such a sum is off by about u * sqrt(n) relative, with a probability
  of exceeding lambda * u * sqrt(n) that falls like exp(-lambda**2 / 2) (Higham and
  Mary, "A new approach to probabilistic rounding error analysis", SIAM J. Sci.
  Comput. 41(5), 2019). Kernels that sum in another order change the constant, not
  this growth;
- ``depth``: layers applied one after another each add their own error, and carry the
  incoming one on unchanged to first order when they are well conditioned (normalised
  residual blocks), so errors add up along the longest chain of layers;
- ``k``: what condition numbers (softmax, normalisation, cancellation) add; 1 unless
  the test says why more.

The bound holds on every CPU kind because it is a statement about the algorithm's
rounding, not about one kernel's result; a test reports how close it comes
(``error_ratio``), and that ratio, quoted per CPU, is the margin left.
"""
import math

import torch


def eps(dtype: torch.dtype) -> float:
    """Machine epsilon of a floating dtype (float32: 1.19e-7, float64: 2.2e-16)."""
    return float(torch.finfo(dtype).eps)


def rounding_bound(dtype: torch.dtype, n: int, depth: int = 1, k: float = 1.0) -> float:
    """Relative error allowed for a ``dtype`` evaluation of a computation whose longest
    sum has ``n`` terms, through ``depth`` layers: k * eps(dtype) * sqrt(n) * depth."""
    if n < 1 or depth < 1 or k <= 0:
        raise ValueError(f"rounding_bound needs n >= 1, depth >= 1, k > 0; got {n}, {depth}, {k}")
    return k * eps(dtype) * math.sqrt(n) * depth


def score_tolerance(dtype: torch.dtype, scale: float, n: int, depth: int = 1,
                    k: float = 1.0) -> float:
    """Absolute tolerance for a sum of non-negative magnitudes totalling ``scale`` (a
    search score: log-probabilities of one sign) computed in ``dtype``: the relative
    rounding_bound times that magnitude."""
    return rounding_bound(dtype, n, depth, k) * abs(scale)


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """||got - ref|| / ||ref||, both taken in float64 (a zero ``ref`` counts as 1e-300)."""
    got64, ref64 = got.detach().double(), ref.detach().double()
    return float((got64 - ref64).norm() / ref64.norm().clamp(min=1e-300))


def error_ratio(got: torch.Tensor, ref64: torch.Tensor, bound: float) -> float:
    """rel_err(got, ref64) / bound: below 1 passes; the distance to 1 is the margin."""
    if ref64.dtype != torch.float64:
        raise TypeError(f"the reference must be a float64 evaluation, got {ref64.dtype}")
    return rel_err(got, ref64) / bound


def assert_near_float64(got: torch.Tensor, ref64: torch.Tensor, bound: float,
                        what: str = "") -> float:
    """Assert ``got`` within ``bound`` (relative) of its float64 evaluation ``ref64``;
    return the ratio error / bound so a caller can report the margin."""
    ratio = error_ratio(got, ref64, bound)
    assert ratio <= 1.0, (f"{what}: relative error {ratio * bound:.3e} from float64 exceeds "
                          f"the bound {bound:.3e} (ratio {ratio:.2f})")
    return ratio
