"""Switchboard stage 0 (local/swbd_stage0.sh) on a miniature corpus in the LDC
layouts, SPHERE reading through libsndfile (tools/sph2wav.py, the audio reader),
and stages 1-3 of run.sh on the result."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
import soundfile as sf

from wenet.dataset.audio import AudioError, load_audio
from tests.common import ROOT_PATH

ROOT = ROOT_PATH
RATE = 8000
SPH2WAV = ROOT / "tools" / "sph2wav.py"


def ulaw_decode(codes: np.ndarray) -> np.ndarray:
    """G.711 mu-law code -> linear 16-bit sample (ITU-T G.711, computed here, not by libsndfile)."""
    u = ~codes.astype(np.int32) & 0xFF
    magnitude = ((((u & 0x0F) << 3) + 0x84) << ((u >> 4) & 0x07)) - 0x84
    return np.where(u & 0x80, -magnitude, magnitude).astype(np.int16)


def alaw_decode(codes: np.ndarray) -> np.ndarray:
    """G.711 a-law code -> linear 16-bit sample (even bits inverted; sign bit set = positive)."""
    a = codes.astype(np.int32) ^ 0x55
    exponent, mantissa = (a >> 4) & 0x07, a & 0x0F
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8,
                         ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0))
    return np.where(a & 0x80, magnitude, -magnitude).astype(np.int16)


def test_g711_references_match_the_standard_table():
    # hand-checked entries of the G.711 tables: extremes and the two codes for silence
    assert ulaw_decode(np.array([0x00, 0x80, 0x7F, 0xFF, 0x70, 0xFE, 0xEF])).tolist() == [
        -32124, 32124, 0, 0, -120, 8, 132]
    assert alaw_decode(np.array([0x2A, 0xAA, 0x55, 0xD5, 0xD4])).tolist() == [-32256, 32256, -8, 8, 24]


def write_sphere(path: Path, body: np.ndarray, coding: str, byte_format: str = "01") -> np.ndarray:
    """A NIST SPHERE file of ``body`` [channels, n]: int16 samples ("pcm", byte order
    ``byte_format``) or uint8 G.711 codes ("ulaw", "alaw"). Returns the int16 samples
    [channels, n] a correct reader gives."""
    channels, n = body.shape
    inter = body.T.reshape(-1)
    if coding == "pcm":
        data, width, expected = inter.astype(">i2" if byte_format == "10" else "<i2").tobytes(), 2, body
    else:
        decode = ulaw_decode if coding == "ulaw" else alaw_decode
        data, width, expected = inter.astype(np.uint8).tobytes(), 1, decode(body)
    fields = [f"sample_count -i {n}", f"channel_count -i {channels}", f"sample_rate -i {RATE}",
              f"sample_n_bytes -i {width}", f"sample_coding -s{len(coding)} {coding}"]
    if coding == "pcm":
        fields.append(f"sample_byte_format -s2 {byte_format}")
    text = "\n".join(fields + ["end_head"]) + "\n"
    header = f"NIST_1A\n   1024\n{text}".encode("ascii").ljust(1024, b" ")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + data)
    return expected


def tone(seconds: float, channels: int = 2, seed: int = 0) -> np.ndarray:
    """Noise as int16 samples [channels, n]."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((channels, int(seconds * RATE))) * 3000).clip(-32000, 32000).astype(np.int16)


def codes(seconds: float, channels: int = 2, seed: int = 0) -> np.ndarray:
    """Random G.711 codes [channels, n], every one of the 256 codes among the first."""
    rng = np.random.default_rng(seed)
    out = rng.integers(0, 256, (channels, int(seconds * RATE)), dtype=np.uint8)
    out[0, :256] = np.arange(256, dtype=np.uint8)
    return out


def sph2wav(*args: str) -> subprocess.CompletedProcess:
    """tools/sph2wav.py as a wav.scp pipe may run it: elsewhere, without PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(SPH2WAV), *args], capture_output=True, env=env, cwd="/")


def as_int16(wav) -> np.ndarray:
    """The reader's float32 samples back on the int16 grid they came from (exact)."""
    x = wav.numpy() * 32768
    assert np.array_equal(x, np.round(x))
    return x.astype(np.int16)


