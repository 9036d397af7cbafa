"""Training-loop guards (icefall's): find what went wrong, and say it, before and while training.

* :func:`attach_inf_check` (``train.py --inf_check``): hooks on every module that
  stop at the first non-finite forward output, naming the module (and whether its
  inputs were finite), and in backward at the first module whose backward turns a
  finite gradient into a non-finite one for its input (or a parameter).
* :class:`Diagnostics` (``--print_diagnostics N``): per-module statistics of the
  activations and their gradients over N batches, then of the parameters and
  their gradients; logged and written to ``MODEL_DIR/diagnostics.txt``, after which
  training stops cleanly (:class:`DiagnosticsDone`, exit status 0).
* :func:`scan_largest_batches` (``--scan_oom``): before the first epoch, one pass
  over the training data finds the batch with the most (padded) frames and the one
  with the most (padded) tokens; each gets a forward and backward.  A batch that
  runs out of memory, or needs more than ``--oom_memory_cap_mb`` (CUDA: peak
  allocated; CPU: tensors saved for backward plus parameters and gradients), stops
  training with its keys and shapes and the config keys that bound it.
* :class:`GradScaleGuard` (always on with ``--use_amp fp16``): the grad scaler
  halves its scale at every overflow; below ``grad_scale_warn`` a warning, below
  ``grad_scale_min`` training stops: the model gives non-finite fp16 gradients.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import torch

from wenet.train.config import TrainingError
from wenet.utils.file_utils import atomic_write_text


class NonFiniteError(RuntimeError):
    """inf_check found a non-finite value; the message names the module."""


class DiagnosticsDone(Exception):
    """print_diagnostics has reported: training stops here on purpose."""


def _tensors(x: Any) -> Iterator[torch.Tensor]:
    """The floating-point tensors of a module's input or output (nested tuples, lists, dicts)."""
    if isinstance(x, torch.Tensor):
        if x.is_floating_point():
            yield x
    elif isinstance(x, (list, tuple)):
        for item in x:
            yield from _tensors(item)
    elif isinstance(x, dict):
        for item in x.values():
            yield from _tensors(item)


def _finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t.detach()).all())


def _describe(name: str, module: torch.nn.Module) -> str:
    return f"'{name or 'model'}' ({type(module).__name__})"


def _watch_grad(t: torch.Tensor, role: str) -> None:
    """Check the gradient of ``t`` once it is computed; ``role`` names who made it."""
    roles = getattr(t, "_inf_check_roles", None)
    if roles is None:
        roles = t._inf_check_roles = []

        def hook(grad: torch.Tensor) -> None:
            if not _finite(grad):
                made = [r for r in roles if r.startswith("backward of")]
                raise NonFiniteError(f"inf_check: {(made or roles)[0]} is not finite "
                                     f"(shape {tuple(grad.shape)})")
        t.register_hook(hook)
    roles.append(role)


def attach_inf_check(model: torch.nn.Module) -> List[Any]:
    """Install the inf_check hooks on every module of ``model``; returns their handles."""
    handles = []
    for name, module in model.named_modules():
        def forward_hook(module, inputs, output, name=name):
            inputs_ok = all(_finite(t) for t in _tensors(inputs))
            for i, t in enumerate(_tensors(output)):
                if not _finite(t):
                    raise NonFiniteError(
                        f"inf_check: forward output {i} of module {_describe(name, module)} "
                        f"is not finite (shape {tuple(t.shape)}); its inputs were "
                        f"{'finite' if inputs_ok else 'NOT finite'}")
            if torch.is_grad_enabled():
                for i, t in enumerate(_tensors(output)):
                    if t.requires_grad:
                        _watch_grad(t, f"the gradient of output {i} of module "
                                       f"{_describe(name, module)}")
                for i, t in enumerate(_tensors(inputs)):
                    if t.requires_grad:
                        _watch_grad(t, f"backward of module {_describe(name, module)}: the "
                                       f"gradient of its input {i}")
        handles.append(module.register_forward_hook(forward_hook))
    for pname, param in model.named_parameters():
        def param_hook(grad, pname=pname):
            if not _finite(grad):
                raise NonFiniteError(f"inf_check: the gradient of parameter '{pname}' is "
                                     "not finite")
        handles.append(param.register_hook(param_hook))
    return handles


class _Stats:
    """Running |x| mean, RMS and max |x| of the tensors seen."""

    def __init__(self) -> None:
        self.n, self.abs_sum, self.sq_sum, self.max = 0, 0.0, 0.0, 0.0

    def add(self, t: torch.Tensor) -> None:
        x = t.detach().float()
        self.n += x.numel()
        self.abs_sum += float(x.abs().sum())
        self.sq_sum += float(x.pow(2).sum())
        self.max = max(self.max, float(x.abs().max())) if x.numel() else self.max

    def line(self) -> str:
        if self.n == 0:
            return "-"
        return (f"abs-mean {self.abs_sum / self.n:.3e} rms {math.sqrt(self.sq_sum / self.n):.3e}"
                f" max {self.max:.3e}")


