"""transcribe.py and the Python API on a tiny model dir: the same text as recognize.py for
final.zip and for the checkpoint, n-best sorted with the mode's output first, any rate and
channel count, timestamps equal to torchaudio's forced alignment of the chosen hypothesis."""
import io
import json
import logging

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio

import wenet
from tests.tiny_experiment import (read_hyps, tiny_config, write_experiment, write_tones,
                                   write_wav_scp)
from wenet.alignment.align import word_groups
from wenet.bin.recognize import main as recognize_main
from wenet.bin.transcribe import audio_inputs, main as transcribe_main

KEYS = [f"u{i}" for i in range(5)]
MODES = ["ctc_prefix_beam_search", "attention_rescoring"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("model")
    write_tones(d, KEYS, [0.6, 0.3, 0.45, 0.7, 0.35])
    write_experiment(d, tiny_config(), "avg_2.pt", jit=True, ctc=8.0, eos=1.0)
    write_wav_scp(d / "wav.scp", d, KEYS)
    return d


def _recognize(d, out, mode):
    recognize_main(["--config", str(d / "train.yaml"), "--test_data", str(d / "wav.scp"),
                    "--data_type", "scp", "--checkpoint", str(d / "avg_2.pt"),
                    "--dict", str(d / "units.txt"), "--beam_size", "4", "--batch_size", "3",
                    "--ctc_weight", "0.5", "--reverse_weight", "0.3", "--mode", mode,
                    "--result_file", str(out)])
    return read_hyps(out)


def _transcribe(d, out, *extra):
    rc = transcribe_main(["--model_dir", str(d), "--beam_size", "4", "--batch_size", "2",
                          "--ctc_weight", "0.5", "--reverse_weight", "0.3",
                          "--output", str(out), *extra])
    assert rc == 0
    return out


@pytest.mark.parametrize("mode", MODES)
def test_same_text_as_recognize_for_final_zip_and_checkpoint(model_dir, tmp_path, mode):
    expected = _recognize(model_dir, tmp_path / "rec", mode)
    assert sum(bool(t) for t in expected.values()) > 0
    scripted = read_hyps(_transcribe(model_dir, tmp_path / "zip", "--mode", mode,
                                 str(model_dir / "wav.scp")))
    eager = read_hyps(_transcribe(model_dir, tmp_path / "ckpt", "--mode", mode, "--checkpoint",
                              str(model_dir / "avg_2.pt"), str(model_dir / "wav.scp")))
    assert scripted == expected
    assert eager == expected


@pytest.mark.parametrize("mode", MODES + ["ctc_greedy_search", "attention"])
def test_nbest_sorted_and_first_is_the_mode_output(model_dir, tmp_path, mode):
    ckpt = ["--checkpoint", str(model_dir / "avg_2.pt")]  # attention needs the eager model
    best = read_hyps(_transcribe(model_dir, tmp_path / "t", "--mode", mode, *ckpt,
                             str(model_dir / "wav.scp")))
    out = _transcribe(model_dir, tmp_path / "j", "--mode", mode, "--format", "json",
                      "--nbest", "3", *ckpt, str(model_dir / "wav.scp"))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["key"] for r in rows] == KEYS
    lengths = set()
    for r in rows:
        scores = [h["score"] for h in r["nbest"]]
        assert scores == sorted(scores, reverse=True)
        assert r["nbest"][0]["text"] == r["text"] == best[r["key"]]
        assert len({tuple(h["token_ids"]) for h in r["nbest"]}) == len(r["nbest"])
        lengths.add(len(r["nbest"]))
    if mode in MODES:
        assert max(lengths) == 3  # the lists are real n-bests, not the 1-best alone


