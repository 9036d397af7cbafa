"""Raw list reading (wenet/dataset/sources.py): segments of a piped recording."""
from __future__ import annotations

import json

import numpy as np
import soundfile as sf
import torch

from wenet.dataset.audio import load_audio
from wenet.dataset.sources import raw_samples
from wenet.dataset.stats import PipelineStats


def test_segments_of_a_piped_recording_run_its_pipe_once(tmp_path):
    # make_raw_list.py --segments on Switchboard: ~100 lines per side, each "sph2pipe ... |"
    rng = np.random.default_rng(0)
    runs = tmp_path / "runs"
    specs = {}
    for name in ("ra", "rb"):
        sf.write(tmp_path / f"{name}.wav", (rng.standard_normal(16000) * 3000).astype(np.int16), 16000)
        specs[name] = f"sh -c 'echo {name} >> {runs}; cat {tmp_path / name}.wav' |"
    cuts = [("ra-1", "ra", 0.0, 0.25), ("ra-2", "ra", 0.25, 0.6), ("ra-3", "ra", 0.7, -1.0),
            ("rb-1", "rb", 0.1, 0.3), ("ra-4", "ra", 0.2, 0.4)]  # back to ra: its pipe again
    lines = [(f"data.list:{i + 1}", json.dumps({"key": k, "wav": specs[r], "txt": "a", "start": s, "end": e}))
             for i, (k, r, s, e) in enumerate(cuts)]
    samples = list(raw_samples(lines, PipelineStats("data.list")))
    assert runs.read_text() == "ra\nrb\nra\n"
    assert [s["key"] for s in samples] == [k for k, *_ in cuts]
    for sample, (_, r, s, e) in zip(samples, cuts):
        wav, rate = load_audio(str(tmp_path / f"{r}.wav"), s, e)
        assert sample["sample_rate"] == rate and torch.equal(sample["wav"], wav)
