"""Transducer models through transcribe: the same text as recognize.py (eager and final.zip),
n-best of the beam sorted with the mode's output first, and timestamps from the frames that
emit each token (the lattice's best path, checked against brute force)."""
import itertools
import json

import numpy as np
import pytest
import torch

from tests.tiny_experiment import (TRANSDUCER, read_hyps, tiny_config, write_experiment,
                                   write_tones, write_wav_scp)
from wenet.bin.recognize import main as recognize_main
from wenet.bin.transcribe import main as transcribe_main
from wenet.alignment.rnnt import rnnt_viterbi_frames

KEYS = [f"u{i}" for i in range(4)]


def _brute_force_frames(lp, tokens, blank):
    """Enumerate every path: token u is emitted on frame f_u with f nondecreasing."""
    T, U = lp.shape[0], len(tokens)
    best, best_frames = -np.inf, None
    for frames in itertools.combinations_with_replacement(range(T), U):
        score, u = 0.0, 0
        for t in range(T):
            while u < U and frames[u] == t:
                score += lp[t, u, tokens[u]]
                u += 1
            score += lp[t, u, blank]
        if score > best:
            best, best_frames = score, list(frames)
    return best_frames


def test_viterbi_frames_equal_brute_force():
    gen = torch.Generator().manual_seed(0)
    for T, tokens in [(1, [2]), (3, [1, 2]), (5, [3, 3, 1]), (6, [2, 1, 2, 3]), (4, [])]:
        for _ in range(5):
            lp = torch.log_softmax(3 * torch.randn(T, len(tokens) + 1, 4, generator=gen), -1)
            assert rnnt_viterbi_frames(lp, tokens, 0) == _brute_force_frames(
                lp.double().numpy(), tokens, 0), (T, tokens)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("rnnt")
    write_tones(d, KEYS, [0.6, 0.3, 0.45, 0.5])
    write_wav_scp(d / "wav.scp", d, KEYS)
    write_experiment(d, tiny_config(TRANSDUCER), "avg_1.pt", jit=True, joint=4.0,
                     joint_blank=2.0)
    return d


@pytest.mark.parametrize("mode", ["rnnt_greedy_search", "rnnt_beam_search"])
def test_transducer_text_nbest_and_emitting_frames(model_dir, tmp_path, mode):
    d = model_dir
    recognize_main(["--config", str(d / "train.yaml"), "--test_data", str(d / "wav.scp"),
                    "--data_type", "scp", "--checkpoint", str(d / "avg_1.pt"), "--dict",
                    str(d / "units.txt"), "--beam_size", "3", "--mode", mode,
                    "--result_file", str(tmp_path / "rec")])
    expected = read_hyps(tmp_path / "rec")
    assert any(expected.values())
    for extra in ([], ["--checkpoint", str(d / "avg_1.pt")]):
        out = tmp_path / f"t{len(extra)}"
        assert transcribe_main(["--model_dir", str(d), "--beam_size", "3", "--mode", mode,
                                "--format", "json", "--nbest", "3", "--timestamps",
                                "--output", str(out), *extra, str(d / "wav.scp")]) == 0
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert {r["key"]: r["text"] for r in rows} == expected
        for r in rows:
            scores = [h["score"] for h in r["nbest"]]
            if mode == "rnnt_beam_search":
                assert scores == sorted(scores, reverse=True)
            starts = [t["start"] for t in r["tokens"]]
            assert len(starts) == len(r["nbest"][0]["token_ids"])
            assert starts == sorted(starts)
            assert all(0 <= t["start"] < t["end"] <= r["duration"] + 0.04 for t in r["tokens"])
