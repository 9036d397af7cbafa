"""Attention searches checked against brute force and independent references."""
import itertools
import math

import pytest
import torch

from tests.decode.toys import ToyDecoder, encoder_output, rand_logprobs
from wenet.decode.attention import attention_beam_search, attention_rescoring
from wenet.decode.ctc import ctc_greedy_search, ctc_prefix_beam_search


@torch.no_grad()
def _manual_decoder_score(dec, enc, mask, hyp, sos, eos, r2l=False):
    seq = list(reversed(hyp)) if r2l else list(hyp)
    ys = torch.tensor([[sos] + seq])
    if r2l:
        _, x, _ = dec(enc, mask, ys, torch.tensor([len(seq) + 1]), ys, 1.0)
    else:
        x, _, _ = dec(enc, mask, ys, torch.tensor([len(seq) + 1]), ys, 0.0)
    lp = torch.log_softmax(x[0], -1)
    return sum(float(lp[j, w]) for j, w in enumerate(seq + [eos]))


@pytest.mark.parametrize("ctc_weight,reverse_weight", [(0.5, 0.0), (0.3, 0.4), (0.0, 0.0)])
def test_attention_rescoring_picks_argmax(ctc_weight, reverse_weight):
    V, sos = 7, 6
    dec = ToyDecoder(V, seed=4)
    lens = [9, 5, 8]
    enc, mask = encoder_output(3, 9, 8, lens, 5)
    lp = rand_logprobs(3, 9, V - 1, 6, peaky=1.5)
    lp = torch.cat([lp, torch.full((3, 9, 1), -1e4)], -1)  # CTC never emits sos/eos
    nbests = ctc_prefix_beam_search(lp, torch.tensor(lens), beam_size=6)
    got = attention_rescoring(dec, enc, mask, nbests, sos, sos, ctc_weight, reverse_weight)
    for b in range(3):
        one = (enc[b:b + 1], mask[b:b + 1])
        combined = []
        for hyp, ctc in nbests[b]:
            s = _manual_decoder_score(dec, *one, hyp, sos, sos) * (1 - reverse_weight)
            if reverse_weight > 0:
                s += _manual_decoder_score(dec, *one, hyp, sos, sos, r2l=True) * reverse_weight
            combined.append(s + ctc_weight * ctc)
        best = max(range(len(combined)), key=combined.__getitem__)
        assert got[b][0] == list(nbests[b][best][0])
        assert got[b][1] == pytest.approx(combined[best], abs=1e-4)


@torch.no_grad()
def _greedy_attention(dec, enc, mask, sos, eos, max_len):
    seq, score = [], 0.0
    for _ in range(max_len):
        ys = torch.tensor([[sos] + seq])
        x, _, _ = dec(enc, mask, ys, torch.tensor([ys.size(1)]))
        lp = torch.log_softmax(x[0, -1], -1)
        w = int(lp.argmax())
        score += float(lp[w])
        if w == eos:
            break
        seq.append(w)
    return seq, score


def test_attention_beam_one_equals_greedy_and_wider_is_no_worse():
    V, eos = 6, 5
    dec = ToyDecoder(V, seed=7)
    lens = [7, 4, 6, 2, 7, 7]
    enc, mask = encoder_output(6, 7, 8, lens, 8)
    one = attention_beam_search(dec, enc, mask, 1, eos, eos)
    wide = attention_beam_search(dec, enc, mask, 4, eos, eos)
    for b, n in enumerate(lens):
        ref, ref_score = _greedy_attention(dec, enc[b:b + 1], mask[b:b + 1], eos, eos, n)
        assert one[b][0] == ref
        assert one[b][1] == pytest.approx(ref_score, abs=1e-5)
        assert wide[b][1] >= ref_score - 1e-6
        # The reported score is the decoder's own score of the returned tokens
        # (catches caches not following the beam reordering).
        hyp = wide[b][0]
        seq = hyp + ([eos] if len(hyp) < n else [])
        with torch.no_grad():
            x, _, _ = dec(enc[b:b + 1], mask[b:b + 1], torch.tensor([[eos] + seq]), None)
        lp = torch.log_softmax(x[0], -1)
        assert wide[b][1] == pytest.approx(sum(float(lp[j, w]) for j, w in enumerate(seq)),
                                           abs=1e-5)