# ------------------------------------------------------------------ SPHERE reading

@pytest.mark.parametrize("coding,order", [("pcm", "01"), ("pcm", "10"), ("ulaw", "01"), ("alaw", "01")])
def test_sphere_reads_through_soundfile(tmp_path: Path, coding: str, order: str):
    body = tone(0.5) if coding == "pcm" else codes(0.5)
    path = tmp_path / f"{coding}{order}.sph"
    expected = write_sphere(path, body, coding, order)
    # a plain .sph path in wav.scp: every channel, as the data pipeline reads it
    wav, rate = load_audio(str(path))
    assert rate == RATE and np.array_equal(as_int16(wav), expected)
    # the wav.scp pipe of the Switchboard recipe: one channel, 16-bit WAV on stdout
    r = sph2wav("-c", "2", str(path))
    assert r.returncode == 0, r.stderr
    back, rate = sf.read(io.BytesIO(r.stdout), dtype="int16")
    assert rate == RATE and back.ndim == 1 and np.array_equal(back, expected[1])
    wav, rate = load_audio(f"python {SPH2WAV} -c 1 {path} |", 0.25, 0.5)
    assert rate == RATE and np.array_equal(as_int16(wav)[0], expected[0, 2000:4000])


def test_sph2wav_refuses_shorten_and_missing_channels(tmp_path: Path):
    write_sphere(tmp_path / "s.sph", tone(0.1), "pcm")
    data = (tmp_path / "s.sph").read_bytes()
    header = data[:1024].replace(b"sample_coding -s3 pcm", b"sample_coding -s26 pcm,embedded-shorten-v2.00", 1)
    (tmp_path / "s.sph").write_bytes(header[:1024] + data[1024:])  # drop padding, keep the size
    r = sph2wav("-c", "1", str(tmp_path / "s.sph"))
    err = r.stderr.decode()
    assert r.returncode == 1 and r.stdout == b""
    assert f"{tmp_path / 's.sph'}: shorten-compressed NIST SPHERE" in err and "install sph2pipe" in err
    with pytest.raises(AudioError, match=r"s\.sph: shorten-compressed.*install sph2pipe"):
        load_audio(str(tmp_path / "s.sph"))
    write_sphere(tmp_path / "p.sph", tone(0.1), "pcm")
    r = sph2wav("-c", "3", str(tmp_path / "p.sph"))
    assert r.returncode == 1 and "has 2 channels, no channel 3" in r.stderr.decode()
    (tmp_path / "bad.sph").write_bytes(b"NIST_1A\n   1024\nend_head\n")
    r = sph2wav(str(tmp_path / "bad.sph"))
    assert r.returncode == 1 and f"cannot decode audio {tmp_path / 'bad.sph'}" in r.stderr.decode()


