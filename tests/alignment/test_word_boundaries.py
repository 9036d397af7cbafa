"""Word boundaries of the pause-steered forced alignment against the known times of
utterances built from separately synthesised words (``local.synth.word_chain``).

The CTC log-probabilities here are uniform: the model says nothing, so what places the
words is the alignment's use of the audio (``pauses.pause_bias`` in the search,
``refine_word_spans`` after it). bench/alignment_accuracy.py measures the same with
trained models."""
import math
import random

import numpy as np
import pytest
import torch

from local.synth.augment import TARGET_RATE
from local.synth.sentences import SentenceGenerator, vocabulary
from local.synth.voices import split_voices
from local.synth.word_chain import ChainConf, word_chain
from wenet.alignment.align import ctc_forced_align, token_spans, word_spans
from wenet.alignment.pauses import RefineConf, pause_bias, pause_fraction, refine_word_spans

SHIFT = 0.04  # a 25 Hz encoder (the Zipformer's output rate)


def _pieces(word: str):
    """Two sentencepiece-like units for words longer than two letters, else one."""
    return ["\u2581" + word[:2], word[2:]] if len(word) > 2 else ["\u2581" + word]


def _errors(wav, truth, conf: RefineConf):
    units = [p for w, _, _ in truth for p in _pieces(w)]
    frames = math.ceil(len(wav) / TARGET_RATE / SHIFT)
    logp = torch.full((frames, len(units) + 1), -math.log(len(units) + 1))
    tokens = list(range(1, len(units) + 1))
    bias = None
    pause_penalty, speech_penalty = conf.penalties()
    if pause_penalty > 0:
        pause = pause_fraction(wav, TARGET_RATE, frames, SHIFT, conf)
        bias = pause_bias(pause, [u.startswith("\u2581") for u in units], pause_penalty,
                          speech_penalty)
    path = ctc_forced_align(logp, tokens, 0, bias)
    words = refine_word_spans(word_spans(token_spans(path, logp), units, SHIFT), wav,
                              TARGET_RATE, conf)
    assert [w.word for w in words] == [t[0] for t in truth]
    return [e for w, (_, start, end) in zip(words, truth)
            for e in (w.start_s - start, w.end_s - end)]


@pytest.fixture(scope="module")
def utterances(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("words"))
    rng = random.Random(5)
    vocab = sorted(vocabulary(SentenceGenerator(random.Random(777)).distinct(300)))
    voices = split_voices(777)["test"]
    return [word_chain(rng, voices[n % len(voices)], rng.sample(vocab, rng.randint(3, 5)),
                       tmp, ChainConf(snr_db=60.0)) for n in range(8)]


def test_nine_in_ten_boundaries_within_50_ms(utterances):
    errors = np.abs(np.concatenate([_errors(wav, truth, RefineConf())
                                    for wav, truth in utterances]))
    assert len(errors) >= 48
    assert (errors <= 0.05).mean() >= 0.9


def test_without_the_audio_in_the_search_words_land_in_the_wrong_places(utterances):
    # the same utterances with the plain Viterbi (snapping only): uniform scores put every
    # token in the first frames, so snapping alone cannot find the words
    plain = RefineConf(pause_penalty=0.0, speech_penalty=0.0)
    errors = np.abs(np.concatenate([_errors(wav, truth, plain) for wav, truth in utterances]))
    assert (errors <= 0.05).mean() < 0.5
