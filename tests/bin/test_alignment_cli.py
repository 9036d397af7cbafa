"""alignment.py end to end on a tiny random model: times agree with torchaudio's alignment
of the model's own CTC output, batching changes nothing, failures are named by key."""
import json
import logging
import re

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio.functional as taf
import yaml

from wenet.bin.alignment import main as alignment_main
from wenet.dataset.audio import load_audio
from wenet.dataset.fbank import compute_fbank
from wenet.models import init_model

UNITS = ["<blank>", "<unk>", "\u2581", "a", "b", "c", "\u2581d", "<sos/eos>"]
GOOD = {"u0": "ab ca", "u1": "abc", "u2": "a b c", "u3": "cab ba"}
FAILING = {"short": ("abcabcabca", "too few frames"), "oov": ("abx", "unit not in dictionary"),
           "broken": ("abc", "audio decode error"), "empty": ("", "empty transcript")}
SHIFT = 0.04  # conv2d subsampling (4) x 10 ms
# conv2d's output frame f reads fbank frames 4f..4f+6, whose windows span 40f..40f+85 ms:
# centred at 40f + 42.5 ms, 22.5 ms after the middle of [f, f + 1) x 40 ms
OFFSET = 0.0225
FRAMES = ["--no-refine_boundaries", "--min_word_duration", "0"]  # the frames' own times


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("align")
    rng = np.random.default_rng(0)
    lines = []
    secs = {"u0": 1.0, "u1": 0.5, "u2": 0.8, "u3": 1.2, "short": 0.2, "oov": 0.5,
            "empty": 0.5}
    for i, key in enumerate(["u0", "short", "u1", "oov", "broken", "u2", "empty", "u3"]):
        path = d / f"{key}.wav"
        if key == "broken":
            path.write_bytes(b"not audio at all")
        else:
            n = int(16000 * secs[key])
            t = np.arange(n) / 16000
            wav = 0.3 * np.sin(2 * np.pi * (200 + 150 * i) * t) + 0.05 * rng.standard_normal(n)
            sf.write(path, wav.astype(np.float32), 16000)
        txt = GOOD[key] if key in GOOD else FAILING[key][0]
        lines.append(json.dumps({"key": key, "wav": str(path), "txt": txt}))
    (d / "data.list").write_text("\n".join(lines) + "\n")
    (d / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(UNITS)))
    config = {
        "encoder": "conformer",
        "encoder_conf": {"output_size": 32, "attention_heads": 2, "linear_units": 64,
                         "num_blocks": 2, "cnn_module_kernel": 3, "dropout_rate": 0.0},
        "decoder": "transformer",
        "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1,
                         "dropout_rate": 0.0},
        "dataset_conf": {"fbank_conf": {"num_mel_bins": 20, "frame_shift": 10,
                                        "frame_length": 25, "dither": 1.0}},
        "input_dim": 20, "output_dim": len(UNITS), "cmvn_file": None,
    }
    (d / "train.yaml").write_text(yaml.safe_dump(config))
    torch.manual_seed(0)
    model = init_model(config)
    torch.save(model.state_dict(), d / "model.pt")
    return d


def _run(d, out_dir, batch_size, *extra):
    out_dir.mkdir(exist_ok=True)
    rc = alignment_main(["--config", str(d / "train.yaml"), "--checkpoint", str(d / "model.pt"),
                         "--input_file", str(d / "data.list"), "--dict", str(d / "units.txt"),
                         "--result_file", str(out_dir / "words"), "--batch_size", str(batch_size),
                         "--ctm", str(out_dir / "ctm"), "--keep_going", *extra])
    assert rc == 0
    return out_dir


def _lines(path):
    return [line.split() for line in path.read_text(encoding="utf-8").splitlines()]