def test_wav_scp_uses_sph2pipe_when_installed(tmp_path: Path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "sph2pipe").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "sph2pipe").chmod(0o755)
    (tmp_path / "sph.flist").write_text("/c/d2/sw02005.SPH\n/c/d1/sw02001.sph\n")
    prep = [sys.executable, str(ROOT / "local" / "swbd_prep.py"), "wav-scp", str(tmp_path / "sph.flist")]
    with_tool = subprocess.run(prep, capture_output=True, text=True, check=True,
                               env={**os.environ, "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}).stdout
    assert with_tool == ("sw02001-A sph2pipe -f wav -p -c 1 /c/d1/sw02001.sph |\n"
                         "sw02001-B sph2pipe -f wav -p -c 2 /c/d1/sw02001.sph |\n"
                         "sw02005-A sph2pipe -f wav -p -c 1 /c/d2/sw02005.SPH |\n"
                         "sw02005-B sph2pipe -f wav -p -c 2 /c/d2/sw02005.SPH |\n")
    without = subprocess.run(prep, capture_output=True, text=True, check=True,
                             env={**os.environ, "PATH": "/usr/bin:/bin"}).stdout
    assert without == with_tool.replace("sph2pipe -f wav -p", f"python {SPH2WAV}")


# ------------------------------------------------------------------ mini corpus

MS98 = {
    "20/2001/sw2001A": [
        "0.000000 0.500000 [silence]",
        "0.500000 1.250000 hi um [noise] i work for ibm",
        "1.250000 2.000000 uh-huh",
        "2.000000 2.600000 <b_aside> [laughter-yes] them_1 ab[solute]- <e_aside>",
        "2.600000 3.500000 uh-huh",
    ],
    "20/2001/sw2001B": [
        "0.000000 1.000000 uh-huh",
        "1.000000 2.500000 [it'n/isn't] -[an]y {yuppiedom} ibm's",
        "2.500000 3.900000 [silence]",
    ],
    "20/2005/sw2005A": [
        "0.100000 1.200000 uh-huh",
        "1.200000 3.000000 the b b c said so [vocalized-noise]",
    ],
    "20/2005/sw2005B": ["0.000000 2.000000 yeah"],
    "20/2009/sw2009A": ["0.000000 1.000000 no audio for this one"],  # no sw02009.sph
}

DICT = """#
# sw-ms98-dict.text (miniature)
#
hello  hh ax l ow
ibm  ay b iy eh m
ibm's  ay b iy eh m z
them  dh eh m
them_1  eh m
uh-huh  ah hh ah
yeah  y ae
[laughter-yes]  y eh s
-[an]y  iy
ab[solute]-  ae b
{yuppiedom}  y ah p iy d ax m

"""

PEM = """;; hub5e_00.pem (miniature)
en_4156 A unknown_speaker 0.50 1.50
en_4156 A unknown_speaker 1.55 3.00
en_4156 B unknown_speaker 0.00 2.00
en_4156 B unknown_speaker 3.00 4.00
"""

STM = """;; hub5e00.english.000405.stm (miniature)
en_4156 A en_4156_A 0.50 1.50 <O,en,F,en-F> (%HESITATION) I THINK (%UH) SO
en_4156 A en_4156_A 1.55 3.00 <O,en,F,en-F> IT'S (( A )) <B_ASIDE> PO(LICE) OFFICER
en_4156 B en_4156_B 0.00 2.00 <O,en,M,en-M> (%UH)
en_4156 B en_4156_B 3.00 4.00 <O,en,M,en-M> IGNORE_TIME_SEGMENT_IN_SCORING
"""


def make_corpus(root: Path) -> Dict[str, Path]:
    """The mini corpus; ``"samples"`` maps each .sph path to the int16 samples it holds."""
    swbd = root / "LDC97S62"
    samples = {}
    for path, body, coding, order in (
            (swbd / "swb1_d1" / "data" / "sw02001.sph", codes(4.0, seed=1), "ulaw", "01"),
            (swbd / "swb1_d2" / "data" / "sw02005.sph", tone(4.0, seed=2), "pcm", "10"),
            (root / "LDC2002S09" / "hub5e_00" / "english" / "en_4156.sph", codes(5.0, seed=3), "ulaw", "01")):
        samples[path] = write_sphere(path, body, coding, order)
    ms98 = swbd / "transcriptions" / "swb_ms98_transcriptions"
    for stem, turns in MS98.items():
        side = stem.rsplit("/", 1)[1]
        lines = [f"{side}-ms98-a-{i:04d} {t}" for i, t in enumerate(turns, 1)]
        words = [f"{side}-ms98-a-{i:04d} {t.split()[0]} {t.split()[1]} {w}"
                 for i, t in enumerate(turns, 1) for w in t.split()[2:]]
        (ms98 / stem).parent.mkdir(parents=True, exist_ok=True)
        (ms98 / f"{stem}-ms98-a-trans.text").write_text("\n".join(lines) + "\n")
        (ms98 / f"{stem}-ms98-a-word.text").write_text("\n".join(words) + "\n")
    (ms98 / "sw-ms98-dict.text").write_text(DICT)
    speech = root / "LDC2002S09" / "hub5e_00"
    (speech / "english" / "hub5e_00.pem").write_text(PEM)
    trans = root / "LDC2002T43"
    (trans / "reference").mkdir(parents=True)
    (trans / "reference" / "hub5e00.english.000405.stm").write_text(STM)
    (trans / "reference" / "en20000405_hub5.glm").write_text(";; glm\n")
    return {"swbd": swbd, "speech": speech, "trans": trans, "samples": samples}


def read_dir(d: Path) -> Dict[str, str]:
    return {p.name: p.read_text() for p in sorted(d.iterdir())
            if p.is_file() and p.name in ("wav.scp", "text", "utt2spk", "spk2utt", "segments")}


def _env(tmp_path: Path) -> Dict[str, str]:
    env = dict(os.environ)
    # No sph2pipe on PATH: wav.scp must use tools/sph2wav.py.
    env["PATH"] = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    env["PYTHONPATH"] = str(ROOT)
    env["LC_ALL"] = "C"
    return env


def _scp(work: Path, root: Path, name: str, sides: str) -> str:
    """wav.scp lines of the sides of ``root``.sph, decoded by the work dir's tools/sph2wav.py."""
    return "".join(f"{name}-{s} python {work}/tools/sph2wav.py -c {c} {root}.sph |\n"
                   for s, c in (("A", 1), ("B", 2)) if s in sides)


LETTERS = ("a ey|b b iy|c s iy|d d iy|e iy|f eh f|g jh iy|h ey ch|i ay|j jh ey|k k ey|l eh l|m eh m|"
           "n eh n|o ow|p p iy|q k y uw|r aa r|s eh s|t t iy|u y uw|v v iy|w d ah b ax l y uw|"
           "x eh k s|y w ay|z z iy").split("|")


def expected_lexicon() -> str:
    words = ["!sil sil", "-y iy", "<unk> spn", "[laughter] lau", "[noise] nsn", "[vocalized-noise] spn",
             "ab- ae b", "hello hh ax l ow", "i ay", "i._b._m. ay b iy eh m", "i._b._m.'s ay b iy eh m z",
             "them dh eh m", "them eh m", "uh-huh ah hh ah", "yeah y ae", "yes y eh s",
             "yuppiedom y ah p iy d ax m"]
    # As in Kaldi, a bare word ending in "s" is never taken for an acronym: the letter s stays "s".
    letters = [f"{e[0]}. {e[2:]}" if e[0] != "s" else e for e in LETTERS]
    return "".join(line + "\n" for line in sorted(words + letters))


@pytest.fixture(scope="module")
def stage0(tmp_path_factory):
    """The mini corpus and a work dir mirroring the repo (run.sh writes data/ beside itself)."""
    tmp = tmp_path_factory.mktemp("swbd")
    c = make_corpus(tmp / "corpora")
    work = tmp / "work"
    work.mkdir()
    for name in ("run.sh", "path.sh", "tools", "local", "wenet", "conf", ".venv"):
        (work / name).symlink_to(ROOT / name)
    r = subprocess.run(["bash", "local/swbd_stage0.sh", "--num_dev_utts", "2", "--max_dup", "2",
                        str(c["swbd"]), f"{c['speech']} {c['trans']}", "data"],
                       cwd=work, capture_output=True, text=True, env=_env(tmp))
    return c, work, r


def test_swbd_stage0_on_mini_corpus(stage0):
    c, work, r = stage0
    assert r.returncode == 0, r.stdout + r.stderr
    data = work / "data"
    s1, s5, e = (c["swbd"] / "swb1_d1/data/sw02001", c["swbd"] / "swb1_d2/data/sw02005",
                 c["speech"] / "english/en_4156")

    assert (data / "local/dict_nosp/lexicon.txt").read_text() == expected_lexicon()
    assert (data / "local/dict_nosp/acronyms.map").read_text() == "".join(
        [f"{l}\t{l}.\n" for l in "abcdefghi"] + ["ibm\ti._b._m.\n", "ibm's\ti._b._m.'s\n"]
        + [f"{l}\t{l}.\n" for l in "jklmnopqrtuvwxyz"])

    # The turn without audio (sw02009) and the [silence]-only turns are gone.
    assert "recording not in wav.scp" in r.stdout
    assert (data / "train/text").read_text() == (
        "sw02001-A_000050-000125 HI UM [NOISE] I WORK FOR I B M\n"
        "sw02001-A_000125-000200 UH-HUH\n"
        "sw02001-A_000200-000260 YES THEM AB-\n"
        "sw02001-A_000260-000350 UH-HUH\n"
        "sw02001-B_000000-000100 UH-HUH\n"
        "sw02001-B_000100-000250 IT'N -Y YUPPIEDOM I B M'S\n"
        "sw02005-A_000010-000120 UH-HUH\n"
        "sw02005-A_000120-000300 THE B B C SAID SO [VOCALIZED-NOISE]\n"
        "sw02005-B_000000-000200 YEAH\n")
    assert read_dir(data / "train_dev") == {
        "segments": "sw02001-A_000050-000125 sw02001-A 0.5 1.25\nsw02001-A_000125-000200 sw02001-A 1.25 2\n",
        "spk2utt": "sw02001-A sw02001-A_000050-000125 sw02001-A_000125-000200\n",
        "text": "sw02001-A_000050-000125 HI UM [NOISE] I WORK FOR I B M\nsw02001-A_000125-000200 UH-HUH\n",
        "utt2spk": "sw02001-A_000050-000125 sw02001-A\nsw02001-A_000125-000200 sw02001-A\n",
        "wav.scp": _scp(work, s1, "sw02001", "A"),
    }
    # At most two UH-HUH: sw02005-A_000010-000120 is the third in train_nodev.
    assert read_dir(data / "train_nodup") == {
        "segments": "sw02001-A_000200-000260 sw02001-A 2 2.6\nsw02001-A_000260-000350 sw02001-A 2.6 3.5\n"
                    "sw02001-B_000000-000100 sw02001-B 0 1\nsw02001-B_000100-000250 sw02001-B 1 2.5\n"
                    "sw02005-A_000120-000300 sw02005-A 1.2 3\nsw02005-B_000000-000200 sw02005-B 0 2\n",
        "spk2utt": "sw02001-A sw02001-A_000200-000260 sw02001-A_000260-000350\n"
                   "sw02001-B sw02001-B_000000-000100 sw02001-B_000100-000250\n"
                   "sw02005-A sw02005-A_000120-000300\nsw02005-B sw02005-B_000000-000200\n",
        "text": "sw02001-A_000200-000260 YES THEM AB-\nsw02001-A_000260-000350 UH-HUH\n"
                "sw02001-B_000000-000100 UH-HUH\nsw02001-B_000100-000250 IT'N -Y YUPPIEDOM I B M'S\n"
                "sw02005-A_000120-000300 THE B B C SAID SO [VOCALIZED-NOISE]\nsw02005-B_000000-000200 YEAH\n",
        "utt2spk": "sw02001-A_000200-000260 sw02001-A\nsw02001-A_000260-000350 sw02001-A\n"
                   "sw02001-B_000000-000100 sw02001-B\nsw02001-B_000100-000250 sw02001-B\n"
                   "sw02005-A_000120-000300 sw02005-A\nsw02005-B_000000-000200 sw02005-B\n",
        "wav.scp": _scp(work, s1, "sw02001", "AB") + _scp(work, s5, "sw02005", "AB"),
    }
    assert "removed 1 of 7 utterances" in r.stdout
    # eval2000: tags, asides and parentheses removed; the empty and the IGNORE turns dropped;
    # segments padded by 0.1 s, meeting halfway where neighbours are closer.
    assert read_dir(data / "eval2000") == {
        "segments": "en_4156-A_000050-000150 en_4156-A 0.40 1.52\nen_4156-A_000155-000300 en_4156-A 1.52 3.10\n",
        "spk2utt": "en_4156-A en_4156-A_000050-000150 en_4156-A_000155-000300\n",
        "text": "en_4156-A_000050-000150 I THINK SO\nen_4156-A_000155-000300 IT'S A POLICE OFFICER\n",
        "utt2spk": "en_4156-A_000050-000150 en_4156-A\nen_4156-A_000155-000300 en_4156-A\n",
        "wav.scp": _scp(work, e, "en_4156", "A"),
    }
    # The wav.scp pipes decode to the right channel of the SPHERE file.
    for rec, side, channel in ((s5, "B", 1), (s1, "A", 0)):  # PCM (byte order 10) and mu-law
        wav, rate = load_audio(_scp(work, rec, rec.name, side).split(" ", 1)[1].strip(), 1.0, 2.5)
        ref = c["samples"][rec.with_suffix(".sph")]
        assert rate == RATE and np.array_equal(as_int16(wav)[0], ref[channel, 8000:20000])


def test_run_sh_stages_1_to_3_on_swbd(stage0, tmp_path: Path):
    c, work, r0 = stage0
    assert r0.returncode == 0, r0.stderr
    feat = tmp_path / "feat"
    # nbpe 30, not 20: the train_nodup text has 18 characters, which with sentencepiece's
    # 3 meta pieces and the 3 swbd noise symbols need a vocabulary of at least 24.
    r = subprocess.run(["./run.sh", "--corpus", "swbd", "--stage", "1", "--stop_stage", "3", "--nbpe", "30",
                        "--train_config", "conf/train_conformer.yaml", "--dir", str(tmp_path / "exp"),
                        "--feat_dir", str(feat), "--nj", "1"],
                       cwd=work, capture_output=True, text=True, env=_env(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (feat / "train_nodup" / "global_cmvn").is_file()
    for x in ("train_nodup", "train_dev", "eval2000"):
        text = dict(line.split(" ", 1) for line in (work / "data" / x / "text").read_text().splitlines())
        segs = {line.split()[0]: line.split()[1:] for line in (work / "data" / x / "segments").read_text().splitlines()}
        shards = (feat / x / "data.list").read_text().split()
        members = []
        for shard in shards:
            with tarfile.open(shard) as tar:
                for m in tar.getmembers():
                    members.append((m.name, tar.extractfile(m).read()))
        assert [n for n, _ in members] == [f"{k}.{ext}" for k in sorted(text) for ext in ("txt", "wav")]
        for (name, txt), (_, wav) in zip(members[::2], members[1::2]):
            key = name[:-4]
            assert txt.decode("utf-8") == text[key]
            rec, start, end = segs[key]
            path = next(p for p in (c["swbd"].rglob("*.sph") if rec.startswith("sw") else c["speech"].rglob("*.sph"))
                        if p.stem == rec[:-2])
            channel = 0 if rec.endswith("-A") else 1
            audio, rate = sf.read(io.BytesIO(wav), dtype="int16")
            first, last = int(round(float(start) * RATE)), int(round(float(end) * RATE))
            assert rate == RATE and np.array_equal(audio, c["samples"][path][channel, first:last]), key


def test_eval2000_keys_pem_and_stm_turns_alike_and_names_faulty_lines(tmp_path: Path):
    from local.swbd_prep import eval2000
    pem, stm = tmp_path / "hub5e_00.pem", tmp_path / "hub5e00.stm"
    pem.write_text(";; comment\nen_4156 A en_4156_A 0.504 1.5\n\nen_4156 A en_4156_A 2.0 3.0\n")
    stm.write_text(";; comment\nen_4156 A en_4156_A 0.504 1.5 <O,en,F,en-F> HELLO THERE\n"
                   "en_4156 A en_4156_A 2.0 3.0 <O> IGNORE_TIME_SEGMENT_IN_SCORING\n")
    eval2000(str(pem), str(stm), str(tmp_path))
    # ids truncate to 10 ms (0.504 s -> 000050); segments padded by 0.1 s
    assert (tmp_path / "segments").read_text() == ("en_4156-A_000050-000150 en_4156-A 0.40 1.60\n"
                                                   "en_4156-A_000200-000300 en_4156-A 1.90 3.10\n")
    assert (tmp_path / "text").read_text() == "en_4156-A_000050-000150 HELLO THERE\n"
    stm.write_text("en_4156 A en_4156_A 0.504 1.6 <O> HELLO\nen_4156 A en_4156_A 2.0 3.0 <O> YES\n")
    with pytest.raises(ValueError, match="disagree on the segments"):
        eval2000(str(pem), str(stm), str(tmp_path))
    stm.write_text("en_4156 A en_4156_A 0.504 1.5 <O> HELLO\nen_4156 A en_4156_A 2.0\n")
    with pytest.raises(ValueError, match=f"{stm}:2: expected 'file side speaker start end <tags> words'"):
        eval2000(str(pem), str(stm), str(tmp_path))
    pem.write_text("en_4156 A en_4156_A 0.5\n")
    with pytest.raises(ValueError, match=f"{pem}:1: expected 'file side speaker start end'"):
        eval2000(str(pem), str(stm), str(tmp_path))