class Diagnostics:
    """Statistics of activations, gradients and parameters over ``num_batches`` batches."""

    def __init__(self, model: torch.nn.Module, num_batches: int) -> None:
        if num_batches < 1:
            raise ValueError(f"print_diagnostics needs >= 1 batch, got {num_batches}")
        self.model, self.num_batches, self.batches = model, num_batches, 0
        self.output: Dict[str, _Stats] = {}
        self.grad: Dict[str, _Stats] = {}
        self.handles = [m.register_forward_hook(self._hook(name or "model"))
                        for name, m in model.named_modules()]

    def _hook(self, name: str) -> Callable:
        def hook(module, inputs, output):
            first = next(_tensors(output), None)
            if first is None or not module.training:
                return
            self.output.setdefault(name, _Stats()).add(first)
            if first.requires_grad:
                first.register_hook(lambda g: self.grad.setdefault(name, _Stats()).add(g))
        return hook

    def after_batch(self) -> bool:
        """Count a trained batch; True once enough batches were seen."""
        self.batches += 1
        return self.batches >= self.num_batches

    def report(self) -> List[str]:
        """One line per module (output, output gradient) and per parameter (value, gradient)."""
        lines = [f"diagnostics over {self.batches} batch(es)"]
        for name, stats in self.output.items():
            grad = self.grad.get(name, _Stats())
            lines.append(f"module {name}: output {stats.line()} | grad {grad.line()}")
        for name, p in self.model.named_parameters():
            value, grad = _Stats(), _Stats()
            value.add(p)
            if p.grad is not None:
                grad.add(p.grad)
            lines.append(f"param {name} {tuple(p.shape)}: value {value.line()} | grad "
                         f"{grad.line()}")
        return lines


class GradScaleGuard:
    """Watches the fp16 grad scaler's scale after each update (module docstring)."""

    def __init__(self, warn_below: float = 0.01, stop_below: float = 1e-5) -> None:
        self.warn_below, self.stop_below = warn_below, stop_below
        self.last: Optional[float] = None

    def check(self, scale: float, step: int, skipped: int) -> None:
        """``skipped``: updates skipped for non-finite gradients so far."""
        falling = self.last is not None and scale < self.last
        self.last = scale
        if scale < self.stop_below:
            raise TrainingError(
                f"fp16 grad scale collapsed to {scale:.3g} (< grad_scale_min "
                f"{self.stop_below:g}) at step {step}, {skipped} update(s) skipped for "
                "non-finite gradients: the model's fp16 gradients overflow at every step; "
                "train in bf16 or float32 (--use_amp bf16 | none), or lower the learning rate")
        if scale < self.warn_below and falling:
            logging.warning("fp16 grad scale fell to %.3g (< grad_scale_warn %g) at step %d, "
                            "%d update(s) skipped so far: gradients keep overflowing", scale,
                            self.warn_below, step, skipped)


