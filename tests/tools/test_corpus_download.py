"""Stage-0 downloads (local/speechocean762_data_prep.sh, local/swbd1_data_download.sh with
--download true): an unpack that is interrupted leaves nothing the next run would take
for complete, and the next run unpacks again (from the kept archive).

The "download" is a stub curl/wget copying a small fake archive; the interruption is a
stub tar that unpacks part of it and then dies of SIGKILL, as a killed tar would."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import soundfile as sf
from tests.common import ROOT_PATH

ROOT = ROOT_PATH
PREP = ROOT / "local" / "speechocean762_data_prep.sh"
SETS = {"train": {"0001": ["000010001", "000010002"], "0002": ["000020001"]},
        "dev": {"0003": ["000030001"]}}
CURL = """#!/usr/bin/env bash
# curl ... -o FILE URL / wget -O FILE URL, for file:// URLs only
out=; url=
while [ "$#" -gt 0 ]; do
  case "$1" in -o|-O) out=$2; shift 2 ;; -*) shift ;; *) url=$1; shift ;; esac
done
echo "${url}" >> "$(dirname "$0")/../curl.log"
cp "${url#file://}" "${out}"
"""
KILLED_TAR = """#!/usr/bin/env bash
# tar killed part-way: the lists are out, the audio ({exclude}) is not.
"{tar}" "$@" --exclude='{exclude}'
kill -9 $$
"""


def make_release(tmp: Path) -> Path:
    """speechocean762.tar.gz holding speechocean762/{train,dev}/ lists and WAVE/ audio."""
    src = tmp / "release" / "speechocean762"
    for name, speakers in SETS.items():
        (src / name).mkdir(parents=True)
        lines: Dict[str, List[str]] = {"wav.scp": [], "text": [], "utt2spk": [], "spk2gender": []}
        for spk, utts in speakers.items():
            lines["spk2gender"].append(f"{spk} m")
            for utt in utts:
                rel = f"WAVE/SPEAKER{spk}/{utt}.WAV"
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                sf.write(src / rel, np.full(1600, 0.1, dtype=np.float32), 16000, subtype="PCM_16")
                lines["wav.scp"].append(f"{utt}\t{rel}")
                lines["text"].append(f"{utt}\tHELLO THERE")
                lines["utt2spk"].append(f"{utt} {spk}")
        for fname, rows in lines.items():
            (src / name / fname).write_text("".join(r + "\n" for r in sorted(rows)))
    tgz = tmp / "speechocean762.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(src, arcname="speechocean762")
    return tgz


def make_bins(tmp: Path, exclude: str) -> Dict[str, Path]:
    """PATH dirs: "ok" (stub curl and wget) and "killed" (the same, and a tar that dies
    after unpacking all but the members matching ``exclude``)."""
    bins = {}
    killed_tar = KILLED_TAR.format(tar=shutil.which("tar"), exclude=exclude)
    for kind, tools in (("ok", {"curl": CURL, "wget": CURL}),
                        ("killed", {"curl": CURL, "wget": CURL, "tar": killed_tar})):
        b = tmp / f"bin_{kind}"
        b.mkdir()
        for name, text in tools.items():
            (b / name).write_text(text)
            (b / name).chmod(0o755)
        bins[kind] = b
    return bins


@pytest.fixture()
def setup(tmp_path: Path):
    return tmp_path, make_release(tmp_path), make_bins(tmp_path, "*.WAV")


def prep(tmp: Path, tgz: Path, bin_dir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin"
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(["bash", str(PREP), "--download", "true", "--url", f"file://{tgz}",
                           str(tmp / "corpora" / "speechocean762"), str(tmp / "data")],
                          capture_output=True, text=True, env=env, timeout=300)


def test_an_interrupted_unpack_leaves_no_corpus_and_is_redone(setup):
    tmp, tgz, bins = setup
    corpus = tmp / "corpora" / "speechocean762"
    r = prep(tmp, tgz, bins["killed"])
    assert r.returncode != 0
    assert not corpus.exists()  # no train/wav.scp without its audio
    assert "unpacking" in r.stderr and "failed (exit 137)" in r.stderr
    assert (tmp / "corpora" / "speechocean762.tar.gz").is_file()  # kept: no second download

    r = prep(tmp, tgz, bins["ok"])
    assert r.returncode == 0, r.stdout + r.stderr
    for name, speakers in SETS.items():
        for spk, utts in speakers.items():
            for utt in utts:
                assert (corpus / f"WAVE/SPEAKER{spk}/{utt}.WAV").is_file()
        scp = (tmp / "data" / name / "wav.scp").read_text().split()
        assert scp[0::2] == sorted(u for utts in speakers.values() for u in utts)
    assert sorted(p.name for p in (tmp / "corpora").iterdir()) == ["speechocean762"]  # no temp, no archive
    assert (tmp / "curl.log").read_text().splitlines() == [f"file://{tgz}"]


def test_a_leftover_directory_without_the_lists_is_not_taken_for_the_corpus(setup):
    tmp, tgz, bins = setup
    corpus = tmp / "corpora" / "speechocean762"
    (corpus / "WAVE").mkdir(parents=True)  # e.g. a partial unpack by an older version
    r = prep(tmp, tgz, bins["ok"])
    assert r.returncode == 1
    assert f"{corpus} exists but holds no train/wav.scp: remove it" in r.stderr
    assert not (tmp / "curl.log").exists()


def test_an_interrupted_ms98_unpack_is_redone(tmp_path: Path):
    src = tmp_path / "release" / "swb_ms98_transcriptions"
    (src / "20" / "2001").mkdir(parents=True)
    (src / "sw-ms98-dict.text").write_text("hello h eh l ow\n")
    (src / "20" / "2001" / "sw2001A-ms98-a-trans.text").write_text("sw2001A-ms98-a-0001 0.0 1.0 hello\n")
    tgz = tmp_path / "ms98.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(src, arcname="swb_ms98_transcriptions")
    swbd, local = tmp_path / "swbd", tmp_path / "data" / "local" / "train"
    swbd.mkdir()
    bins = make_bins(tmp_path, "*-trans.text")

    def download(kind: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(ROOT / "local" / "swbd1_data_download.sh"), "--download", "true",
                               "--url", f"file://{tgz}", str(swbd), str(local)], capture_output=True,
                              text=True, timeout=60, env={"PATH": f"{bins[kind]}:/usr/bin:/bin"})

    r = download("killed")
    assert r.returncode != 0
    assert not (local / "swb_ms98_transcriptions").exists()  # the dict without the transcripts
    assert "failed (exit 137)" in r.stderr
    r = download("ok")
    assert r.returncode == 0, r.stderr
    out = local / "swb_ms98_transcriptions"
    assert (out / "sw-ms98-dict.text").read_text() == "hello h eh l ow\n"
    assert (out / "20" / "2001" / "sw2001A-ms98-a-trans.text").is_file()
    assert sorted(p.name for p in local.iterdir()) == ["swb_ms98_transcriptions"]  # no temp, no archive
    assert (tmp_path / "curl.log").read_text().splitlines() == [f"file://{tgz}"]
