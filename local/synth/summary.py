"""Size report of Kaldi data dirs: utterances, hours, speakers (voices), words.

Hours come from the WAV headers (soundfile), so the report describes the audio
actually on disk, after text normalisation and fix_data_dir.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import List, Optional, Set

import soundfile as sf

from wenet.utils.file_utils import read_kaldi_map


@dataclass
class SetSummary:
    """Sizes of one data dir; ``vocab`` is the set of transcript words."""

    name: str
    utts: int
    hours: float
    voices: int
    vocab: Set[str]


def summarize(data_dir: str) -> SetSummary:
    """Count utterances, hours of audio, distinct speakers and words of ``data_dir``."""
    wavs = read_kaldi_map(os.path.join(data_dir, "wav.scp"))
    seconds = 0.0
    for utt, path in wavs.items():
        if path.endswith("|"):
            raise ValueError(f"{data_dir}/wav.scp: {utt}: pipe commands are not supported here")
        try:
            info = sf.info(path)
        except Exception as e:  # soundfile raises several types for bad files
            raise ValueError(f"{data_dir}/wav.scp: {utt}: cannot read {path}: {e}") from e
        seconds += info.frames / info.samplerate
    speakers = set(read_kaldi_map(os.path.join(data_dir, "utt2spk")).values())
    text = read_kaldi_map(os.path.join(data_dir, "text"))
    vocab = {w for t in text.values() for w in t.split()}
    return SetSummary(os.path.basename(os.path.normpath(data_dir)), len(wavs), seconds / 3600,
                      len(speakers), vocab)


def format_table(summaries: List[SetSummary]) -> str:
    """A plain-text table; words unseen in the first set are counted for the others."""
    ref = summaries[0].vocab if summaries else set()
    lines = [f"{'set':<8} {'utts':>6} {'hours':>7} {'voices':>6} {'words':>6} {'unseen':>6}"]
    for i, s in enumerate(summaries):
        unseen = "-" if i == 0 else str(len(s.vocab - ref))
        lines.append(f"{s.name:<8} {s.utts:>6} {s.hours:>7.3f} {s.voices:>6} {len(s.vocab):>6} {unseen:>6}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data_dirs", nargs="+", help="Kaldi data dirs; the first is the reference "
                        "for counting unseen words (use the training set)")
    args = parser.parse_args(argv)
    print(format_table([summarize(d) for d in args.data_dirs]))


if __name__ == "__main__":
    main()
