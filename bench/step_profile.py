"""Where a training step's time and work go (bench/train_step.py ``--profile`` and
``--counts``): the forward time of each module, the top operators, and the arithmetic and
operator count of a forward + backward, which timing noise does not touch."""
from __future__ import annotations

from typing import Callable, Dict, Tuple


def profile_modules(step: Callable[[Dict[str, object]], Dict[str, float]], model, batches,
                    rows: int, depth: int) -> None:
    """Print where a training step's CPU time goes: each submodule down to ``depth`` dots
    (its forward, inclusive of its children, by ``record_function`` around it), then the
    top ``rows`` operators of the whole step by self CPU time with their call counts
    (torch.profiler over ``step`` on each of ``batches``; it returns the step's phase
    times in seconds, ``total`` among them)."""
    from torch.profiler import ProfilerActivity, profile, record_function
    open_ranges: Dict[str, list] = {}
    handles = []
    for name, module in model.named_modules():
        if not name or name.count(".") >= depth:
            continue

        def pre(_m, _inputs, name=name):
            ctx = record_function(f"module {name}")
            ctx.__enter__()
            open_ranges.setdefault(name, []).append(ctx)

        def post(_m, _inputs, _output, name=name):
            open_ranges[name].pop().__exit__(None, None, None)
        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            steps = [step(b) for b in batches]
    finally:
        for h in handles:
            h.remove()
    events = prof.key_averages()
    step_ms = 1000.0 * sum(t["total"] for t in steps) / len(steps)
    print(f"  profile over {len(steps)} steps (profiled step {step_ms:.0f} ms); forward per "
          "module, ms per step (inclusive) and calls per step:")
    for e in sorted((e for e in events if e.key.startswith("module ")), key=lambda e: e.key):
        print(f"    {e.key[7:]:48s}{e.cpu_time_total / 1000 / len(steps):9.1f}"
              f"{e.count / len(steps):8.0f}")
    print(f"  top {rows} operators of the step by self CPU time, ms per step and calls per step:")
    ops = sorted((e for e in events if not e.key.startswith("module ")),
                 key=lambda e: -e.self_cpu_time_total)
    for e in ops[:rows]:
        print(f"    {e.key[:48]:48s}{e.self_cpu_time_total / 1000 / len(steps):9.1f}"
              f"{e.count / len(steps):8.0f}")


# aten calls that only re-describe or allocate memory: left out of ``--counts``
_NOT_WORK = frozenset(f"aten::{n}" for n in (
    "view", "as_strided", "t", "transpose", "expand", "unsqueeze", "squeeze", "permute",
    "reshape", "slice", "select", "empty", "empty_strided", "detach", "alias", "_unsafe_view",
    "resolve_conj", "resolve_neg", "lift_fresh", "_reshape_alias", "contiguous", "narrow",
    "split", "chunk", "unbind", "result_type", "to", "is_nonzero", "item",
    "_local_scalar_dense", "zeros", "ones", "full"))
_PRODUCTS = frozenset(f"aten::{n}" for n in (
    "mm", "addmm", "bmm", "mkldnn_convolution", "convolution_backward",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward"))


def step_counts(model, batches, batch_count: int) -> Tuple[float, float, float]:
    """(GFLOP, operators, of which products and convolutions) of one forward + backward,
    means over ``batches``, with the model's schedules at update ``batch_count``."""
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode
    encoder = getattr(model, "encoder", None)
    if hasattr(encoder, "set_batch_count"):
        encoder.set_batch_count(batch_count)
    model.train()

    def fwd_bwd(batch):
        out = model(batch["feats"], batch["feats_lengths"], batch["target"], batch["target_lengths"])
        out["loss"].backward()
        model.zero_grad(set_to_none=True)

    counter = FlopCounterMode(display=False)
    with counter:
        for batch in batches:
            fwd_bwd(batch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches:
            fwd_bwd(batch)
    events = [e for e in prof.key_averages() if e.key.startswith("aten::") and e.key not in _NOT_WORK]
    n = len(batches)
    return (counter.get_total_flops() / 1e9 / n, sum(e.count for e in events) / n,
            sum(e.count for e in events if e.key in _PRODUCTS) / n)
