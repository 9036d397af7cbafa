#!/usr/bin/env python3
"""Load test of the streaming server: N concurrent real-time clients over loopback.

    python bench/serve_load.py --model_dir exp/<run> --wav_scp data/test/wav.scp \
        --clients 1 4 16 --utts_per_client 3
    python bench/serve_load.py --onnx_dir exp/<run>/onnx [--int8] --wav_scp data/test/wav.scp

Starts ``wenet/bin/serve.py`` as a child process on a free loopback port, waits for its
health check, then for each N streams test-set utterances from N clients at once, each
paced in real time (100 ms messages); every client sends ``--utts_per_client``
utterances one after another (client i starts at utterance i * utts_per_client).
Per N it prints:

- first partial: seconds from the moment the first speech sample was sent (the first
  10 ms frame above -40 dBFS) to the first non-empty partial result, p50/p95;
- final: seconds from the end signal to the final result, p50/p95;
- CPU-RTF: the server process's CPU seconds (user + system) while the clients ran,
  over the seconds of audio streamed (< 1: it keeps up on one core's worth);
- RSS: the server's resident memory before the run, its peak during, and after the
  clients left (sampled every 100 ms from /proc).
"""
import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from wenet.decode.options import add_search_options  # noqa: E402
from wenet.serve.client import read_pcm16, stream_audio  # noqa: E402


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--model_dir", help="served as serve.py --model_dir (final.zip)")
    source.add_argument("--onnx_dir", help="served as serve.py --onnx_dir (its export's chunk "
                        "size: --chunk_size is ignored)")
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--int8", action="store_true", help="with --onnx_dir: the int8 files")
    p.add_argument("--wav_scp", required=True, help="key path lines (the test set)")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--utts_per_client", type=int, default=2)
    add_search_options(p, ("decoding_chunk_size",), stream=True)  # passed on to serve.py
    p.add_argument("--num_workers", type=int, default=2, help="server decode threads")
    p.add_argument("--server_args", default="", help="more serve.py options, one string")
    return p


def speech_start_s(pcm: bytes) -> float:
    """Start of the first 10 ms frame above -40 dBFS (0 if none)."""
    x = np.frombuffer(pcm, dtype="<i2").astype(np.float64) / 32768.0
    frames = x[:len(x) // 160 * 160].reshape(-1, 160)
    loud = np.nonzero(np.sqrt((frames ** 2).mean(axis=1)) > 0.01)[0]
    return float(loud[0]) * 0.01 if len(loud) else 0.0


def _proc(pid: int):
    """(rss MiB, cpu seconds) of a process."""
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return rss, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, _proc(self.pid)[0])
            time.sleep(0.1)


def start_server(args) -> tuple:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if args.onnx_dir:
        source = ["--onnx_dir", args.onnx_dir] + (["--int8"] if args.int8 else [])
    else:
        source = ["--model_dir", args.model_dir] + (
            [] if args.decoding_chunk_size is None else
            ["--chunk_size", str(args.decoding_chunk_size)])
    cmd = [sys.executable, os.path.join(REPO, "wenet/bin/serve.py"), *source, "--host",
           "127.0.0.1", "--port", str(port), "--max_clients", str(max(args.clients)),
           "--num_workers", str(args.num_workers), *args.server_args.split()]
    if args.checkpoint:
        cmd += ["--checkpoint", args.checkpoint]
    server = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": REPO},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return server, port
        except OSError:
            if server.poll() is not None:
                sys.exit(f"serve.py exited with {server.returncode}: {' '.join(cmd)}")
            time.sleep(0.2)
    server.kill()
    sys.exit("serve.py did not answer its health check within 120 s")


async def client(url: str, utts, first_partial, finals) -> float:
    audio_s = 0.0
    for pcm, start in utts:
        res = await stream_audio(url, pcm, chunk_ms=100, realtime=True)
        partial, final = res.first("partial_result"), res.last("final_result")
        if partial is not None:
            first_partial.append(max(0.0, partial - start))
        if final is not None and res.end_sent is not None:
            finals.append(final - res.end_sent)
        audio_s += len(pcm) / 32000
    return audio_s


async def run_level(url: str, n: int, audio, per_client: int):
    first_partial, finals = [], []
    jobs = []
    for i in range(n):
        utts = [audio[(i * per_client + j) % len(audio)] for j in range(per_client)]
        jobs.append(client(url, utts, first_partial, finals))
    audio_s = sum(await asyncio.gather(*jobs))
    return first_partial, finals, audio_s


def pct(values, q):
    return float(np.percentile(values, q)) if values else float("nan")


def main() -> None:
    args = get_parser().parse_args()
    with open(args.wav_scp) as f:
        paths = [line.split(maxsplit=1)[1].strip() for line in f if line.strip()]
    needed = max(args.clients) * args.utts_per_client
    audio = []
    for path in paths[:needed]:
        pcm = read_pcm16(path)
        audio.append((pcm, speech_start_s(pcm)))
    server, port = start_server(args)
    url = f"ws://127.0.0.1:{port}/"
    try:
        asyncio.run(run_level(url, 1, audio, 1))  # warm-up
        name = args.onnx_dir or args.model_dir
        chunk = "the export's chunk" if args.onnx_dir else (
            f"chunk {args.decoding_chunk_size}" if args.decoding_chunk_size is not None
            else "serve.py's default chunk")
        print(f"# {name.rstrip('/')}{' (int8)' if args.int8 else ''}, {chunk}, "
              f"{args.num_workers} decode threads, {args.utts_per_client} utterances per client")
        print("| clients | first partial p50 / p95 (s) | final p50 / p95 (s) | CPU-RTF "
              "| RSS MiB before / peak / after |")
        print("|---|---|---|---|---|")
        for n in args.clients:
            rss0, cpu0 = _proc(server.pid)
            sampler = Sampler(server.pid)
            sampler.start()
            first, finals, audio_s = asyncio.run(run_level(url, n, audio, args.utts_per_client))
            time.sleep(1.0)
            sampler.stop.set()
            rss1, cpu1 = _proc(server.pid)
            print(f"| {n} | {pct(first, 50):.3f} / {pct(first, 95):.3f} | "
                  f"{pct(finals, 50):.3f} / {pct(finals, 95):.3f} | "
                  f"{(cpu1 - cpu0) / audio_s:.3f} | {rss0:.0f} / {sampler.peak:.0f} / {rss1:.0f} |",
                  flush=True)
        health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").read())
        print(f"# clients connected after the runs: {health['clients']}")
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