@pytest.mark.parametrize("penalty", [0.0, 1.0])
def test_attention_beam_exhaustive_equals_brute_force(penalty):
    V, eos, max_len = 4, 3, 3
    dec = ToyDecoder(V, seed=9)
    enc, mask = encoder_output(2, 3, 8, [3, 3], 10)
    got = attention_beam_search(dec, enc, mask, 64, eos, eos, length_penalty=penalty)
    for b in range(2):
        best, best_norm = None, -math.inf
        for n in range(max_len + 1):
            for body in itertools.product(range(V - 1), repeat=n):
                seq = list(body) + ([eos] if n < max_len else [])
                ys = torch.tensor([[eos] + seq])
                x, _, _ = dec(enc[b:b + 1], mask[b:b + 1], ys, None)
                lp = torch.log_softmax(x[0], -1)
                s = sum(float(lp[j, w]) for j, w in enumerate(seq))
                norm = s / max(n, 1) ** penalty
                if norm > best_norm:
                    best, best_norm, best_score = list(body), norm, s
        assert got[b][0] == best
        assert got[b][1] == pytest.approx(best_score, abs=1e-5)


def test_batch_one_equals_batch_eight_all_modes():
    V, eos = 9, 8
    dec = ToyDecoder(V, seed=12)
    lens = [11, 3, 8, 6, 11, 1, 9, 5]
    enc, mask = encoder_output(8, 11, 8, lens, 13)
    enc = enc.masked_fill(~mask.transpose(1, 2), 7.0)  # padding garbage must not matter
    lp = rand_logprobs(8, 11, V, 14, peaky=2.0)
    lp[..., eos] = -1e4
    lp[1, :, 0] = 1.0  # utterance 1: blank-dominated frames, skipped
    lp = torch.log_softmax(lp, -1)
    L = torch.tensor(lens)

    def run(sl):
        e, m, p, n = enc[sl], mask[sl], lp[sl], L[sl]
        e = e[:, :int(n.max())]
        m, p = m[:, :, :e.size(1)], p[:, :e.size(1)]
        nb = ctc_prefix_beam_search(p, n, beam_size=4)
        return (ctc_greedy_search(p, n), nb,
                attention_beam_search(dec, e, m, 4, eos, eos, length_penalty=0.5),
                attention_rescoring(dec, e, m, nb, eos, eos, 0.5, 0.0))

    batched = run(slice(0, 8))
    singles = [run(slice(b, b + 1)) for b in range(8)]
    for mode in range(4):
        for b in range(8):
            got, ref = batched[mode][b], singles[b][mode][0]
            if mode == 0:
                assert got == ref
            elif mode == 1:
                assert [h for h, _ in got] == [h for h, _ in ref]
                assert [s for _, s in got] == pytest.approx([s for _, s in ref], abs=1e-5)
            else:
                assert got[0] == ref[0] and got[1] == pytest.approx(ref[1], abs=1e-4)


def test_reverse_weight_without_right_to_left_decoder_is_named():
    from wenet.transformer.decoder import TransformerDecoder
    V, sos = 7, 6
    dec = TransformerDecoder(V, 8, attention_heads=2, linear_units=16, num_blocks=1).eval()
    enc, mask = encoder_output(1, 9, 8, [9], 5)
    nbests = [[((1, 2), -1.0)]]
    assert attention_rescoring(dec, enc, mask, nbests, sos, sos, 0.5, 0.0)[0][0] == [1, 2]
    with pytest.raises(ValueError, match="needs a right-to-left decoder.*TransformerDecoder"):
        attention_rescoring(dec, enc, mask, nbests, sos, sos, 0.5, 0.3)
