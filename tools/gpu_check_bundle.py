#!/usr/bin/env python3
"""Pack what stages 4-6 of the main job read into a small bundle for tools/gpu_check.sh.

From a recipe dir where stages 0-3 ran (``--recipe``, e.g. a checkout after ./run.sh):
the Kaldi data dirs of train/dev/test (``data/<set>``), the units and BPE model
(``data/lang_char``), the global CMVN (``raw_wav/train/global_cmvn``), with every
utterance's audio re-encoded by a lossy codec libsndfile reads (so the shard reader
takes it as it is, ``wenet.dataset.audio.AUDIO_FORMATS``). The bundle:

    DIR/manifest.json              codec, level, utterances and audio seconds per set
    DIR/data/<set>/wav.scp         "<utt> audio/<set>/<utt>.<ext>" (relative to DIR)
    DIR/data/<set>/{text,utt2spk,spk2utt}
    DIR/audio/<set>/<utt>.<ext>
    DIR/lang/{units.txt,bpe.model}, DIR/global_cmvn
    DIR/wheels/*.whl               with --bundle_wheels WHEEL_DIR

Audio is encoded at its own rate, which must be one the codec takes (Opus: 8, 12, 16,
24 or 48 kHz). An utterance whose audio cannot be read stops the tool naming it.
"""
from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Dict, List, Optional, Tuple

import numpy as np
import soundfile as sf

from wenet.dataset.audio import AudioError, load_audio

SETS = ("train", "dev", "test")
# codec -> (libsndfile format, subtype, file suffix)
CODECS: Dict[str, Tuple[str, str, str]] = {
    "opus": ("OGG", "OPUS", "opus"), "vorbis": ("OGG", "VORBIS", "ogg"),
    "mp3": ("MP3", "MPEG_LAYER_III", "mp3"), "flac": ("FLAC", "PCM_16", "flac")}
KALDI_FILES = ("text", "utt2spk", "spk2utt")


def get_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", required=True, help="recipe dir after stages 0-3")
    p.add_argument("--codec", default="opus", choices=sorted(CODECS))
    p.add_argument("--level", type=float, default=0.97,
                   help="libsndfile compression level, 0 (best quality) .. 1 (smallest); "
                        "Opus 0.97 is ~16 kbit/s on 16 kHz speech")
    p.add_argument("--units", default=None,
                   help="units.txt (default: the one data/lang_char/*_units.txt of the recipe)")
    p.add_argument("--cmvn", default=None, help="default: RECIPE/raw_wav/train/global_cmvn")
    p.add_argument("--bundle_wheels", default=None, help="copy the *.whl of this dir into DIR/wheels")
    p.add_argument("--nj", type=int, default=2, help="encoding processes")
    p.add_argument("bundle", help="output dir (must not exist, or be empty)")
    return p.parse_args(argv)


def _units_and_bpe(recipe: str, units: Optional[str]) -> Tuple[str, str]:
    if units is None:
        found = sorted(glob.glob(os.path.join(recipe, "data", "lang_char", "*_units.txt")))
        if len(found) != 1:
            raise SystemExit(f"{recipe}/data/lang_char holds {len(found)} *_units.txt files "
                             f"({', '.join(found) or 'none'}): name one with --units")
        units = found[0]
    bpe = units[: -len("_units.txt")] + ".model"
    for f in (units, bpe):
        if not os.path.isfile(f):
            raise SystemExit(f"no such file '{f}' (units.txt and the BPE model beside it)")
    return units, bpe


def read_scp(path: str) -> List[Tuple[str, str]]:
    """``(utt, value)`` of a wav.scp; a line without a value stops the tool naming it."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip("\n").split(maxsplit=1)
            if not parts:
                continue
            if len(parts) != 2:
                raise SystemExit(f"{path}:{n}: expected '<utt> <audio>', got {line.strip()!r}")
            out.append((parts[0], parts[1]))
    return out


def encode_one(job: Tuple[str, str, str, str, float]) -> float:
    """Encode one utterance's audio (a wav.scp value) to ``dest``; its duration in seconds."""
    utt, spec, dest, codec, level = job
    fmt, subtype, _ = CODECS[codec]
    try:
        wav, rate = load_audio(spec)
    except AudioError as e:
        raise RuntimeError(f"utterance {utt}: {e}") from e
    samples = wav.numpy().T  # (samples, channels) in [-1, 1]
    try:
        sf.write(dest, np.ascontiguousarray(samples, dtype=np.float32), rate, format=fmt,
                 subtype=subtype, compression_level=level)
    except (sf.LibsndfileError, RuntimeError, ValueError) as e:
        raise RuntimeError(f"utterance {utt}: {codec} cannot encode {rate} Hz audio ({e})") from e
    return samples.shape[0] / rate