def test_any_rate_and_channels_api_and_inputs(model_dir, tmp_path, caplog):
    d = model_dir
    wav, rate = sf.read(d / "u0.wav", dtype="float32")
    # 22.05 kHz stereo: recognize.py (through the data pipeline) and the API agree
    stereo = np.stack([wav, 0.5 * wav], axis=1)
    other = torchaudio.functional.resample(torch.from_numpy(stereo.T.copy()), 16000, 22050)
    sf.write(tmp_path / "odd.flac", other.numpy().T, 22050)
    (tmp_path / "odd.scp").write_text(f"odd {tmp_path / 'odd.flac'}\n")
    recognize_main(["--config", str(d / "train.yaml"), "--test_data", str(tmp_path / "odd.scp"),
                    "--data_type", "scp", "--checkpoint", str(d / "avg_2.pt"),
                    "--dict", str(d / "units.txt"), "--mode", "ctc_prefix_beam_search",
                    "--beam_size", "4", "--result_file", str(tmp_path / "rec")])
    asr = wenet.load_model(str(d))
    with caplog.at_level(logging.WARNING):
        [res] = asr.transcribe(str(tmp_path / "odd.flac"), mode="ctc_prefix_beam_search")
    assert res.key == "odd" and res.text == read_hyps(tmp_path / "rec")["odd"]
    assert any("22050 Hz resampled" in r.getMessage() for r in caplog.records)
    assert any("channels averaged" in r.getMessage() for r in caplog.records)
    # an array with its rate gives what its file gives; int16 arrays are scaled
    [from_file] = asr.transcribe(str(d / "u3.wav"), mode="attention_rescoring")
    data, _ = sf.read(d / "u3.wav", dtype="int16")
    [from_array] = asr.transcribe(data, sample_rate=16000, mode="attention_rescoring")
    assert from_array.text == from_file.text and from_array.nbest[0].score == pytest.approx(
        from_file.nbest[0].score, abs=1e-4)
    # inputs: a directory, a list on stdin and the files themselves name the same audio
    listed = audio_inputs(["-"], io.StringIO("".join(f"{d / k}.wav\n" for k in KEYS)))
    assert listed == [(k, f"{d / k}.wav") for k in KEYS]
    assert audio_inputs([str(d)]) == listed
    assert audio_inputs([str(d / "wav.scp")]) == listed


def test_timestamps_are_torchaudio_forced_alignment(model_dir, tmp_path):
    """Without refinement and minimum duration: torchaudio's frames, shifted by the
    encoder's offset (conv2d's frame f reads fbank frames 4f..4f+6, windows 40f..40f+85
    ms, centred 22.5 ms after the middle of [f, f + 1) x 40 ms)."""
    d = model_dir
    asr = wenet.load_model(str(d), checkpoint=str(d / "avg_2.pt"), batch_size=2)
    asr.refine, asr.min_word_s = None, 0.0
    results = asr.transcribe([str(d / f"{k}.wav") for k in KEYS],
                             mode="ctc_prefix_beam_search", timestamps=True)
    model, shift = asr.loaded.model, asr.loaded.frame_shift_s
    assert shift == pytest.approx(4 * 0.010)  # conv2d: 4x subsampling of 10 ms frames
    checked = 0
    for r in results:
        wav, rate = sf.read(d / f"{r.key}.wav", dtype="float32")
        feats = torchaudio.compliance.kaldi.fbank(torch.from_numpy(wav)[None] * 32768,
                                                  num_mel_bins=20, sample_frequency=rate)
        with torch.no_grad():
            enc, _ = model.encode(feats[None], torch.tensor([feats.size(0)]))
            logp = model.ctc_logprobs(enc)[0]
        ids = r.nbest[0].token_ids
        assert len(r.tokens) == len(ids)
        if not ids:
            continue
        path, _ = torchaudio.functional.forced_align(logp[None], torch.tensor([ids]), blank=0)
        spans = torchaudio.functional.merge_tokens(path[0], logp[torch.arange(len(path[0])),
                                                                 path[0]].exp())
        duration = len(wav) / rate
        assert [min(x * shift + 0.0225, duration) for s in spans for x in (s.start, s.end)] \
            == pytest.approx([x for t in r.tokens for x in (t.start, t.end)])
        assert all(0.0 <= t.confidence <= 1.0 for t in r.tokens)
        assert [w.word for w in r.words] == r.text.split()
        checked += 1
    assert checked > 0
    # CTM and SRT files of the same words
    _transcribe(d, tmp_path / "t", "--checkpoint", str(d / "avg_2.pt"), "--mode",
                "ctc_prefix_beam_search", "--ctm", str(tmp_path / "w.ctm"), "--srt",
                str(tmp_path / "srt"), str(d / "wav.scp"))
    ctm = (tmp_path / "w.ctm").read_text().split("\n")
    words = [(r.key, w.word) for r in results for w in r.words]
    assert [tuple(line.split()[i] for i in (0, 4)) for line in ctm if line] == words
    assert sorted(p.name for p in (tmp_path / "srt").iterdir()) == [f"{k}.srt" for k in KEYS]


