"""The decode entry point: shared work runs once per batch, every mode's output equals
asking for it alone and equals the search functions called directly, and the time
of shared work is charged in full to every mode that used it."""
import dataclasses
import itertools
from unittest.mock import Mock

import pytest
import torch

from tests.decode.toys import tiny_transducer
from tests.tiny_experiment import sharpen, tiny_config
from wenet.decode import MODES, DecodeOptions, batch_context, decode, modes
from wenet.decode.attention import attention_beam_search, attention_rescoring
from wenet.decode.ctc import ctc_greedy_search, ctc_prefix_beam_search
from wenet.decode.hyps import best_hyps
from wenet.decode.transducer import rnnt_beam_search, rnnt_greedy_search
from wenet.models import init_model

CTC_MODES = ["ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring"]
RNNT_MODES = ["rnnt_greedy_search", "rnnt_beam_search", "rnnt_beam_attn_rescoring"]
VOCAB = 10
OPTIONS = DecodeOptions(beam_size=4, ctc_weight=0.5, transducer_weight=0.7,
                        reverse_weight=0.3, length_penalty=0.5, max_sym_per_frame=2)
RNNT_OPTIONS = dataclasses.replace(OPTIONS, reverse_weight=0.0)  # a left-to-right decoder


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny models: one thread (see conftest.one_thread)."""


@pytest.fixture(scope="module")
def ctc_batch():
    """A small random conformer + bidirectional decoder and one encoded batch of 4."""
    torch.manual_seed(0)
    model = init_model(tiny_config({"encoder_conf": {"linear_units": 32, "num_blocks": 1},
                                    "decoder_conf": {"linear_units": 32},
                                    "dataset_conf": None, "output_dim": VOCAB})).eval()
    sharpen(model, ctc=8.0)  # a peaky CTC head: hypotheses that are not empty
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        lens = torch.tensor([60, 37, 52, 25])
        enc, mask = model.encode(torch.randn(4, 60, 20, generator=g), lens)
    return model, enc, mask


@pytest.fixture(scope="module")
def rnnt_batch():
    model = tiny_transducer("lstm", seed=5, attention_weight=0.3)
    g = torch.Generator().manual_seed(6)
    enc = torch.randn(4, 12, 16, generator=g) * 2
    mask = (torch.arange(12).view(1, -1) < torch.tensor([12, 7, 10, 4]).view(-1, 1)).unsqueeze(1)
    return model, enc, mask


def _counting(monkeypatch, module, name):
    """Wrap ``module.name`` in a Mock that counts its calls (and still does the work)."""
    mock = Mock(wraps=getattr(module, name))
    monkeypatch.setattr(module, name, mock)
    return mock


def _hyps(results):
    return {m: r.hyps for m, r in results.items()}


def test_registry_covers_every_mode():
    assert list(MODES) == CTC_MODES + RNNT_MODES
    assert [m for m, d in MODES.items() if d.transducer] == RNNT_MODES


def test_ctc_modes_together_equal_alone_and_references(ctc_batch, monkeypatch):
    model, enc, mask = ctc_batch
    alone = {m: decode(model, enc, mask, [m], OPTIONS)[m].hyps for m in CTC_MODES}
    with torch.no_grad():
        lens = mask.sum((1, 2))
        logp = model.ctc_logprobs(enc)
        nbest = ctc_prefix_beam_search(logp, lens, 4)
        att = attention_beam_search(model.decoder, enc, mask, 4, model.sos, model.eos, 0.5)
        resc = attention_rescoring(model.decoder, enc, mask, nbest, model.sos, model.eos,
                                   first_pass_weight=0.5, reverse_weight=0.3)
    reference = {"ctc_greedy_search": ctc_greedy_search(logp, lens),
                 "ctc_prefix_beam_search": best_hyps(nbest),
                 "attention": [h for h, _ in att], "attention_rescoring": [h for h, _ in resc]}
    assert alone == reference
    assert all(any(h) for h in reference.values())  # not a comparison of empty outputs
    assert reference["attention_rescoring"] != reference["ctc_prefix_beam_search"]
    calls = _counting(monkeypatch, batch_context, "ctc_prefix_beam_search")
    subsets = [c for n in range(1, len(CTC_MODES) + 1)
               for c in itertools.combinations(CTC_MODES, n)]
    for subset in subsets + [s[::-1] for s in subsets if len(s) > 1]:  # who computes first
        calls.reset_mock()
        got = _hyps(decode(model, enc, mask, list(subset), OPTIONS))
        assert list(got) == list(subset)
        assert got == {m: reference[m] for m in subset}, subset
        uses_nbest = {"ctc_prefix_beam_search", "attention_rescoring"} & set(subset)
        assert calls.call_count == (1 if uses_nbest else 0), subset


def test_transducer_modes_together_equal_alone_and_references(rnnt_batch, monkeypatch):
    model, enc, mask = rnnt_batch
    lens = mask.sum((1, 2))
    greedy = rnnt_greedy_search(model, enc, lens, 2)
    beam_stats = {}
    nbest = rnnt_beam_search(model, enc, lens, 4, stats=beam_stats)
    resc = attention_rescoring(model.decoder, enc, mask, nbest, model.sos, model.eos,
                               first_pass_weight=0.7)
    reference = {"rnnt_greedy_search": greedy.hyps, "rnnt_beam_search": best_hyps(nbest),
                 "rnnt_beam_attn_rescoring": [h for h, _ in resc]}
    assert all(any(h) for h in reference.values())
    frames = int(lens.sum())
    calls = _counting(monkeypatch, batch_context, "rnnt_beam_search")
    for m in RNNT_MODES:
        (got,) = decode(model, enc, mask, [m], RNNT_OPTIONS).values()
        assert got.hyps == reference[m]
        evals = {"rnnt_greedy_search": greedy.joint_evals,
                 "rnnt_beam_search": beam_stats["joint_evals"]}
        assert got.counts == ({"joint_evals": evals[m], "encoder_frames": frames}
                              if m in evals else {"encoder_frames": frames})
    calls.reset_mock()
    together = decode(model, enc, mask, RNNT_MODES[::-1], RNNT_OPTIONS)
    assert _hyps(together) == reference
    assert calls.call_count == 1  # one beam search feeds both beam modes


def test_unknown_mode_is_named(ctc_batch):
    model, enc, mask = ctc_batch
    with pytest.raises(ValueError, match="'ctc_greedy'"):
        decode(model, enc, mask, ["ctc_greedy_search", "ctc_greedy"])


def test_rescoring_without_attention_decoder_is_an_error():
    model = tiny_transducer()
    enc, mask = torch.randn(1, 3, 16), torch.ones(1, 1, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="attention decoder"):
        decode(model, enc, mask, ["rnnt_beam_attn_rescoring"])


class _FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def costs(self, seconds, fn):
        """``fn`` that advances the clock by ``seconds`` per call."""
        def timed(*args, **kwargs):
            self.now += seconds
            return fn(*args, **kwargs)
        return timed


@pytest.mark.parametrize("order", [
    ["ctc_greedy_search", "attention_rescoring", "ctc_prefix_beam_search", "attention"],
    ["attention", "ctc_prefix_beam_search", "attention_rescoring", "ctc_greedy_search"]])
def test_shared_work_is_charged_in_full_to_every_mode_that_used_it(ctc_batch, monkeypatch,
                                                                   order):
    model, enc, mask = ctc_batch
    clock = _FakeClock()
    monkeypatch.setattr(batch_context, "_clock", clock)
    monkeypatch.setattr(model, "ctc_logprobs", clock.costs(1.0, model.ctc_logprobs))
    monkeypatch.setattr(batch_context, "ctc_prefix_beam_search",
                        clock.costs(4.0, batch_context.ctc_prefix_beam_search))
    monkeypatch.setattr(modes, "ctc_greedy_search", clock.costs(0.5, modes.ctc_greedy_search))
    monkeypatch.setattr(modes, "attention_rescoring",
                        clock.costs(2.0, modes.attention_rescoring))
    monkeypatch.setattr(modes, "attention_beam_search",
                        clock.costs(8.0, modes.attention_beam_search))
    got = decode(model, enc, mask, order, OPTIONS)
    # log-softmax 1 s and prefix beam 4 s happen once, and count in each mode using them
    assert {m: r.seconds for m, r in got.items()} == {
        "ctc_greedy_search": 1.0 + 0.5, "ctc_prefix_beam_search": 1.0 + 4.0,
        "attention_rescoring": 1.0 + 4.0 + 2.0, "attention": 8.0}
    assert clock.now == 1.0 + 4.0 + 0.5 + 2.0 + 8.0
