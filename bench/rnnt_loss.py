"""Speed of our RNN-T loss (wenet/transducer/rnnt_loss.py) against torchaudio's, forward + backward.

    python bench/rnnt_loss.py [--device cpu|cuda] [--batch 8 --frames 200 --labels 30 --vocab 500]

Prints the median seconds per forward+backward of each and their largest
difference in loss and gradient (a sanity check, the tests are the real one).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torchaudio.functional as taf

from wenet.transducer.rnnt_loss import rnnt_loss


def _time(fn, device: torch.device, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--frames", type=int, default=200)
    p.add_argument("--labels", type=int, default=30)
    p.add_argument("--vocab", type=int, default=500)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2, help="CPU threads")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    B, T, U, V = args.batch, args.frames, args.labels, args.vocab
    logits = torch.randn(B, T, U + 1, V, generator=g).to(device).requires_grad_()
    targets = torch.randint(1, V, (B, U), generator=g, dtype=torch.int32).to(device)
    # varying lengths, the longest at full size
    t_lens = torch.linspace(T * 0.7, T, B).round().int().to(device)
    u_lens = torch.linspace(U * 0.6, U, B).round().int().to(device)

    def run(impl):
        def step():
            logits.grad = None
            loss = impl(logits, targets, t_lens, u_lens, blank=0, reduction="sum")
            loss.backward()
            return loss.detach(), logits.grad.detach().clone()
        return step

    ours, theirs = run(rnnt_loss), run(taf.rnnt_loss)
    (l1, g1), (l2, g2) = ours(), theirs()
    t_ours = _time(ours, device, args.repeats)
    t_ta = _time(theirs, device, args.repeats)
    print(f"device={device} B={B} T={T} U={U} V={V} (forward+backward, median of {args.repeats})")
    print(f"ours:       {t_ours * 1000:8.1f} ms")
    print(f"torchaudio: {t_ta * 1000:8.1f} ms")
    print(f"ratio ours/torchaudio: {t_ours / t_ta:.2f}")
    print(f"max |loss diff| {float((l1 - l2).abs()):.2e}, "
          f"max |grad diff| {float((g1 - g2).abs().max()):.2e}")


if __name__ == "__main__":
    main()
