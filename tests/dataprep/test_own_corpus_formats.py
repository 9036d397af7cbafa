"""Stage 0 of ``--corpus custom``: every form of one tiny corpus (tests/dataprep/own_corpus.py)
gives the data dirs the Kaldi form of the same corpus gives: the same keys, the same
normalised text, the same speakers where the form names them, and the same audio samples
(read through the pipeline's ``load_audio``, segments cut)."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Dict, Tuple

import pytest
import torch

from tests.common import REPO
from tests.dataprep import own_corpus as oc
from wenet.dataprep.custom.prepare import prepare_corpus
from wenet.dataset.audio import load_audio
from wenet.utils.file_utils import read_kaldi_map, read_segments

# form -> (builder, reference form, does the form name speakers)
FORMS = {
    "kaldi_segments": ("kaldi", "kaldi", True),
    "kaldi_pipes": ("kaldi_pipes", "kaldi", True),
    "tsv": ("tsv", "kaldi", True),
    "csv": ("csv", "kaldi", True),
    "nemo_jsonl": ("nemo", "kaldi", False),
    "lhotse": ("lhotse", "kaldi", True),
    "common_voice_mp3": ("cv", "kaldi_mp3", True),
    "audiofolder": ("audiofolder", "kaldi_whole", False),
    "librispeech": ("librispeech", "kaldi_whole", True),
}


def read_data_dir(d: Path) -> Dict[str, Tuple[str, str, torch.Tensor]]:
    """{key: (text, speaker, samples)} of a written data dir."""
    wavs = read_kaldi_map(str(d / "wav.scp"))
    texts = read_kaldi_map(str(d / "text"))
    spk = read_kaldi_map(str(d / "utt2spk"))
    if (d / "segments").exists():
        cuts = {k: (wavs[r], s, e) for k, (r, s, e) in read_segments(str(d / "segments")).items()}
    else:
        cuts = {k: (w, 0.0, None) for k, w in wavs.items()}
    out = {}
    for key, (spec, start, end) in cuts.items():
        wav, rate = load_audio(spec, start, end)
        assert rate == oc.RATE
        out[key] = (texts[key], spk[key], wav)
    return out


@pytest.fixture(scope="session")
def prepared(corpora, tmp_path_factory):
    """prepare(form) -> {set: read_data_dir}, each form prepared once."""
    done: Dict[str, Dict[str, dict]] = {}

    def prepare(form: str) -> Dict[str, dict]:
        if form not in done:
            out = tmp_path_factory.mktemp(f"data_{form}")
            reports = prepare_corpus(str(corpora / form), str(out))
            assert all(r.num_skipped == 0 for r in reports.values()), \
                {s: list(r.lines()) for s, r in reports.items()}
            if form == "kaldi_pipes":  # kept as they are, not run at stage 0, counted
                for s, r in reports.items():
                    assert r.counts["utterances read by a pipe command (not run at stage 0: "
                                    "audio, duration and sample rate unchecked)"] == \
                        len(oc.utterances(s))
            done[form] = {s: read_data_dir(out / s) for s in oc.SETS}
        return done[form]
    return prepare


@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_gives_the_data_dirs_of_its_kaldi_form(form, prepared):
    if form == "lhotse":
        pytest.importorskip("lhotse")
    built, reference, has_speakers = FORMS[form]
    got, want = prepared(built), prepared(reference)
    for set_name in oc.SETS:
        g, w = got[set_name], want[set_name]
        assert sorted(g) == sorted(w) == sorted(u[0] for u in oc.utterances(set_name))
        for key in w:
            assert g[key][0] == w[key][0]
            if has_speakers:
                assert g[key][1] == w[key][1]
            else:  # no speaker in the form: each utterance is its own
                assert g[key][1] == key
            assert torch.equal(g[key][2], w[key][2]), key


def test_reference_holds_the_corpus_as_written(prepared, corpora):
    """The reference itself against the corpus definition: normalised text, speakers, and
    the segment's samples of the recording (rounded to samples as cut_audio cuts)."""
    got = prepared("kaldi")
    for set_name in oc.SETS:
        for key, spk, rec, start, end, text in oc.utterances(set_name):
            whole, _ = load_audio(str(corpora / "rec" / "audio" / f"{rec}.wav"))
            first, last = round(start * oc.RATE), round(end * oc.RATE)
            assert got[set_name][key][0] == " ".join(
                text.upper().replace(",", " ").replace("!", " ").split())
            assert got[set_name][key][1] == spk
            assert torch.equal(got[set_name][key][2], whole[:, first:last])


def test_mp3_duration_comes_from_the_header_without_decoding(corpora):
    """Common Voice's mp3: soundfile.info gives frames and rate (libsndfile reads mp3)."""
    import soundfile as sf
    info = sf.info(str(corpora / "cv" / "clips" / f"{oc.utterances('test')[0][0]}.mp3"))
    assert info.samplerate == oc.RATE and info.frames > 0.7 * oc.RATE


def test_stage0_script_writes_valid_dirs(corpora, tmp_path):
    """local/custom_data_prep.sh (run.sh's stage 0): the Python prep then
    tools/validate_data_dir.sh on every set."""
    r = subprocess.run([f"{REPO}/local/custom_data_prep.sh", "--test_sets", "test",
                        str(corpora / "csv"), str(tmp_path / "data")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for s in oc.SETS:
        assert f"{tmp_path}/data/{s} is valid" in r.stdout + r.stderr