@contextlib.contextmanager
def _saved_bytes() -> Iterator[List[int]]:
    """Bytes of the distinct storages autograd saves for backward inside the block."""
    seen, total = set(), [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total[0] += storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield total


def _largest(loader: Iterable[Dict[str, Any]]) -> Dict[str, Tuple[int, Dict[str, Any]]]:
    """The batches with the most padded frames (B x T) and padded tokens (B x U)."""
    best: Dict[str, Tuple[int, Dict[str, Any]]] = {}
    for batch in loader:
        sizes = {"frames": batch["feats"].shape[0] * batch["feats"].shape[1],
                 "tokens": batch["target"].shape[0] * batch["target"].shape[1]}
        for kind, size in sizes.items():
            if kind not in best or size > best[kind][0]:
                best[kind] = (size, batch)
    return best


def _peak_mb(executor, batch: Dict[str, Any]) -> float:
    """Forward + backward of ``batch`` (gradients discarded); the memory it took, MB."""
    device = executor.device
    no_sync = executor.model.no_sync() if executor.dist.distributed else contextlib.nullcontext()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    with no_sync, _saved_bytes() as saved:
        with executor._autocast():
            loss = executor.model(*executor._inputs(batch))["loss"]
        loss.backward()
    params = sum(p.numel() * p.element_size() * (2 if p.grad is not None else 1)
                 for p in executor.module.parameters())
    executor.optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 20
    return (saved[0] + params) / 2 ** 20


def scan_largest_batches(executor, loader: Iterable[Dict[str, Any]],
                         memory_cap_mb: Optional[float], advice: str) -> Dict[str, float]:
    """Train-step the largest batches of ``loader`` (module docstring); MB per kind.

    Raises TrainingError naming the batch when it runs out of memory or needs more
    than ``memory_cap_mb``; ``advice`` says which config keys bound the batches.
    RNG states and buffers (BatchNorm statistics) are restored afterwards, so the run
    trains as it would have without the scan.
    """
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    buffers = {k: v.clone() for k, v in executor.module.named_buffers()}  # BatchNorm stats
    executor.model.train()
    needed: Dict[str, float] = {}
    try:
        for kind, (size, batch) in _largest(loader).items():
            what = (f"the batch with the most {kind} ({size} padded; feats "
                    f"{tuple(batch['feats'].shape)}, target {tuple(batch['target'].shape)}, "
                    f"keys {list(batch.get('keys') or [])[:3]}...)")
            try:
                needed[kind] = _peak_mb(executor, batch)
            except torch.cuda.OutOfMemoryError:
                executor.optimizer.zero_grad(set_to_none=True)
                raise TrainingError(f"scan_oom: {what} ran out of memory in forward/backward; "
                                    f"{advice}") from None
            logging.info("scan_oom: %s: %.1f MB", what, needed[kind])
            if memory_cap_mb is not None and needed[kind] > memory_cap_mb:
                raise TrainingError(f"scan_oom: {what} needs {needed[kind]:.1f} MB, more than "
                                    f"the cap of {memory_cap_mb:g} MB; {advice}")
    finally:
        with torch.no_grad():
            for k, v in executor.module.named_buffers():
                v.copy_(buffers[k])
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    return needed


def batch_advice(configs: Dict[str, Any]) -> str:
    """Which config keys bound the batch sizes, with their values."""
    dataset_conf = configs.get("dataset_conf") or {}
    batch_conf = dataset_conf.get("batch_conf") or {}
    filter_conf = dataset_conf.get("filter_conf") or {}
    if batch_conf.get("batch_type", "static") == "dynamic":
        size = f"dataset_conf.batch_conf.max_frames_in_batch (now {batch_conf.get('max_frames_in_batch')})"
    else:
        size = f"dataset_conf.batch_conf.batch_size (now {batch_conf.get('batch_size')})"
    return (f"lower {size}, or filter_conf.max_length (now {filter_conf.get('max_length')}) / "
            f"token_max_length (now {filter_conf.get('token_max_length')})")


def add_guard_arguments(p: argparse.ArgumentParser) -> None:
    """train.py's options for the guards of this module."""
    p.add_argument("--inf_check", action="store_true",
                   help="stop at the first module with a non-finite output or gradient, naming it")
    p.add_argument("--print_diagnostics", type=int, default=0, metavar="N",
                   help="log per-module statistics after N batches, then stop (0: off)")
    p.add_argument("--scan_oom", action="store_true",
                   help="before the first epoch, train-step the batches with the most frames "
                        "and tokens and stop if one does not fit")
    p.add_argument("--oom_memory_cap_mb", type=float, default=None,
                   help="with --scan_oom: memory a batch may need (default: whatever fits)")


class TrainingGuards:
    """The guards train.py's options asked for, as the executor calls them."""

    def __init__(self, args: argparse.Namespace, configs: Dict[str, Any],
                 model: torch.nn.Module) -> None:
        self.scan_oom, self.cap = args.scan_oom, args.oom_memory_cap_mb
        self.advice = batch_advice(configs)
        self.model_dir = args.model_dir
        if args.inf_check:
            attach_inf_check(model)
        self.diagnostics = (Diagnostics(model, args.print_diagnostics)
                            if args.print_diagnostics > 0 else None)

    def before_training(self, executor, make_train_loader: Callable[[int], Iterable]) -> None:
        if self.scan_oom:
            scan_largest_batches(executor, make_train_loader(0), self.cap, self.advice)

    def after_batch(self, executor) -> None:
        """After a batch's backward: report and stop once the diagnostics are complete."""
        if self.diagnostics is None or not self.diagnostics.after_batch():
            return
        lines = self.diagnostics.report()
        for handle in self.diagnostics.handles:  # modules may be shared (default arguments)
            handle.remove()
        for line in lines:
            logging.info("%s", line)
        if executor.dist.rank == 0:
            atomic_write_text(os.path.join(self.model_dir, "diagnostics.txt"),
                              "\n".join(lines) + "\n")
        raise DiagnosticsDone(f"print_diagnostics: {len(lines) - 1} lines written to "
                              f"{self.model_dir}/diagnostics.txt")


def guards_from_args(args: argparse.Namespace, configs: Dict[str, Any],
                     model: torch.nn.Module) -> Optional[TrainingGuards]:
    """The TrainingGuards of train.py's options, None when none is asked for."""
    if not (args.inf_check or args.print_diagnostics or args.scan_oom):
        return None
    return TrainingGuards(args, configs, model)