def _reference_tokens(d, key, txt):
    """(unit, start s, end s) of each token from torchaudio's forced_align on the model's
    CTC log-probabilities of the utterance alone (no dither)."""
    config = yaml.safe_load((d / "train.yaml").read_text())
    model = init_model(config)
    model.load_state_dict(torch.load(d / "model.pt", weights_only=True))
    model.eval()
    wav, rate = load_audio(str(d / f"{key}.wav"))
    feats = compute_fbank(wav, rate, num_mel_bins=20)
    with torch.no_grad():
        enc, _ = model.encode(feats[None], torch.tensor([feats.size(0)]))
        logp = model.ctc_logprobs(enc)[0]
    units = ["\u2581" if ch == " " else ch for ch in txt]
    ids = [UNITS.index(u) for u in units]
    path, scores = taf.forced_align(logp[None], torch.tensor([ids], dtype=torch.int32))
    spans = taf.merge_tokens(path[0], scores[0].exp())
    return [(units[i], s.start * SHIFT + OFFSET, s.end * SHIFT + OFFSET)
            for i, s in enumerate(spans)]


def test_times_equal_torchaudio_alignment_of_the_model_output(setup, tmp_path):
    """--no-refine_boundaries: torchaudio's frames, shifted by the encoder's offset."""
    d = setup
    out = _run(d, tmp_path / "b3", 3, *FRAMES)
    tokens = _lines(out / "words.tokens")
    for key, txt in GOOD.items():
        got = [(u, float(s), float(e)) for k, u, s, e in tokens if k == key]
        ref = _reference_tokens(d, key, txt)
        assert [g[0] for g in got] == [r[0] for r in ref]
        assert [g[1:] for g in got] == [pytest.approx(r[1:], abs=6e-4) for r in ref], key
        # words: the transcript's words, from their first token's start to their last's end
        words = [row[1:] for row in _lines(out / "words") if row[0] == key]
        assert [w[0] for w in words] == txt.split()
        assert float(words[0][1]) == pytest.approx(ref[0][1], abs=6e-4)
        assert float(words[-1][2]) == pytest.approx(ref[-1][2], abs=6e-4)
    # CTM: the same words and start times, duration = end - start
    for (key, word, start, end), (ckey, chan, cstart, cdur, cword, conf) in zip(
            _lines(out / "words"), _lines(out / "ctm")):
        assert (ckey, chan, cword) == (key, "1", word)
        assert float(cstart) == pytest.approx(float(start), abs=0.006)
        assert float(cdur) == pytest.approx(float(end) - float(start), abs=0.011)
        assert 0.0 <= float(conf) <= 1.0


def test_batch_size_changes_nothing(setup, tmp_path):
    d = setup
    one = _run(d, tmp_path / "b1", 1)
    four = _run(d, tmp_path / "b4", 4)
    for name in ("words", "words.tokens", "ctm"):
        assert (one / name).read_text() == (four / name).read_text(), name
    # data.list order; the details may hold object addresses (soundfile's messages)
    assert [row[:2] for row in _lines(one / "words.failed")] == \
        [row[:2] for row in _lines(four / "words.failed")] == \
        [["short", "too"], ["oov", "unit"], ["broken", "audio"], ["empty", "empty"]]
    assert list(dict.fromkeys(row[0] for row in _lines(one / "words"))) == ["u0", "u1", "u2", "u3"]


def test_failures_are_reported_by_key(setup, tmp_path, caplog):
    d = setup
    with caplog.at_level(logging.INFO):
        out = _run(d, tmp_path / "f", 2)
    failed = {}
    for line in (out / "words.failed").read_text().splitlines():
        key, rest = line.split(" ", 1)
        failed[key] = rest
    assert sorted(failed) == sorted(FAILING)
    for key, (_, reason) in FAILING.items():
        assert failed[key].startswith(reason), (key, failed[key])
        assert any(key in r.getMessage() and reason in r.getMessage() for r in caplog.records)
    assert "x" in failed["oov"]  # the missing unit is named
    keys = {row[0] for row in _lines(out / "words")}
    assert keys == set(GOOD)
    summary = [r.getMessage() for r in caplog.records if r.getMessage().startswith("aligned ")]
    assert summary == ["aligned 4 of 8 utterances, failed 4 (audio decode error: 1, "
                       "empty transcript: 1, too few frames: 1, unit not in dictionary: 1)"]