def make_bundle(args: argparse.Namespace) -> Dict:
    """Write the bundle; returns the manifest."""
    if os.path.isdir(args.bundle) and os.listdir(args.bundle):
        raise SystemExit(f"{args.bundle} exists and is not empty: give a new dir")
    units, bpe = _units_and_bpe(args.recipe, args.units)
    cmvn = args.cmvn or os.path.join(args.recipe, "raw_wav", "train", "global_cmvn")
    if not os.path.isfile(cmvn):
        raise SystemExit(f"no such file '{cmvn}' (global CMVN: run.sh stage 1, or --cmvn)")
    ext = CODECS[args.codec][2]
    manifest: Dict = {"codec": args.codec, "level": args.level, "suffix": ext, "sets": {},
                      "source": os.path.abspath(args.recipe)}
    os.makedirs(os.path.join(args.bundle, "lang"), exist_ok=True)
    shutil.copyfile(units, os.path.join(args.bundle, "lang", "units.txt"))
    shutil.copyfile(bpe, os.path.join(args.bundle, "lang", "bpe.model"))
    shutil.copyfile(cmvn, os.path.join(args.bundle, "global_cmvn"))
    for name in SETS:
        src = os.path.join(args.recipe, "data", name)
        dst = os.path.join(args.bundle, "data", name)
        os.makedirs(dst)
        os.makedirs(os.path.join(args.bundle, "audio", name))
        for f in KALDI_FILES:
            shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))
        scp = read_scp(os.path.join(src, "wav.scp"))
        rel = [os.path.join("audio", name, f"{utt}.{ext}") for utt, _ in scp]
        jobs = [(utt, spec, os.path.join(args.bundle, r), args.codec, args.level)
                for (utt, spec), r in zip(scp, rel)]
        with ProcessPoolExecutor(max_workers=max(1, args.nj)) as pool:
            seconds = list(pool.map(encode_one, jobs, chunksize=32))
        with open(os.path.join(dst, "wav.scp"), "w", encoding="utf-8") as f:
            f.writelines(f"{utt} {r}\n" for (utt, _), r in zip(scp, rel))
        manifest["sets"][name] = {"utts": len(scp), "audio_s": round(sum(seconds), 2)}
        logging.info("%s: %d utterances, %.0f s of audio", name, len(scp), sum(seconds))
    if args.bundle_wheels:
        wheels = sorted(glob.glob(os.path.join(args.bundle_wheels, "*.whl")))
        os.makedirs(os.path.join(args.bundle, "wheels"))
        for w in wheels:
            shutil.copy(w, os.path.join(args.bundle, "wheels"))
        manifest["wheels"] = [os.path.basename(w) for w in wheels]
    manifest["bytes"] = dir_bytes(args.bundle)
    with open(os.path.join(args.bundle, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
    return manifest


def dir_bytes(top: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(top) for f in files)


def main(argv: Optional[List[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = get_args(argv)
    try:
        manifest = make_bundle(args)
    except RuntimeError as e:  # an utterance that cannot be read or encoded
        logging.error("%s", e)
        return 1
    audio = sum(s["audio_s"] for s in manifest["sets"].values())
    wheels = dir_bytes(os.path.join(args.bundle, "wheels")) if args.bundle_wheels else 0
    print(f"bundle {args.bundle}: {manifest['bytes'] / 1e6:.1f} MB ({wheels / 1e6:.1f} MB of "
          f"them wheels), {audio:.0f} s of audio as {args.codec} (level {args.level})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
