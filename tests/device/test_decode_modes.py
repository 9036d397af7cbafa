"""Every decoding mode under the device guard (tests/device/guard.py) gives exactly the
unguarded hypotheses: the CTC and attention modes of a U2++ model, plain, with hotwords
and with an n-gram LM; the transducer modes (one and several blanks); chunked and
simulated-streaming encoding with the incremental CTC prefix beam of streams; an
ensemble of two models."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Sequence

import pytest
import torch

from tests.device.families import batch, build
from tests.device.guard import assert_identical, meta_default
from tests.tiny_experiment import UNITS, sharpen
from wenet.decode import MODES, DecodeOptions, decode
from wenet.decode.context_graph import ContextGraph
from wenet.decode.ctc_lm import LMFusion
from wenet.decode.stream_state import CtcPrefixBeamState
from wenet.lm.ngram import train_kneser_ney
from wenet.models.ensemble import EnsembleModel

CTC_MODES = [name for name, mode in MODES.items() if not mode.transducer]
RNNT_MODES = [name for name, mode in MODES.items() if mode.transducer]
OPTIONS = DecodeOptions(beam_size=3, ctc_weight=0.5, reverse_weight=0.3, length_penalty=0.5,
                        transducer_weight=0.5, max_sym_per_frame=2)
RNNT_OPTIONS = dataclasses.replace(OPTIONS, reverse_weight=0.0)  # a left-to-right decoder
# words of tiny_experiment.UNITS: "\u2581" starts a word, a/b/c continue it, "\u2581d" is "d"
LM = train_kneser_ney([["ab", "d"], ["d", "abc"], ["a"], ["ab", "ab", "d"]], order=2)


def hotwords() -> ContextGraph:
    """"ab" and "d" in tiny_experiment.UNITS; a new graph for each run, as its device
    tables are cached (a guarded run must build its own)."""
    return ContextGraph([[3, 4], [6]], context_score=2.0)


def with_hotwords(options: DecodeOptions = OPTIONS) -> Callable[[], DecodeOptions]:
    return lambda: dataclasses.replace(options, context_graph=hotwords())


def with_lm() -> DecodeOptions:
    return dataclasses.replace(OPTIONS, lm_fusion=LMFusion(LM, UNITS, weight=0.5,
                                                           word_bonus=0.5))


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread (see conftest.one_thread)."""


def _model(family: str, seed: int = 0) -> torch.nn.Module:
    model = build(family, seed).eval()
    sharpen(model, ctc=8.0, joint=3.0 if hasattr(model, "joint") else 1.0)
    return model


def _decode_all(model: Any, modes: Sequence[str], options: DecodeOptions, feats, lens,
                chunk: int = -1) -> Dict[str, Any]:
    """Encoder output and every mode's hypotheses and counts (not the times)."""
    with torch.no_grad():
        enc, mask = model.encode(feats, lens, chunk, -1)
        results = decode(model, enc, mask, modes, options)
    return {"encoder_out": enc, "mask": mask,
            **{name: (r.hyps, r.counts) for name, r in results.items()}}


def _same_under_guard(model, modes, make_options: Callable[[], DecodeOptions], chunk=-1):
    """The decoding of batch() by every mode equals the unguarded one (each run with its
    own options from ``make_options``)."""
    feats, lens, _, _ = batch()
    ref = _decode_all(model, modes, make_options(), feats, lens, chunk)
    assert any(hyps for hyps, _ in (ref[m] for m in modes)), "every hypothesis is empty"
    with meta_default():
        guarded = _decode_all(model, modes, make_options(), feats, lens, chunk)
    assert_identical(ref, guarded)
    return ref


def test_the_tests_cover_every_registered_mode():
    assert set(CTC_MODES) | set(RNNT_MODES) == set(MODES)
    assert {"ctc_prefix_beam_search", "attention_rescoring", "rnnt_beam_search"} <= set(MODES)


@pytest.mark.parametrize("options", [lambda: OPTIONS, with_hotwords(), with_lm],
                         ids=["plain", "hotwords", "ngram_lm"])
@pytest.mark.parametrize("family", ["conformer_u2pp", "zipformer"])
def test_ctc_and_attention_modes(family, options):
    _same_under_guard(_model(family), CTC_MODES, options)


@pytest.mark.parametrize("family", ["transducer_full", "transducer_multi_blank",
                                    "zipformer_pruned_cr_ctc"])
def test_transducer_modes(family):
    model = _model(family)
    modes = [m for m in RNNT_MODES if m != "rnnt_beam_attn_rescoring" or model.attention_weight > 0]
    _same_under_guard(model, modes, lambda: RNNT_OPTIONS)
    _same_under_guard(model, modes, with_hotwords(RNNT_OPTIONS))


@pytest.mark.parametrize("family", ["conformer_u2pp_causal", "zipformer_causal"])
def test_chunked_encoding(family):
    _same_under_guard(_model(family), CTC_MODES, lambda: OPTIONS, chunk=8)


@pytest.mark.parametrize("family", ["conformer_u2pp_causal", "zipformer_causal"])
@pytest.mark.parametrize("biased", [False, True], ids=["plain", "hotwords"])
def test_simulated_streaming_and_the_incremental_prefix_beam(family, biased):
    """One utterance encoded chunk by chunk with caches; its CTC log-probabilities fed to
    the stream's prefix beam in pieces of 5 frames."""
    model = _model(family)
    feats = batch()[0][:1]

    def run():
        with torch.no_grad():
            enc, _ = model.encode(feats, None, 8, -1, simulate_streaming=True)
            logprobs = model.ctc_logprobs(enc)[0]
        beam = CtcPrefixBeamState(3, context_graph=hotwords() if biased else None)
        for start in range(0, logprobs.size(0), 5):
            beam.advance(logprobs[start:start + 5])
        return enc, beam.nbest()

    ref = run()
    assert ref[1][0][0], "the best hypothesis is empty"
    with meta_default():
        guarded = run()
    assert_identical(ref, guarded)


def test_ensemble_of_two_models():
    ensemble = EnsembleModel([_model("conformer_u2pp", 0), _model("conformer_u2pp", 1)],
                             weights=[2.0, 1.0]).eval()
    _same_under_guard(ensemble, CTC_MODES, lambda: OPTIONS)
    _same_under_guard(ensemble, CTC_MODES, lambda: DecodeOptions(beam_size=3))  # no reverse
