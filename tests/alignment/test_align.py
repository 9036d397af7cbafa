"""CTC forced alignment against torchaudio's forced_align and against brute force."""
import itertools
import math

import numpy as np
import pytest
import torch
import torchaudio.functional as taf

from wenet.alignment.align import (AlignmentError, TokenSpan, WordSpan, ctc_forced_align,
                                frame_shift_seconds, frames_needed, path_score, token_intervals,
                                token_spans, word_spans)


def _random_case(gen, num_frames, vocab, tokens):
    logits = torch.randn(num_frames, vocab, generator=gen) * 3.0
    return logits.log_softmax(-1), tokens


def _torchaudio(log_probs, tokens, blank=0):
    path, scores = taf.forced_align(log_probs[None], torch.tensor([tokens], dtype=torch.int32),
                                    blank=blank)
    return path[0].tolist(), scores[0]


def _collapse(path, blank=0):
    out = []
    for i, label in enumerate(path):
        if label != blank and (i == 0 or label != path[i - 1]):
            out.append(label)
    return out


def test_matches_torchaudio_on_random_log_probs_with_repeats():
    gen = torch.Generator().manual_seed(0)
    cases = 0
    for trial in range(300):
        vocab = 2 + trial % 9
        blank = vocab - 1 if trial % 5 == 0 else 0  # the blank is not always id 0
        labels = [v for v in range(vocab) if v != blank]
        length = 1 + int(torch.randint(0, 12, (1,), generator=gen))
        tokens = [labels[i] for i in torch.randint(0, len(labels), (length,), generator=gen)]
        if trial % 3 == 0:  # force repeated neighbours
            tokens = [t for t in tokens for _ in (0, 1)][:length + 2]
        num_frames = frames_needed(tokens) + int(torch.randint(0, 15, (1,), generator=gen))
        log_probs, _ = _random_case(gen, num_frames, vocab, tokens)
        ours = ctc_forced_align(log_probs, tokens, blank_id=blank)
        ref, ref_scores = _torchaudio(log_probs, tokens, blank)
        assert ours == ref, (tokens, blank)
        assert path_score(ours, log_probs) == float(ref_scores.double().sum())
        assert _collapse(ours, blank) == tokens
        cases += 1
    assert cases == 300


def test_equals_brute_force_over_all_ctc_paths():
    gen = torch.Generator().manual_seed(1)
    vocab = 3
    for tokens in ([1], [2, 1], [1, 1], [1, 2, 1], [2, 2, 2], [1, 1, 2]):
        for num_frames in range(frames_needed(tokens), 8):
            log_probs, _ = _random_case(gen, num_frames, vocab, tokens)
            best, best_path = -math.inf, None
            for path in itertools.product(range(vocab), repeat=num_frames):
                if _collapse(list(path)) == tokens:
                    score = path_score(path, log_probs)
                    if score > best:
                        best, best_path = score, list(path)
            ours = ctc_forced_align(log_probs, tokens)
            assert ours == best_path, (tokens, num_frames)
            assert path_score(ours, log_probs) == best


def test_the_shortest_paths_are_forced():
    log_probs = torch.zeros(3, 4).log_softmax(-1)
    assert ctc_forced_align(log_probs, [2, 2]) == [2, 0, 2]
    assert ctc_forced_align(log_probs[:2], [3, 1]) == [3, 1]
    assert ctc_forced_align(log_probs, []) == [0, 0, 0]


@pytest.mark.parametrize("tokens,num_frames,reason", [
    ([1, 1], 2, "too few frames"),
    ([1, 2, 2, 2], 5, "too few frames"),
    ([1, 4], 5, "token out of range"),
    ([-1], 5, "token out of range"),
    ([0, 1], 5, "token out of range"),  # the blank is no token
])
def test_alignment_errors(tokens, num_frames, reason):
    log_probs = torch.randn(num_frames, 4).log_softmax(-1)
    with pytest.raises(AlignmentError) as info:
        ctc_forced_align(log_probs, tokens)
    assert info.value.reason == reason
    assert str(info.value).startswith(reason + ": ")
    assert isinstance(info.value, ValueError)


def test_no_valid_path():
    log_probs = torch.randn(4, 3).log_softmax(-1)
    log_probs[:, 2] = -math.inf  # token 2 impossible everywhere
    with pytest.raises(AlignmentError) as info:
        ctc_forced_align(log_probs, [1, 2])
    assert info.value.reason == "no valid path"


