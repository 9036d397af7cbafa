#!/usr/bin/env python3
"""sherpa-onnx against our runtime on a test set: WER, texts that differ, RTF (1 thread).

    python bench/sherpa_parity.py --dir exp/synth_train_zipformer --data_dir data/test
    python bench/sherpa_parity.py --dir exp/synth_train_u2pp --data_dir data/test \\
        --chunk_size 16 --left_chunks 4 --c_api_features

Exports ``--dir``'s checkpoint twice with wenet/bin/export_onnx.py --int8 (this toolkit's
ONNX dir and ``--target sherpa-onnx``) into ``DIR/sherpa_parity/{onnx,sherpa}``, then
decodes every utterance of ``--data_dir`` (wav.scp, text) one at a time on one thread, fp32
and int8: offline with sherpa-onnx's offline recognizer and our runtime's greedy search
(full context), and for a streaming model online with sherpa-onnx's online recognizer and
our runtime chunk by chunk, each utterance followed by silence up to a whole chunk (both
decode the same samples). ``--c_api_features`` adds sherpa-onnx run with the features its
C API bindings (Android, iOS, Go, C#...) give: snip_edges and high_freq at its defaults.

Prints one table: WER of each, the number of utterances whose text differs from ours
(0 expected; docs/deploy.md lists the known causes), and the real-time factor of each
(decoding time, features included, over the audio's duration; model loading excluded).
Hypotheses land in ``DIR/sherpa_parity/<data dir name>/``.
"""
from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import time
from typing import Callable, Dict, List, Tuple

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from wenet.bin import export_onnx  # noqa: E402
from wenet.eval.wer import compute_wer  # noqa: E402
from wenet.export import sherpa_recognizer as sr  # noqa: E402
from wenet.runtime.audio import InputError, read_audio, scp_entry  # noqa: E402
from wenet.runtime.fbank import fbank  # noqa: E402
from wenet.runtime.recognizer import model_tokenizer  # noqa: E402
from wenet.runtime.session import OnnxModel  # noqa: E402

Decoder = Callable[[np.ndarray, int], str]


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True, help="experiment dir (train.yaml, a checkpoint)")
    p.add_argument("--checkpoint", default=None, help="default: the dir's newest avg_*.pt...")
    p.add_argument("--data_dir", required=True, help="Kaldi data dir: wav.scp and text")
    p.add_argument("--chunk_size", type=int, default=16)
    p.add_argument("--left_chunks", type=int, default=4)
    p.add_argument("--max_utts", type=int, default=0, help="the first N utterances (0: all)")
    p.add_argument("--c_api_features", action="store_true",
                   help="also sherpa-onnx with the features of its C API bindings")
    p.add_argument("--skip_export", action="store_true",
                   help="DIR/sherpa_parity/{onnx,sherpa} are already there")
    return p


def export(args: argparse.Namespace, ours: str, sherpa: str) -> None:
    common = ["--model_dir", args.dir, "--int8", "--chunk_size", str(args.chunk_size),
              "--num_decoding_left_chunks", str(args.left_chunks)]
    common += ["--checkpoint", args.checkpoint] if args.checkpoint else []
    export_onnx.main(common + ["--output_dir", ours])
    export_onnx.main(common + ["--output_dir", sherpa, "--target", "sherpa-onnx"])


def run(decode: Decoder, utts: List[Tuple[str, np.ndarray, int]], hyp_path: str
        ) -> Tuple[Dict[str, str], float]:
    """Texts of every utterance (written to ``hyp_path``) and the seconds they took."""
    texts, seconds = {}, 0.0
    for key, samples, rate in utts:
        start = time.perf_counter()
        texts[key] = " ".join(decode(samples, rate).split())
        seconds += time.perf_counter() - start
    os.makedirs(os.path.dirname(hyp_path), exist_ok=True)
    with open(hyp_path, "w", encoding="utf-8") as f:
        f.writelines(f"{k} {t}\n" for k, t in texts.items())
    return texts, seconds


