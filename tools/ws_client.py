#!/usr/bin/env python3
"""Stream WAV files to the recognition server (wenet/bin/serve.py) and print its results.

    tools/ws_client.py --url ws://127.0.0.1:10086 [--realtime] [--continuous] a.wav [b.wav ...]
    tools/ws_client.py --url ws://127.0.0.1:10086 --wav_scp data/test/wav.scp > text

Each file (resampled to 16 kHz mono 16-bit if it is not) is sent in --chunk_ms messages, paced like a live
microphone with --realtime, else as fast as the server takes them. Partial results go to
stderr as they arrive (with --verbose), each final result to stdout as ``file text``
(``key text`` with --wav_scp), or
as one JSON line per final result with --json (n-best, word times, latency).
"""
import argparse
import asyncio
import json
import sys

from wenet.serve.client import read_pcm16, stream_audio


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("wavs", nargs="*", help="audio files (other rates/channels: resampled)")
    p.add_argument("--wav_scp", default=None,
                   help="a Kaldi wav.scp (key path) instead of files: prints 'key text' lines, "
                        "ready for tools/compute-wer.py")
    p.add_argument("--url", default="ws://127.0.0.1:10086")
    p.add_argument("--realtime", action="store_true", help="send at the speed of speech")
    p.add_argument("--chunk_ms", type=float, default=100.0, help="audio per message")
    p.add_argument("--continuous", action="store_true", help="continuous_decoding: true")
    p.add_argument("--nbest", type=int, default=1)
    p.add_argument("--chunk_size", type=int, default=None, help="ask for this chunk size")
    p.add_argument("--json", action="store_true", help="print the final results as JSON")
    p.add_argument("--verbose", action="store_true", help="print partial results to stderr")
    return p


def _printer(name: str, verbose: bool):
    def show(msg):
        if msg.get("status") != "ok":
            print(f"{name}: server error: {msg.get('message')}", file=sys.stderr)
        elif verbose and msg["type"] == "partial_result":
            print(f"{name} (partial): {msg['nbest'][0]['sentence']}", file=sys.stderr)
    return show


async def run(args: argparse.Namespace) -> int:
    start = {"nbest": args.nbest, "continuous_decoding": args.continuous}
    if args.chunk_size:
        start["chunk_size"] = args.chunk_size
    failures = 0
    inputs = [(path, path) for path in args.wavs]
    if args.wav_scp:
        with open(args.wav_scp, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                fields = line.split(maxsplit=1)
                if len(fields) == 1:
                    print(f"ws_client.py: {args.wav_scp}:{lineno}: no path after the key",
                          file=sys.stderr)
                    failures += 1
                elif fields:
                    inputs.append((fields[0], fields[1]))
    for name, path in inputs:
        path = path.strip()
        try:
            pcm = read_pcm16(path)
        except (ValueError, RuntimeError) as e:
            print(f"ws_client.py: {e}", file=sys.stderr)
            failures += 1
            continue
        res = await stream_audio(args.url, pcm, args.chunk_ms, args.realtime, start,
                                 _printer(name, args.verbose))
        if any(m.get("status") != "ok" for m in res.messages):
            failures += 1
            continue
        for m, t in zip(res.messages, res.times):
            if m.get("type") != "final_result":
                continue
            if args.json:
                print(json.dumps({"file": name, "arrived_s": round(t, 3), **m},
                                 ensure_ascii=False))
            else:
                print(f"{name} {m['nbest'][0]['sentence']}".rstrip(), flush=True)
    return 1 if failures else 0


def main() -> int:
    parser = get_parser()
    args = parser.parse_args()
    if not args.wavs and not args.wav_scp:
        parser.error("give audio files or --wav_scp")
    try:
        return asyncio.run(run(args))
    except OSError as e:
        print(f"ws_client.py: cannot reach {args.url}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