def _textgrid_tiers(text):
    """{tier name: [(xmin, xmax, text)]} parsed from a long-format TextGrid."""
    tiers = {}
    for block in text.split("    item [")[1:]:
        name = re.search(r'name = "(.*)" ', block).group(1)
        tiers[name] = [(float(a), float(b), t) for a, b, t in re.findall(
            r'xmin = (\S+) \n\s+xmax = (\S+) \n\s+text = "(.*)" ', block)]
    return tiers


def test_textgrids(setup, tmp_path):
    """Refined times (the default): both tiers tile the file and hold what the word and
    token files hold; every token lies inside its word; no word is shorter than 50 ms."""
    d = setup
    out = _run(d, tmp_path / "tg", 4, "--gen_praat")
    for key, txt in GOOD.items():
        tiers = _textgrid_tiers((out / "textgrid" / f"{key}.TextGrid").read_text(encoding="utf-8"))
        assert list(tiers) == ["words", "tokens"]
        for name, file in (("words", "words"), ("tokens", "words.tokens")):
            intervals = tiers[name]
            assert intervals[0][0] == 0.0
            assert all(a[1] == b[0] for a, b in zip(intervals, intervals[1:]))  # they tile
            labelled = [(t, a, b) for a, b, t in intervals if t]
            rows = [(u, float(s), float(e)) for k, u, s, e in _lines(out / file) if k == key]
            rows = [r for r in rows if r[2] > r[1]]  # a TextGrid leaves out what spans no time
            assert [r[0] for r in rows] == [lab[0] for lab in labelled]
            assert [lab[1:] for lab in labelled] == [pytest.approx(r[1:], abs=5e-4) for r in rows]
        words = [(a, b) for a, b, t in tiers["words"] if t]
        assert all(b - a >= 0.05 - 1e-6 for a, b in words)
        tokens = [(a, b, t) for a, b, t in tiers["tokens"] if t]
        units = [u for u in ("\u2581" if ch == " " else ch for ch in txt) if u != "\u2581"]
        assert [t for _, _, t in tokens] == units  # the space unit spans no time here
        owner = [j for j, w in enumerate(txt.split()) for _ in w]
        for (a, b, _), j in zip(tokens, owner):
            assert words[j][0] - 1e-6 <= a <= b <= words[j][1] + 1e-6
    assert not (out / "textgrid" / "oov.TextGrid").exists()


