#!/usr/bin/env python3
"""ONNX export against the checkpoint on a test set: text equality and WER per mode.

    python bench/onnx_parity.py --dir exp/synth_train_zipformer --test_set test
    python bench/onnx_parity.py --dir exp/synth_train_zipformer_streaming --test_set test \\
        --streaming --chunk_size 8 --left_chunks 4

Exports ``--dir``'s checkpoint (the newest avg_*.pt, or ``--checkpoint``) with
wenet/bin/export_onnx.py --int8 into ``DIR/onnx``, decodes ``data/<set>`` with
recognize.py (the reference: stage 5's decoding, ``--simulate_streaming`` with the same
chunk size and left chunks under ``--streaming``) and with ``python -m wenet.runtime``
from the fp32 and the int8 files (``--streaming`` there too), scores every output with
tools/compute-wer.py and prints one table: the WERs, and how many utterances' fp32 text
differs from the reference (0: identical). Then the files' sizes. Outputs land in
``DIR/onnx_parity/<set>[_chunkC_leftL]/{ref,fp32,int8}/<mode>``. Run from the recipe root.
"""
import argparse
import os
import re
import subprocess
import sys
from typing import Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from wenet.inference.loader import find_checkpoint  # noqa: E402


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True, help="experiment dir (train.yaml, avg_*.pt)")
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--test_set", default="test", help="data/<set> (wav.scp, text) and "
                   "<feat_dir>/<set>/data.list")
    p.add_argument("--feat_dir", default="raw_wav")
    p.add_argument("--data_type", default="shard", help="of data.list: shard | raw (run.sh's)")
    p.add_argument("--modes", default=None, help="default: the CTC modes, or the "
                   "transducer ones for a transducer")
    p.add_argument("--streaming", action="store_true",
                   help="chunk by chunk (encoder_chunk.onnx, --simulate_streaming)")
    p.add_argument("--chunk_size", type=int, default=16)
    p.add_argument("--left_chunks", type=int, default=4)
    p.add_argument("--beam_size", type=int, default=10)
    p.add_argument("--ctc_weight", type=float, default=0.5)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--skip_export", action="store_true", help="DIR/onnx is already there")
    p.add_argument("--reuse_reference", action="store_true",
                   help="keep recognize.py's texts of an earlier run of the same settings")
    return p


ENV = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}


def run(cmd: List[str], out: str = None) -> None:
    with open(out, "w") if out else open(os.devnull, "w") as sink:
        proc = subprocess.run(cmd, stdout=sink if out else subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, env=ENV)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")


def read_text(path: str) -> Dict[str, str]:
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, _, text = line.rstrip("\n").partition(" ")
            out[key] = " ".join(text.split())
    return out


def wer(ref: str, hyp: str) -> float:
    proc = subprocess.run([sys.executable, os.path.join(REPO, "tools/compute-wer.py"),
                           "--char=0", "--v=0", ref, hyp], capture_output=True, text=True,
                          env=ENV)
    m = re.search(r"Overall -> ([0-9.]+) %", proc.stdout)
    if m is None:
        sys.exit(f"compute-wer.py gave no WER for {hyp}: {proc.stdout[-500:]}{proc.stderr}")
    return float(m.group(1))


def main() -> None:
    args = get_parser().parse_args()
    py = sys.executable
    onnx_dir = os.path.join(args.dir, "onnx")
    if not args.skip_export:
        cmd = [py, os.path.join(REPO, "wenet/bin/export_onnx.py"), "--model_dir", args.dir,
               "--output_dir", onnx_dir, "--int8", "--chunk_size", str(args.chunk_size),
               "--num_decoding_left_chunks", str(args.left_chunks)]
        run(cmd + (["--checkpoint", args.checkpoint] if args.checkpoint else []))
    checkpoint = args.checkpoint or find_checkpoint(args.dir)
    transducer = os.path.isfile(os.path.join(onnx_dir, "joiner.onnx"))
    modes = (args.modes or ("rnnt_greedy_search rnnt_beam_search" if transducer else
                            "ctc_greedy_search ctc_prefix_beam_search attention_rescoring")
             ).split()
    tag = args.test_set + (f"_chunk{args.chunk_size}_left{args.left_chunks}"
                           if args.streaming else "")
    out = os.path.join(args.dir, "onnx_parity", tag)
    units = os.path.join(onnx_dir, "units.txt")
    bpe = os.path.join(onnx_dir, "bpe.model")
    ref_cmd = [py, os.path.join(REPO, "wenet/bin/recognize.py"), "--modes", " ".join(modes),
               "--config", os.path.join(args.dir, "train.yaml"), "--checkpoint", checkpoint,
               "--test_data", os.path.join(args.feat_dir, args.test_set, "data.list"),
               "--data_type", args.data_type,
               "--dict", units, "--beam_size", str(args.beam_size), "--ctc_weight",
               str(args.ctc_weight), "--result_dir", os.path.join(out, "ref")]
    ref_cmd += ["--bpe_model", bpe] if os.path.isfile(bpe) else []
    if args.streaming:
        ref_cmd += ["--batch_size", "1", "--simulate_streaming", "--decoding_chunk_size",
                    str(args.chunk_size), "--num_decoding_left_chunks", str(args.left_chunks)]
    else:
        ref_cmd += ["--batch_size", str(args.batch_size)]
    have_ref = all(os.path.isfile(os.path.join(out, "ref", m, "text")) for m in modes)
    if not (args.reuse_reference and have_ref):
        run(ref_cmd)
    text = os.path.join("data", args.test_set, "text")
    wav_scp = os.path.join("data", args.test_set, "wav.scp")
    print(f"# {args.dir} ({os.path.basename(checkpoint)}), {args.test_set}, "
          + (f"chunk {args.chunk_size}, {args.left_chunks} left chunks" if args.streaming
             else "full context") + f", beam {args.beam_size}")
    print("| mode | recognize.py WER | ONNX fp32 WER | fp32 texts differing | ONNX int8 WER |")
    print("|---|---:|---:|---:|---:|")
    for mode in modes:
        ref_file = os.path.join(out, "ref", mode, "text")
        row = [mode, f"{wer(text, ref_file):.2f}"]
        for precision in ("fp32", "int8"):
            hyp = os.path.join(out, precision, mode)
            os.makedirs(os.path.dirname(hyp), exist_ok=True)
            cmd = [py, "-m", "wenet.runtime", "--onnx_dir", onnx_dir, "--mode", mode,
                   "--wav_scp", wav_scp, "--batch_size", str(args.batch_size),
                   "--beam_size", str(args.beam_size), "--ctc_weight", str(args.ctc_weight),
                   "--output", hyp]
            cmd += (["--int8"] if precision == "int8" else []) + \
                (["--streaming"] if args.streaming else [])
            run(cmd)
            row.append(f"{wer(text, hyp):.2f}")
            if precision == "fp32":
                ours, ref = read_text(hyp), read_text(ref_file)
                row.append(str(sum(ours.get(k) != v for k, v in ref.items())))
        print("| " + " | ".join(row) + " |")
    sizes = sorted((f, os.path.getsize(os.path.join(onnx_dir, f)))
                   for f in os.listdir(onnx_dir) if f.endswith(".onnx"))
    print("files: " + ", ".join(f"{f} {n / 1e6:.2f} MB" for f, n in sizes))


if __name__ == "__main__":
    main()