def decoders(ours_dir: str, sherpa_dir: str, int8: bool, online: bool,
             c_api: bool) -> Dict[str, Decoder]:
    """name -> decode(samples, rate) -> text, for one precision and mode."""
    model = OnnxModel(ours_dir, int8=int8, num_threads=1, streaming=online)
    tokenizer = model_tokenizer(model)
    eos = model.info.eos

    def ours(samples: np.ndarray, rate: int) -> str:
        ids = sr.runtime_greedy_ids(model, fbank(samples, model.info.features), online)
        return tokenizer.decode(ids, eos=eos)

    make = sr.online_recognizer if online else sr.offline_recognizer
    run_sherpa = sr.decode_online if online else sr.decode_offline
    out: Dict[str, Decoder] = {"ours": ours}
    for name, c in (("sherpa-onnx", False), ("sherpa-onnx C API features", True)):
        if c and not c_api:
            continue
        recognizer = make(sherpa_dir, int8=int8, num_threads=1, c_api_features=c)
        out[name] = lambda s, r, rec=recognizer: run_sherpa(rec, s, r)[0]
    return out


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    args = get_parser().parse_args()
    root = os.path.join(args.dir, "sherpa_parity")
    ours_dir, sherpa_dir = os.path.join(root, "onnx"), os.path.join(root, "sherpa")
    if not args.skip_export:
        export(args, ours_dir, sherpa_dir)
    manifest = sr.read_manifest(sherpa_dir)
    with open(os.path.join(args.data_dir, "wav.scp"), encoding="utf-8") as f:
        items = [scp_entry(line) for line in f if line.strip()]
    items = items[:args.max_utts] if args.max_utts > 0 else items
    utts, skipped = [], []
    for key, spec in items:
        try:
            samples, rate = read_audio(spec)
        except InputError as e:
            skipped.append(f"{key}: {e}")
            continue
        utts.append((key, samples, rate))
    duration = sum(len(s) / r for _, s, r in utts)
    ref = os.path.join(args.data_dir, "text")
    out_dir = os.path.join(root, os.path.basename(os.path.normpath(args.data_dir)))
    window = OnnxModel(ours_dir, streaming=True).chunks.window if "online" in manifest else None
    print(f"# {args.dir}, {args.data_dir}: {len(utts)} utterances, {duration:.1f} s"
          + (f", {len(skipped)} unreadable: {skipped[:3]}" if skipped else "")
          + (f"; online: chunk {args.chunk_size}, {args.left_chunks} left chunks"
             if window else "; not a streaming model: offline only"))
    print("| precision | mode | decoder | WER % | texts differing from ours | RTF |")
    print("|---|---|---|---:|---:|---:|")
    examples: List[str] = []
    for int8 in (False, True):
        for online in ((False, True) if window else (False,)):
            batch = [(k, sr.whole_chunks(s, window) if online else s, r) for k, s, r in utts]
            precision, mode = ("int8" if int8 else "fp32"), ("online" if online else "offline")
            base = None
            for name, decode in decoders(ours_dir, sherpa_dir, int8, online,
                                         args.c_api_features).items():
                hyp = os.path.join(out_dir, precision, mode, name.replace(" ", "_"))
                texts, seconds = run(decode, batch, hyp)
                wer = compute_wer(ref, hyp, io.StringIO(), verbose=0).wer
                base = base or texts
                differ = [k for k in base if texts[k] != base[k]]
                examples += [f"{precision} {mode} {name} {k}: ours '{base[k]}', "
                             f"this '{texts[k]}'" for k in differ[:3]]
                print(f"| {precision} | {mode} | {name} | {wer:.2f} | {len(differ)} | "
                      f"{seconds / duration:.4f} |")
    if examples:
        print("\nTexts that differ (up to 3 per row):\n" + "\n".join(examples))


if __name__ == "__main__":
    main()