def test_shards_align_like_the_raw_list(setup, tmp_path):
    """The same utterances from a tar shard (``<key>.txt`` then ``<key>.wav``) give the
    same times; a shard utterance with an unknown unit is reported by key."""
    import io
    import tarfile
    d = setup
    shard = tmp_path / "shard.tar"
    with tarfile.open(shard, "w") as tar:
        for key in ("u0", "oov", "u3"):
            txt = GOOD.get(key) or FAILING[key][0]
            for name, data in ((f"{key}.txt", txt.encode()), (f"{key}.wav",
                                                              (d / f"{key}.wav").read_bytes())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    (tmp_path / "shards.list").write_text(f"{shard}\n")
    raw = _run(d, tmp_path / "raw", 2)
    out = tmp_path / "sh"
    out.mkdir()
    assert alignment_main(["--config", str(d / "train.yaml"), "--checkpoint", str(d / "model.pt"),
                           "--input_file", str(tmp_path / "shards.list"), "--data_type", "shard",
                           "--dict", str(d / "units.txt"), "--result_file", str(out / "words"),
                           "--batch_size", "2", "--keep_going"]) == 0
    assert _lines(out / "words") == [row for row in _lines(raw / "words") if row[0] in ("u0", "u3")]
    assert [row[:2] for row in _lines(out / "words.failed")] == [["oov", "unit"]]


def test_a_bad_list_line_is_reported_by_its_place(setup, tmp_path):
    from wenet.alignment.aligner import Failure, read_data_list
    d = setup
    lines = (d / "data.list").read_text().splitlines()
    bad = tmp_path / "data.list"
    bad.write_text("\n".join(lines[:1] + ["{not json"] + lines[1:2]) + "\n")
    items = list(read_data_list(str(bad)))
    assert [i["key"] if isinstance(i, dict) else i.key for i in items] == \
        ["u0", f"{bad}:2", "short"]
    assert isinstance(items[1], Failure) and items[1].reason == "bad list line"


def test_refined_words_sit_on_pause_edges(setup, tmp_path):
    """--refine_boundaries without the pause-steered search (--pause_penalty 0
    --speech_penalty 0), without a minimum word duration and with one
    threshold (edge margin = margin): tokens in their words; each word boundary either
    stays where CTC put it or moved onto the edge of a pause of the audio: a start where
    one ends, an end where one begins (brute force: the energy of every 10 ms window,
    thresholded as documented, runs of at least --refine_min_pause)."""
    d = setup
    rng = np.random.default_rng(1)
    lines = []
    for n, txt in enumerate(["ab ca", "cab ba c", "a b c"]):
        wav = 1e-3 * rng.standard_normal(32000)  # 2 s of faint noise with tone bursts
        for k in range(len(txt.split())):
            start = 4000 + 8000 * k + 160 * int(rng.integers(0, 10))
            wav[start:start + 4800] += 0.3 * np.sin(np.arange(4800) * (0.1 + 0.05 * n))
        sf.write(tmp_path / f"r{n}.wav", wav.astype(np.float32), 16000)
        lines.append(json.dumps({"key": f"r{n}", "wav": str(tmp_path / f"r{n}.wav"), "txt": txt}))
    (tmp_path / "data.list").write_text("\n".join(lines) + "\n")
    outs = {}
    for name, extra in (("raw", FRAMES), ("ref", ["--min_word_duration", "0",
                                                  "--refine_boundaries", "--refine_slack", "0.1",
                                              "--refine_margin_db", "10",
                                              "--refine_edge_margin_db", "10",
                                              "--pause_penalty", "0", "--speech_penalty", "0",
                                              "--refine_min_pause", "0.05"])):
        outs[name] = tmp_path / name
        outs[name].mkdir()
        assert alignment_main(["--config", str(d / "train.yaml"), "--checkpoint",
                               str(d / "model.pt"), "--input_file", str(tmp_path / "data.list"),
                               "--dict", str(d / "units.txt"),
                               "--result_file", str(outs[name] / "words"), *extra]) == 0
    raw_w, ref_w = _lines(outs["raw"] / "words"), _lines(outs["ref"] / "words")
    assert [r[:2] for r in raw_w] == [r[:2] for r in ref_w]
    raw_t, ref_t = _lines(outs["raw"] / "words.tokens"), _lines(outs["ref"] / "words.tokens")
    assert [r[:2] for r in raw_t] == [r[:2] for r in ref_t]
    tokens = iter((k, u, float(a), float(b)) for k, u, a, b in ref_t if u != "\u2581")
    for key, word, start, end in ref_w:  # each word's letters, inside it, in order
        for letter in word:
            k, u, a, b = next(tokens)
            assert (k, u) == (key, letter)
            assert float(start) - 6e-4 <= a <= b <= float(end) + 6e-4
    moved, prev_end = 0, {}
    for (key, _, s0, e0), (_, _, s1, e1) in zip(raw_w, ref_w):
        wav, _ = sf.read(tmp_path / f"{key}.wav", dtype="float64")
        energy = [10 * np.log10(np.mean(wav[i:i + 160] ** 2) + 1e-20)
                  for i in range(0, len(wav) - 159, 160)]
        quiet = [e <= np.percentile(energy, 10) + 10 for e in energy] + [False]
        runs, begin = [], None  # pauses: runs of >= 5 quiet windows
        for k, q in enumerate(quiet):
            if q and begin is None:
                begin = k
            elif not q and begin is not None:
                runs += [(begin, k)] if k - begin >= 5 else []
                begin = None
        pause_ends, pause_starts = {e for _, e in runs}, {b for b, _ in runs}
        # the start: CTC's, a pause's end, or the previous word's end (order kept)
        assert float(s1) == pytest.approx(float(s0), abs=6e-4) \
            or round(float(s1) * 100) in pause_ends | {round(prev_end.get(key, -1) * 100)}, \
            (key, s0, s1)
        # the end: CTC's, a pause's start, or one 10 ms window after the start
        assert float(e1) == pytest.approx(float(e0), abs=6e-4) \
            or round(float(e1) * 100) in pause_starts | {round(float(s1) * 100) + 1}, \
            (key, e0, e1)
        prev_end[key] = float(e1)
        moved += abs(float(s1) - float(s0)) > 1e-3 or abs(float(e1) - float(e0)) > 1e-3
    assert moved > 0  # the bursts give edges near some boundaries


def test_a_transducer_aligns_through_its_lattice(tmp_path):
    """--method transducer: with the frames' own times, the tokens start on frames (plus
    the encoder's offset) that make a best lattice path (brute force over every path, the
    joint evaluated cell by cell here; near-ties on these steady tones, so scores are
    compared); refined (the default), the words keep the rules (in order, at least 50 ms,
    tokens inside)."""
    import itertools
    from tests.tiny_experiment import TRANSDUCER, tiny_config, write_experiment, write_tones
    from wenet.inference.loader import load_model_dir
    d = tmp_path
    keys = {"t0": "abc", "t1": "ca"}
    write_tones(d, list(keys), [0.5, 0.4])
    write_experiment(d, tiny_config(TRANSDUCER), "avg_1.pt", joint=4.0, joint_blank=2.0)
    (d / "data.list").write_text("".join(json.dumps({"key": k, "wav": str(d / f"{k}.wav"),
                                                     "txt": t}) + "\n" for k, t in keys.items()))
    common = ["--config", str(d / "train.yaml"), "--checkpoint", str(d / "avg_1.pt"),
              "--input_file", str(d / "data.list"), "--dict", str(d / "units.txt"),
              "--method", "transducer"]
    assert alignment_main(common + ["--result_file", str(d / "plain"), *FRAMES]) == 0
    assert alignment_main(common + ["--result_file", str(d / "refined")]) == 0
    model = load_model_dir(str(d), "cpu", str(d / "avg_1.pt")).model
    for key, txt in keys.items():
        wav, rate = load_audio(str(d / f"{key}.wav"))
        feats = compute_fbank(wav, rate, num_mel_bins=20)
        units = ["\u2581" if ch == " " else ch for ch in txt]
        ids = [UNITS.index(u) for u in units]
        with torch.no_grad():
            enc, _ = model.encode(feats[None], torch.tensor([feats.size(0)]))
            enc = model.project_encoder(enc[0])
            state, preds, token = model.predictor_init_state(1), [], torch.tensor([0])
            for nxt in [None] + ids:
                if nxt is not None:
                    token = torch.tensor([nxt])
                pred, state = model.forward_predictor_step(token, state)
                preds.append(pred)
            lp = np.array([[torch.log_softmax(model.forward_joint_step(enc[t:t + 1], p), -1)[0]
                            .double().numpy() for p in preds] for t in range(enc.size(0))])
        def score(path):
            total, u = 0.0, 0
            for t in range(lp.shape[0]):
                while u < len(ids) and path[u] == t:
                    total, u = total + lp[t, u, ids[u]], u + 1
                total += lp[t, u, 0]
            return total
        best = max(score(p) for p in itertools.combinations_with_replacement(
            range(lp.shape[0]), len(ids)))
        got = [float(s) for k, _, s, _ in _lines(d / "plain.tokens") if k == key]
        frames = [round((g - OFFSET) / SHIFT) for g in got]
        assert got == pytest.approx([f * SHIFT + OFFSET for f in frames], abs=6e-4)
        assert score(frames) == pytest.approx(best, abs=1e-6)
        words = [(w, float(s), float(e)) for k, w, s, e in _lines(d / "refined") if k == key]
        assert [w[0] for w in words] == txt.split()
        assert all(e - s >= 0.05 - 1e-6 for _, s, e in words)
        assert all(a[2] <= b[1] + 1e-6 for a, b in zip(words, words[1:]))
        toks = [(u, float(s), float(e)) for k, u, s, e in _lines(d / "refined.tokens")
                if k == key and u != "\u2581"]
        owner = [j for j, w in enumerate(txt.split()) for _ in w]
        for (_, s, e), j in zip(toks, owner):
            assert words[j][1] - 1e-3 <= s <= e <= words[j][2] + 1e-3