def test_token_spans_match_torchaudio_merge_tokens():
    gen = torch.Generator().manual_seed(2)
    for _ in range(50):
        tokens = torch.randint(1, 5, (6,), generator=gen).tolist()
        log_probs, _ = _random_case(gen, 25, 5, tokens)
        path = ctc_forced_align(log_probs, tokens)
        scores = log_probs[torch.arange(25), torch.tensor(path)]
        ref = taf.merge_tokens(torch.tensor(path), scores.exp())
        ours = token_spans(path, log_probs)
        assert [(s.token, s.start, s.end) for s in ours] == [(r.token, r.start, r.end) for r in ref]
        assert [s.token for s in ours] == tokens
        for s, r in zip(ours, ref):
            assert s.score == pytest.approx(r.score, rel=1e-6)


def test_token_span_score_by_hand():
    probs = torch.tensor([[0.1, 0.9], [0.4, 0.6], [0.8, 0.2]])
    spans = token_spans([1, 1, 0], probs.log())
    assert len(spans) == 1 and (spans[0].token, spans[0].start, spans[0].end) == (1, 0, 2)
    assert spans[0].score == pytest.approx(0.75)


def _spans(frames):
    return [TokenSpan(i + 1, s, e, sc) for i, (s, e, sc) in enumerate(frames)]


def _times(words):
    return [t for w in words for t in (w.start_s, w.end_s)]


def test_word_spans_sentencepiece_pieces():
    spans = _spans([(2, 3, 0.9), (3, 5, 0.7), (9, 10, 0.5), (12, 13, 1.0)])
    words = word_spans(spans, ["\u2581he", "llo", "\u2581wor", "ld"], 0.04)
    assert [w.word for w in words] == ["hello", "world"]
    assert _times(words) == pytest.approx([0.08, 0.2, 0.36, 0.52])
    assert [w.confidence for w in words] == pytest.approx([0.8, 0.75])


def test_word_spans_char_units_and_lone_boundary():
    spans = _spans([(0, 1, 1.0), (1, 2, 1.0), (3, 4, 1.0), (5, 6, 1.0), (6, 8, 0.5)])
    words = word_spans(spans, ["a", "b", "\u2581", "c", "d"], 0.06)
    assert [w.word for w in words] == ["ab", "cd"]
    assert _times(words) == pytest.approx([0.0, 0.12, 0.30, 0.48])
    assert words[1].confidence == pytest.approx(0.75)


def test_word_spans_cjk_characters_are_words():
    spans = _spans([(0, 1, 1.0), (2, 3, 1.0), (4, 5, 1.0), (5, 6, 1.0)])
    words = word_spans(spans, ["\u4f60", "\u597d", "\u2581o", "k"], 0.1)
    assert [w.word for w in words] == ["\u4f60", "\u597d", "ok"]
    assert _times(words) == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.6])


def test_word_spans_needs_one_string_per_span():
    with pytest.raises(ValueError):
        word_spans(_spans([(0, 1, 1.0)]), ["a", "b"], 0.04)


def test_times_from_frames():
    assert frame_shift_seconds(4, 10.0) == pytest.approx(0.04)
    assert frame_shift_seconds(8, 10.0) == pytest.approx(0.08)
    spans = _spans([(2, 4, 1.0)])
    ((start, end, unit),) = token_intervals(spans, ["\u2581a"], 0.08)
    assert (start, end, unit) == (pytest.approx(0.16), pytest.approx(0.32), "\u2581a")


def _states(path, blank=0):
    """The extended-sequence state of each frame of a CTC path: 2j + 1 on token j's frames,
    2j on the blanks after j tokens (a label run after a blank or a new label is a new token)."""
    states, emitted, prev = [], 0, blank
    for label in path:
        if label == blank:
            states.append(2 * emitted)
        else:
            if label != prev:
                emitted += 1
            states.append(2 * emitted - 1)
        prev = label
    return states


def test_state_bias_equals_brute_force_over_all_ctc_paths():
    gen = torch.Generator().manual_seed(2)
    rng = np.random.default_rng(2)
    vocab = 3
    for tokens in ([1], [2, 1], [1, 1], [1, 2, 1], [2, 2, 1]):
        for num_frames in range(frames_needed(tokens), 8):
            log_probs, _ = _random_case(gen, num_frames, vocab, tokens)
            bias = rng.normal(scale=3.0, size=(num_frames, 2 * len(tokens) + 1))
            best, best_path = -math.inf, None
            for path in itertools.product(range(vocab), repeat=num_frames):
                if _collapse(list(path)) == tokens:
                    score = path_score(path, log_probs) + sum(
                        bias[t, s] for t, s in enumerate(_states(path)))
                    if score > best + 1e-9:
                        best, best_path = score, list(path)
            assert ctc_forced_align(log_probs, tokens, state_bias=bias) == best_path, \
                (tokens, num_frames)


def test_state_bias_shape_is_checked():
    with pytest.raises(ValueError, match="state_bias"):
        ctc_forced_align(torch.zeros(4, 3).log_softmax(-1), [1, 2], state_bias=np.zeros((4, 4)))
