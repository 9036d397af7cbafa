"""Small stand-ins shared by the decoding tests: a toy attention decoder, random CTC
log-probabilities and encoder outputs, a tiny transducer model."""
import torch

from tests.numerics import score_tolerance
from wenet.models import init_model

TRANSDUCER_VOCAB = 6  # blank, 4 labels, sos/eos


class ToyDecoder(torch.nn.Module):
    """Tiny causal decoder honouring the search interface.

    Position j sees the mean embedding of tokens 0..j plus the masked mean of
    the memory; forward_one_step keeps the running embedding sum as its cache,
    so a mis-ordered cache after beam reordering changes the output.
    """

    def __init__(self, vocab: int, dim: int = 8, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.emb = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))
        self.out = torch.nn.Parameter(torch.randn(dim, vocab, generator=g) * 2)
        self.r_emb = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))
        self.r_out = torch.nn.Parameter(torch.randn(dim, vocab, generator=g) * 2)
        self.requires_grad_(False)

    @staticmethod
    def _ctx(memory, memory_mask):
        m = memory_mask.reshape(memory.size(0), -1, 1).float()
        return (memory * m).sum(1) / m.sum(1).clamp(min=1)

    def _logits(self, emb, out, ys, ctx):
        pos = torch.arange(1, ys.size(1) + 1).view(1, -1, 1)
        h = torch.tanh(emb[ys].cumsum(1) / pos + ctx.unsqueeze(1))
        return h @ out

    def forward(self, memory, memory_mask, ys_in, ys_lens, r_ys_in=torch.empty(0),
                reverse_weight=0.0):
        ctx = self._ctx(memory, memory_mask)
        l_x = self._logits(self.emb, self.out, ys_in, ctx)
        r_x = self._logits(self.r_emb, self.r_out, r_ys_in, ctx) if reverse_weight > 0 \
            else torch.tensor(0.0)
        return l_x, r_x, ys_lens

    def forward_one_step(self, memory, memory_mask, tgt, tgt_mask, cache=None):
        ctx = self._ctx(memory, memory_mask)
        i = tgt.size(1)
        assert tgt_mask.shape == (tgt.size(0), i, i)
        s = self.emb[tgt[:, -1]] + (cache[0] if cache is not None else 0)
        if cache is None:
            assert i == 1
        h = torch.tanh(s / i + ctx)
        return torch.log_softmax(h @ self.out, dim=-1), [s]


def rand_logprobs(B, T, V, seed, peaky=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(B, T, V, generator=g) * peaky, dim=-1)


def encoder_output(B, T, D, lens, seed):
    g = torch.Generator().manual_seed(seed)
    enc = torch.randn(B, T, D, generator=g)
    mask = (torch.arange(T).view(1, -1) < torch.tensor(lens).view(-1, 1)).unsqueeze(1)
    return enc, mask


def tiny_transducer(predictor="stateless", durations=(), seed=0, big_bias=0.0,
                    attention_weight=0.0):
    """A small random transducer (encoder output size 16, input dim 8) with peaky joint
    outputs; an attention decoder too when ``attention_weight > 0``."""
    torch.manual_seed(seed)
    conf = {"encoder": "transformer",
            "encoder_conf": {"output_size": 16, "attention_heads": 2, "linear_units": 16,
                             "num_blocks": 1, "dropout_rate": 0.0},
            "model": "transducer", "predictor": predictor,
            "predictor_conf": ({"embed_size": 12, "context_size": 2} if predictor == "stateless"
                               else {"embed_size": 12, "hidden_size": 12, "output_size": 12,
                                     "num_layers": 2, "dropout": 0.0}),
            "joint_conf": {"join_dim": 16},
            "model_conf": {"big_blank_durations": list(durations)},
            "input_dim": 8, "output_dim": TRANSDUCER_VOCAB, "cmvn_file": None}
    if attention_weight > 0:
        conf["decoder"] = "transformer"
        conf["decoder_conf"] = {"attention_heads": 2, "linear_units": 16, "num_blocks": 1,
                                "dropout_rate": 0.0}
        conf["model_conf"]["attention_weight"] = attention_weight
    model = init_model(conf).eval().requires_grad_(False)
    with torch.no_grad():
        model.joint.out.weight.mul_(3.0)  # peakier outputs: hypotheses with labels
        for i in model.big_blank_ids():
            model.joint.out.bias[i] += big_bias
    return model


def transducer_score_tol(score: float, frames: int) -> float:
    """float32 rounding allowed in a tiny_transducer score over ``frames`` frames, each
    a joint layer (dot products of join_dim = 16 terms) then a log-softmax: depth 2 per
    frame (tests/numerics.py). Two searches that batch the joint differently differ by
    up to this on any CPU; a fixed 1e-6 is one ulp of a score near -11."""
    return score_tolerance(torch.float32, score, 16, 2 * frames)