def test_recognize_nbest_and_ctm_files_equal_transcribe(model_dir, tmp_path):
    d = model_dir
    mode = "attention_rescoring"
    recognize_main(["--config", str(d / "train.yaml"), "--test_data", str(d / "wav.scp"),
                    "--data_type", "scp", "--checkpoint", str(d / "avg_2.pt"),
                    "--dict", str(d / "units.txt"), "--beam_size", "4", "--batch_size", "3",
                    "--ctc_weight", "0.5", "--reverse_weight", "0.3", "--modes", mode,
                    "--nbest", "3", "--timestamps", "--result_dir", str(tmp_path / "rec")])
    # recognize.py's batches carry no audio: its CTM holds the frames' times
    out = _transcribe(d, tmp_path / "j", "--mode", mode, "--format", "json", "--nbest", "3",
                      "--timestamps", "--no-refine_boundaries", "--checkpoint", str(d / "avg_2.pt"),
                      "--ctm", str(tmp_path / "t.ctm"), str(d / "wav.scp"))
    rows = {r["key"]: r for r in map(json.loads, out.read_text().splitlines())}
    nbest = [json.loads(line) for line in (tmp_path / "rec" / mode / "nbest").read_text()
             .splitlines()]
    assert sorted(r["key"] for r in nbest) == KEYS
    text = read_hyps(tmp_path / "rec" / mode / "text")
    for r in nbest:
        assert [h["text"] for h in r["nbest"]] == [h["text"] for h in rows[r["key"]]["nbest"]]
        assert [h["score"] for h in r["nbest"]] == pytest.approx(
            [h["score"] for h in rows[r["key"]]["nbest"]], abs=1e-4)
        assert r["nbest"][0]["text"] == text[r["key"]]
    ctm = sorted((tmp_path / "rec" / mode / "ctm").read_text().splitlines())
    assert ctm == sorted((tmp_path / "t.ctm").read_text().splitlines())


def test_default_timestamps_start_after_a_lead_in_and_keep_the_rules(model_dir, tmp_path):
    """The default word times (pause-refined): with 0.3 s of near-silence before the
    audio, the first word starts where that pause ends, not at 0 (issue 35); no word is
    shorter than 50 ms, words do not overlap, tokens lie inside their words; the CTM and
    the SRT carry the same times."""
    d = model_dir
    rng = np.random.default_rng(0)
    lead = 0.3
    for k in KEYS:
        wav, rate = sf.read(d / f"{k}.wav", dtype="float32")
        quiet = 1e-4 * rng.standard_normal(int(lead * rate)).astype(np.float32)
        tail = 1e-4 * rng.standard_normal(int(0.2 * rate)).astype(np.float32)
        sf.write(tmp_path / f"{k}.wav", np.concatenate([quiet, wav, tail]), rate)
    asr = wenet.load_model(str(d), checkpoint=str(d / "avg_2.pt"), batch_size=2)
    results = asr.transcribe([str(tmp_path / f"{k}.wav") for k in KEYS],
                             mode="ctc_prefix_beam_search", timestamps=True)
    timed = [r for r in results if r.words]
    assert timed
    for r in timed:
        assert r.words[0].start_s == pytest.approx(lead, abs=0.011)
        for i, w in enumerate(r.words):
            assert w.end_s - w.start_s >= 0.05 - 1e-9
            assert i == 0 or r.words[i - 1].end_s <= w.start_s + 1e-9
        groups = word_groups(r.nbest[0].tokens)  # a lone space unit belongs to no word
        assert len(groups) == len(r.words)
        for j, group in enumerate(groups):
            for i in group:
                t = r.tokens[i]
                assert r.words[j].start_s - 1e-9 <= t.start <= t.end <= r.words[j].end_s + 1e-9
    out = _transcribe(d, tmp_path / "t", "--checkpoint", str(d / "avg_2.pt"), "--mode",
                      "ctc_prefix_beam_search", "--format", "json", "--timestamps", "--ctm",
                      str(tmp_path / "w.ctm"), "--srt", str(tmp_path / "srt"),
                      *[str(tmp_path / f"{k}.wav") for k in KEYS])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    words = [(r["key"], w) for r in rows for w in r.get("words", [])]
    assert words and all(w["start_s"] == pytest.approx(lead, abs=0.011)
                         for r in rows for w in r.get("words", [])[:1])
    ctm = [line.split() for line in (tmp_path / "w.ctm").read_text().splitlines()]
    assert [(c[0], c[2], c[3]) for c in ctm] == [
        (k, f"{w['start_s']:.2f}", f"{w['end_s'] - w['start_s']:.2f}") for k, w in words]
    key, w = words[0]
    first = (tmp_path / "srt" / f"{key}.srt").read_text().splitlines()[1]
    assert first.startswith("00:00:00,%03d" % round(1000 * w["start_s"]))

