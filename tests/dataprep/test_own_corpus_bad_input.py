"""Stage 0 of ``--corpus custom`` on bad input: each problem is skipped and counted in
<set>/stage0_report.txt naming the file and line (or is one error naming them), and the
good utterances of the same set still come through."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List

import numpy as np
import pytest
import soundfile as sf

from tests.common import REPO
from tests.dataprep import own_corpus as oc
from wenet.dataprep.custom.prepare import REPORT_NAME, hold_out_speakers, prepare_corpus
from wenet.dataprep.custom.records import CorpusError, Entry
from wenet.utils.file_utils import read_kaldi_map

HEADER = "path\tstart\tend\tsentence\tspeaker"


@pytest.fixture(scope="module")
def recs(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad_input_audio")
    out = oc.write_recordings(d)
    d = d / "audio"
    (d / "garbage.wav").write_bytes(b"RIFF not really a wav file")
    t = np.arange(8000) / 8000
    sf.write(d / "at8k.wav", (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32), 8000)
    return out


def good_rows(recs, set_name: str) -> List[str]:
    return [f"{recs[r]}\t{s}\t{e}\t{t}\t{spk}" for _, spk, r, s, e, t in oc.utterances(set_name)]


def write_tsv(d: Path, name: str, rows: List[str]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{name}.tsv"
    path.write_bytes(("\n".join([HEADER] + rows) + "\n").encode("utf-8"))
    return path


def report_lines(out: Path, set_name: str) -> List[str]:
    return (out / set_name / REPORT_NAME).read_text().splitlines()


def kept_keys(out: Path, set_name: str) -> List[str]:
    return sorted(read_kaldi_map(str(out / set_name / "text")))


def good_keys(set_name: str) -> List[str]:
    return sorted(u[0] for u in oc.utterances(set_name))


# (bad row appended after the 6 good train rows, its line 8, reason in the report)
BAD_ROWS = {
    "missing audio": ("{dir}/nowhere.wav\t0.1\t0.5\tlost\ts9", "audio missing or unreadable"),
    "unreadable audio": ("{dir}/garbage.wav\t0.1\t0.5\tbroken\ts9", "audio missing or unreadable"),
    "empty transcript": ("{s1}\t0.1\t0.5\t  \ts1", "empty transcript"),
    "punctuation only": ("{s1}\t0.1\t0.5\t?!\ts1", "empty transcript"),
    "duplicate key": ("{s1}\t0.1\t0.9\tagain\ts1", "duplicate key"),
    "segment past the end": ("{s1}\t1.5\t2.5\tlate\ts1", "segment past the end of its recording"),
    "start after end": ("{s1}\t0.5\t0.4\tbackwards\ts1", "segment start >= end"),
    "start equals end": ("{s1}\t0.5\t0.5\tnothing\ts1", "segment start >= end"),
    "too few fields": ("{s1}\t0.1\t0.5", "row with 3 fields, header has 5"),
    "times not numbers": ("{s1}\tzero\t0.5\tbad\ts1", "segment times are not numbers"),
}


@pytest.mark.parametrize("case", list(BAD_ROWS))
def test_a_bad_row_is_skipped_counted_and_named_the_rest_kept(case, recs, tmp_path):
    row, reason = BAD_ROWS[case]
    row = row.format(dir=recs["s1rec"].parent, s1=recs["s1rec"])
    corpus = tmp_path / "corpus"
    manifest = write_tsv(corpus, "train", good_rows(recs, "train") + [row])
    for s in ("dev", "test"):
        write_tsv(corpus, s, good_rows(recs, s))
    reports = prepare_corpus(str(corpus), str(tmp_path / "data"))
    assert reports["train"].num_skipped == 1
    lines = report_lines(tmp_path / "data", "train")
    assert "skipped: 1" in lines and f"  {reason}: 1" in lines
    listed = [x for x in lines if x.startswith("skip\t")]
    assert len(listed) == 1 and listed[0].startswith(f"skip\t{reason}\t{manifest}:8")
    if case == "duplicate key":
        assert listed[0].endswith(f"first at {manifest}:2")
    assert kept_keys(tmp_path / "data", "train") == good_keys("train")
    assert kept_keys(tmp_path / "data", "test") == good_keys("test")


def test_a_line_that_is_not_utf8_is_skipped_naming_its_line(recs, tmp_path):
    corpus = tmp_path / "corpus"
    for s in oc.SETS:
        write_tsv(corpus, s, good_rows(recs, s))
    manifest = corpus / "train.tsv"
    lines = manifest.read_bytes().splitlines(keepends=True)
    lines.insert(3, f"{recs['s1rec']}\t0.1\t0.5\tcaf\xe9\ts1\n".encode("latin-1"))
    manifest.write_bytes(b"".join(lines))
    prepare_corpus(str(corpus), str(tmp_path / "data"))
    report = report_lines(tmp_path / "data", "train")
    column = len(f"{recs['s1rec']}\t0.1\t0.5\tcaf") + 1
    assert f"skip\tline not valid UTF-8\t{manifest}:4 (byte {column})" in report
    assert kept_keys(tmp_path / "data", "train") == good_keys("train")


def test_kaldi_dir_keys_in_one_file_only_and_duplicates_are_skipped(recs, tmp_path):
    corpus = oc.kaldi(tmp_path / "corpus", recs)
    train = corpus / "train"
    with open(train / "text", "a") as f:
        f.write("only-in-text SOME WORDS\n")  # line 7
    with open(train / "utt2spk", "a") as f:
        f.write("s1rec-00000100-00000900 s1\n")  # line 7: a second line of a key
    segs = (train / "segments").read_text().splitlines()
    (train / "segments").write_text("\n".join(segs[:-1]) + "\n")  # s3's 2nd: not in segments
    prepare_corpus(str(corpus), str(tmp_path / "data"))
    report = report_lines(tmp_path / "data", "train")
    assert "  key missing from a file: 2" in report and "  duplicate key in utt2spk: 1" in report
    assert f"skip\tkey missing from a file\t{train}/text:7 (only-in-text not in segments, " \
           "utt2spk)" in report
    assert any(x.startswith(f"skip\tkey missing from a file\t{train}/text:6, {train}/utt2spk:6 "
                            f"({segs[-1].split()[0]} not in segments)") for x in report)
    assert f"skip\tduplicate key in utt2spk\t{train}/utt2spk:7 (s1rec-00000100-00000900, " \
           f"first at {train}/utt2spk:1)" in report
    assert kept_keys(tmp_path / "data", "train") == good_keys("train")[:-1]


def test_a_missing_column_is_an_error_naming_file_and_line(recs, tmp_path):
    corpus = tmp_path / "corpus"
    (corpus).mkdir()
    (corpus / "train.csv").write_text("path,words,speaker\n/a.wav,hello,s1\n")
    with pytest.raises(CorpusError, match=rf"{corpus}/train.csv:1: no text column \(one of "
                       r"text, sentence, transcription, transcript\); the header has: path, "
                       r"words, speaker"):
        prepare_corpus(str(corpus), str(tmp_path / "data"), test_sets=[])
    r = subprocess.run([sys.executable, f"{REPO}/tools/custom_corpus_prep.py", "--test_sets=",
                        str(corpus),
                        str(tmp_path / "data")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"{corpus}/train.csv:1: no text column" in r.stderr
    assert "Traceback" not in r.stderr


def test_another_sample_rate_is_kept_and_counted(recs, tmp_path):
    corpus = tmp_path / "corpus"
    at8k = recs["s1rec"].parent / "at8k.wav"
    write_tsv(corpus, "train", good_rows(recs, "train") + [f"{at8k}\t0.0\t0.5\tlow rate\ts3"])
    for s in ("dev", "test"):
        write_tsv(corpus, s, good_rows(recs, s))
    prepare_corpus(str(corpus), str(tmp_path / "data"), sample_rate=16000)
    report = report_lines(tmp_path / "data", "train")
    assert "utterances at 8000 Hz (resampled to the model's 16000 Hz when read): 1" in report
    assert "skipped: 0" in report and len(kept_keys(tmp_path / "data", "train")) == 7


def test_speakers_shared_between_train_and_test_are_reported(recs, tmp_path):
    corpus = tmp_path / "corpus"
    write_tsv(corpus, "train", good_rows(recs, "train"))
    write_tsv(corpus, "dev", good_rows(recs, "dev"))
    test_rows = [r.rsplit("\t", 1)[0] + "\ts2" for r in good_rows(recs, "test")]
    write_tsv(corpus, "test", test_rows)
    prepare_corpus(str(corpus), str(tmp_path / "data"))
    assert "speakers shared with train: 1" in report_lines(tmp_path / "data", "test")
    assert "note: 1 speakers of test are also in train: s2" in report_lines(tmp_path / "data", "test")
    assert not any("speakers shared" in x for x in report_lines(tmp_path / "data", "dev"))


def test_without_a_dev_set_whole_speakers_are_held_out(recs, tmp_path):
    corpus = tmp_path / "corpus"
    write_tsv(corpus, "train", good_rows(recs, "train"))
    write_tsv(corpus, "test", good_rows(recs, "test"))
    prepare_corpus(str(corpus), str(tmp_path / "data"), dev_share=0.4, seed=5)
    spk = {s: set(read_kaldi_map(str(tmp_path / "data" / s / "utt2spk")).values())
           for s in ("train", "dev")}
    assert spk["train"] | spk["dev"] == {"s1", "s2", "s3"} and not spk["train"] & spk["dev"]
    # 0.4 of 6 utterances: one speaker (2 utterances) is not enough, two are
    assert len(spk["dev"]) == 2
    again = tmp_path / "again"
    prepare_corpus(str(corpus), str(again), dev_share=0.4, seed=5)
    assert (again / "dev" / "text").read_text() == (tmp_path / "data" / "dev" / "text").read_text()


def test_hold_out_keeps_a_speaker_each_side_and_never_splits_one():
    entries = [Entry(f"{spk}-{i}", "a.wav", "x", spk, "m:1") for spk in "abcdefgh"
               for i in range(3 if spk < "e" else 1)]
    for seed in range(20):
        for share in (0.01, 0.5, 0.99):
            train, dev, chosen = hold_out_speakers(entries, share, seed)
            assert {e.speaker for e in dev} == set(chosen)
            assert not {e.speaker for e in train} & set(chosen)
            assert 1 <= len(chosen) <= 7 and len(train) + len(dev) == len(entries)
            assert len(dev) >= min(share * len(entries), len(entries) - 3)
    with pytest.raises(CorpusError, match="1 speaker"):
        hold_out_speakers(entries[:3], 0.1, 0)


def test_a_missing_set_names_where_it_was_looked_for(recs, tmp_path):
    corpus = tmp_path / "corpus"
    write_tsv(corpus, "train", good_rows(recs, "train"))
    with pytest.raises(CorpusError, match=rf"{corpus} holds no set 'eval' \(looked for "
                       rf"{corpus}/eval/wav.scp, .*\); name the set with --test_sets"):
        prepare_corpus(str(corpus), str(tmp_path / "data"), test_sets=["eval"])


def test_lhotse_missing_names_the_requirements_file(recs, tmp_path, monkeypatch):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train_cuts.jsonl").write_text("{}\n")
    monkeypatch.setitem(sys.modules, "lhotse", None)  # import lhotse raises ImportError
    with pytest.raises(CorpusError, match="pip install -r requirements-lhotse.txt"):
        prepare_corpus(str(corpus), str(tmp_path / "data"), test_sets=[])
