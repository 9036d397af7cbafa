"""tools/import_wenet.py against WeNet itself: three tiny models made with WeNet's own code
(tests/models/wenet_fixture/README.md: a U2++ conformer in the 3.x layout, a transformer in
the 2.x layout, a conformer with the other accepted options) are imported, and our
features, encoder outputs, CTC log-probabilities, searches and rescoring scores are checked against what WeNet computed on the same input.

Tolerance: 1e-4 absolute on features, encoder output, log-probabilities and scores
(float32; the observed differences are ~2e-6). Token sequences and texts: exact.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml

from tests.common import REPO
from tests.train import testlib as T
from wenet.bin.train import cli as train_cli
from wenet.bin.transcribe import main as transcribe_main
from wenet.dataset.fbank import compute_fbank
from wenet.decode.attention import score_hyps
from wenet.decode.ctc import ctc_prefix_beam_search
from wenet.decode.modes import decode
from wenet.decode.options import DecodeOptions
from wenet.export.jit import export_jit
from wenet.inference.loader import load_model_dir
from wenet.models.wenet_config import UnsupportedWenetConfig
from wenet.models.wenet_import import import_wenet

FIXTURE = Path(REPO) / "tests" / "models" / "wenet_fixture"
MODELS = ["u2pp_conformer", "transformer", "conformer_variants"]
ATOL = 1e-4


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("imported")
    for name in MODELS:
        import_wenet(str(FIXTURE / name), str(root / name))
    return {name: root / name for name in MODELS}


def _expected(name: str) -> dict:
    return torch.load(FIXTURE / name / "expected.pt", weights_only=True)


def _our_id(name: str, wenet_ids: List[int], vocab: int) -> List[int]:
    """WeNet's token ids as ours: the 3.x fixture's <sos/eos> (id 2) moved last."""
    if name != "u2pp_conformer":
        return list(wenet_ids)
    return [vocab - 1 if i == 2 else (i - 1 if i > 2 else i) for i in wenet_ids]


def _wenet_text(units: Path, ids: List[int]) -> str:
    """WeNet's char tokenizer's text, from the WeNet units file (joined, ▁ kept)."""
    table = {int(i): u for u, i in (line.split() for line in units.read_text().splitlines())}
    return "".join(table[i] for i in ids)


def test_features_equal_wenets():
    wav, rate = sf.read(str(FIXTURE / "utt.wav"), dtype="float32")
    ours = compute_fbank(torch.from_numpy(wav).unsqueeze(0), rate, num_mel_bins=80)
    theirs = _expected("transformer")["feats"]
    assert ours.shape == theirs.shape
    assert torch.allclose(ours, theirs, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", MODELS)
def test_encoder_ctc_and_searches_equal_wenets(imported, name):
    exp = _expected(name)
    loaded = load_model_dir(str(imported[name]))
    model = loaded.model
    feats = exp["feats"].unsqueeze(0)
    with torch.no_grad():
        enc, mask = model.encode(feats, torch.tensor([feats.size(1)]))
        logp = model.ctc_logprobs(enc)
    vocab = logp.size(-1)
    order = _our_id(name, list(range(vocab)), vocab)
    assert torch.allclose(enc[0], exp["encoder_out"], atol=ATOL, rtol=0)
    # WeNet's column j is our column order[j]
    ours_as_theirs = logp[0][:, order]
    assert torch.allclose(ours_as_theirs, exp["ctc_logprobs"], atol=ATOL, rtol=0)

    options = DecodeOptions(beam_size=exp["beam_size"], ctc_weight=exp["rescoring_ctc_weight"],
                            reverse_weight=exp["rescoring_reverse_weight"],
                            blank_skip_threshold=None)  # WeNet's prefix search skips nothing
    out = decode(model, enc, mask, ["ctc_greedy_search", "attention_rescoring"], options)
    assert out["ctc_greedy_search"].hyps[0] == _our_id(name, exp["greedy_tokens"], vocab)
    assert out["attention_rescoring"].hyps[0] == _our_id(name, exp["rescoring_tokens"], vocab)
    tokenizer = loaded.tokenizer
    assert tokenizer.decode(out["ctc_greedy_search"].hyps[0], raw=True) == exp["greedy_text"]
    assert tokenizer.decode(out["attention_rescoring"].hyps[0], raw=True) == exp["rescoring_text"]

    lens = mask.squeeze(1).sum(1)
    nbest = ctc_prefix_beam_search(logp, lens, exp["beam_size"], blank_skip_threshold=None)[0]
    assert [list(h) for h, _ in nbest] == [_our_id(name, h, vocab) for h in exp["nbest"]]
    assert np.allclose([s for _, s in nbest], exp["nbest_ctc_scores"], atol=ATOL, rtol=0)
    rw = exp["rescoring_reverse_weight"]
    l2r, r2l = score_hyps(model.decoder, enc, mask, [h for h, _ in nbest],
                          torch.zeros(len(nbest), dtype=torch.long), model.sos, model.eos, rw)
    assert np.allclose((l2r * (1 - rw) + r2l * rw).tolist(), exp["nbest_attention_scores"],
                       atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", ["u2pp_conformer", "conformer_variants"])
def test_chunked_and_streaming_encoder_equal_wenets(imported, name):
    """Chunks of 4 output frames with 2 chunks of history: the chunk-masked forward and
    the chunk-by-chunk one with caches (WeNet's forward_chunk_by_chunk)."""
    exp = _expected(name)
    model = load_model_dir(str(imported[name])).model
    feats = exp["feats"].unsqueeze(0)
    lens = torch.tensor([feats.size(1)])
    for streaming, key in ((False, "chunk_encoder_out"), (True, "streaming_encoder_out")):
        with torch.no_grad():
            enc, _ = model.encode(feats, lens, exp["chunk_size"], exp["num_left_chunks"],
                                  simulate_streaming=streaming)
        assert enc[0].shape == exp[key].shape, key
        assert torch.allclose(enc[0], exp[key], atol=ATOL, rtol=0), key


def test_transcribe_cli_decodes_the_imported_dir_to_wenets_text(imported, capsys):
    exp = _expected("transformer")
    code = transcribe_main(["--model_dir", str(imported["transformer"]), "--mode",
                            "attention_rescoring", "--beam_size", str(exp["beam_size"]),
                            "--ctc_weight", str(exp["rescoring_ctc_weight"]),
                            "--blank_skip_threshold", "1.0", "--format", "json",
                            str(FIXTURE / "utt.wav")])
    assert code == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # no ▁ in this hypothesis: the text is WeNet's as it prints it
    assert line["text"] == exp["rescoring_text"] == "gfcgf"
    assert line["nbest"][0]["token_ids"] == exp["rescoring_tokens"]


def test_torchscript_export_of_the_imported_model_decodes_like_wenet(imported, tmp_path):
    """export_jit of the imported U2++ model, loaded back as a dir's final.zip: WeNet's
    CTC log-probabilities and greedy text."""
    name = "u2pp_conformer"
    exp = _expected(name)
    loaded = load_model_dir(str(imported[name]))
    export_jit(loaded.model, str(tmp_path / "final.zip"))
    for f in ("train.yaml", "units.txt"):
        shutil.copy(imported[name] / f, tmp_path / f)
    scripted = load_model_dir(str(tmp_path))
    assert scripted.scripted
    feats = exp["feats"].unsqueeze(0)
    with torch.no_grad():
        enc, mask = scripted.model.encode(feats, torch.tensor([feats.size(1)]))
        logp = scripted.model.ctc_logprobs(enc)
    vocab = logp.size(-1)
    assert torch.allclose(logp[0][:, _our_id(name, list(range(vocab)), vocab)],
                          exp["ctc_logprobs"], atol=ATOL, rtol=0)
    hyp = decode(scripted.model, enc, mask, ["ctc_greedy_search"])["ctc_greedy_search"].hyps[0]
    assert scripted.tokenizer.decode(hyp, raw=True) == exp["greedy_text"]


def test_files_are_found_as_wenet_lays_them_out(tmp_path):
    """A recipe's units name (``*_units.txt``) and BPE model (``train_*.model``) beside the
    model, though train.yaml names recipe paths that do not exist here; two candidates
    are an error asking to name one."""
    src = _copy_fixture("u2pp_conformer", tmp_path / "src")
    (src / "units.txt").rename(src / "train_960_unigram5000_units.txt")
    (src / "train_960_unigram5000.model").write_bytes(b"a sentencepiece model")

    def to_bpe(c):
        c["tokenizer"] = "bpe"
        c["tokenizer_conf"].update(symbol_table_path="data/lang_char/x_units.txt",
                                   bpe_path="data/lang_char/x.model")
    _edit_yaml(src / "train.yaml", to_bpe)
    record = import_wenet(str(src), str(tmp_path / "dst"))
    assert record["units"].endswith("train_960_unigram5000_units.txt")
    assert (tmp_path / "dst" / "bpe.model").read_bytes() == b"a sentencepiece model"
    assert yaml.safe_load((tmp_path / "dst" / "train.yaml").read_text())["bpe_model"] == \
        "bpe.model"
    (src / "other.model").write_bytes(b"another one")
    with pytest.raises(ValueError, match="several BPE model files"):
        import_wenet(str(src), str(tmp_path / "dst2"))


def test_units_and_cmvn_files(imported):
    units = (imported["u2pp_conformer"] / "units.txt").read_text().splitlines()
    assert units[0] == "<blank> 0" and units[2] == "\u2581 2" and units[-1] == "<sos/eos> 11"
    # the Kaldi text statistics of the transformer become the same sums in our JSON
    fields = (FIXTURE / "transformer" / "global_cmvn").read_text().split()
    values = [float(v) for v in fields[1:-1]]
    ours = json.loads((imported["transformer"] / "global_cmvn").read_text())
    assert ours["frame_num"] == int(values[80])
    assert np.allclose(ours["mean_stat"], values[:80]) and np.allclose(ours["var_stat"],
                                                                       values[81:161])
    wenet_json = json.loads((FIXTURE / "u2pp_conformer" / "global_cmvn").read_text())
    assert json.loads((imported["u2pp_conformer"] / "global_cmvn").read_text()) == wenet_json


def _copy_fixture(name: str, dst: Path) -> Path:
    shutil.copytree(FIXTURE / name, dst)
    return dst


def _edit_yaml(path: Path, edit) -> None:
    configs = yaml.safe_load(path.read_text())
    edit(configs)
    path.write_text(yaml.safe_dump(configs))


def test_wenet_2x_keys_import_the_same_model(imported, tmp_path):
    """The 3.x sections (cmvn/cmvn_conf, tokenizer, ctc, model) replaced by WeNet 2.x's
    top-level cmvn_file/is_json_cmvn: the same model comes out."""
    src = _copy_fixture("transformer", tmp_path / "src")

    def to_2x(c):
        for key in ("cmvn", "cmvn_conf", "tokenizer", "tokenizer_conf", "ctc", "ctc_conf",
                    "model", "vocab_size"):
            c.pop(key)
        c.update(cmvn_file="data/train/global_cmvn", is_json_cmvn=False)
    _edit_yaml(src / "train.yaml", to_2x)
    import_wenet(str(src), str(tmp_path / "dst"))
    a = torch.load(tmp_path / "dst" / "final.pt", weights_only=True)
    b = torch.load(imported["transformer"] / "final.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


REFUSED = [
    ("encoder", "squeezeformer", "encoder: 'squeezeformer'"),
    ("decoder", "sanm_decoder", "decoder: 'sanm_decoder'"),
    ("model", "transducer", "model: 'transducer'"),
    ("cmvn", "utterance_cmvn", "cmvn: 'utterance_cmvn'"),
    ("encoder_conf.pos_enc_layer_type", "no_pos", "encoder_conf.pos_enc_layer_type: 'no_pos'"),
    ("encoder_conf.selfattention_layer_type", "selfattn",
     "encoder_conf.selfattention_layer_type: 'selfattn'"),
    ("encoder_conf.cnn_module_norm", "rms_norm", "encoder_conf.cnn_module_norm: 'rms_norm'"),
    ("encoder_conf.layer_norm_type", "rms_norm", "encoder_conf.layer_norm_type: 'rms_norm'"),
    ("encoder_conf.activation_type", "mish", "encoder_conf.activation_type: 'mish'"),
    ("encoder_conf.n_kv_head", 1, "encoder_conf.n_kv_head: 1"),
    ("encoder_conf.new_option", 3, "encoder_conf.new_option: 3"),
    ("decoder_conf.tie_word_embedding", True, "decoder_conf.tie_word_embedding: True"),
    ("dataset_conf.feats_type", "mfcc", "dataset_conf.feats_type: 'mfcc'"),
    ("dataset_conf.fbank_conf.window_type", "hamming",
     "dataset_conf.fbank_conf.window_type: 'hamming'"),
]


@pytest.mark.parametrize("key,value,message", REFUSED)
def test_unsupported_components_are_refused_by_name(tmp_path, key, value, message):
    src = _copy_fixture("u2pp_conformer", tmp_path / "src")

    def put(c):
        *parents, last = key.split(".")
        for p in parents:
            c = c.setdefault(p, {})
        c[last] = value
    _edit_yaml(src / "train.yaml", put)
    with pytest.raises(UnsupportedWenetConfig) as e:
        import_wenet(str(src), str(tmp_path / "dst"))
    assert message in str(e.value) and str(src / "train.yaml") in str(e.value)
    assert not (tmp_path / "dst").exists()  # nothing written


def _sinusoids(rows: int, dim: int) -> torch.Tensor:
    """The positional table by its formula: sin at even, cos at odd columns."""
    pos = np.arange(rows)[:, None]
    freq = np.exp(-np.arange(0, dim, 2) * math.log(10000.0) / dim)[None, :]
    table = np.zeros((rows, dim))
    table[:, 0::2], table[:, 1::2] = np.sin(pos * freq), np.cos(pos * freq)
    return torch.from_numpy(table).float().unsqueeze(0)


def test_checkpoint_must_fit_tensor_for_tensor(imported, tmp_path):
    """WeNet 3.x's saved positional tables are accepted when they are the sinusoids; a
    table unlike them, a missing, an extra or a reshaped tensor is an error naming it."""
    src = _copy_fixture("transformer", tmp_path / "src")
    state = torch.load(src / "final.pt", weights_only=True)

    def attempt(changed: dict, dst: str):
        torch.save(changed, src / "final.pt")
        return import_wenet(str(src), str(tmp_path / dst))

    with_pe = dict(state, **{"encoder.embed.pos_enc.pe": _sinusoids(5000, 16),
                             "decoder.embed.1.pe": _sinusoids(5000, 16)})
    attempt(with_pe, "ok")
    assert torch.equal(torch.load(tmp_path / "ok" / "final.pt", weights_only=True)[
        "ctc.ctc_lo.weight"], torch.load(imported["transformer"] / "final.pt",
                                         weights_only=True)["ctc.ctc_lo.weight"])
    bad = {
        "encoder.embed.pos_enc.pe": (dict(state, **{"encoder.embed.pos_enc.pe":
                                                    torch.zeros(1, 5000, 16)}),
                                     "a positional table unlike our sinusoids"),
        "decoder.output_layer.bias": ({k: v for k, v in state.items()
                                       if k != "decoder.output_layer.bias"},
                                      "in our model, not in the WeNet checkpoint"),
        "encoder.encoders.0.extra": (dict(state, **{"encoder.encoders.0.extra":
                                                    torch.zeros(3)}),
                                     "in the WeNet checkpoint, not in our model"),
        "encoder.after_norm.weight": (dict(state, **{"encoder.after_norm.weight":
                                                     torch.ones(8)}), "shape (8,) there"),
    }
    for name, (changed, why) in bad.items():
        with pytest.raises(ValueError, match="does not fit") as e:
            attempt(changed, name)
        assert f"{name}: {why}" in str(e.value)
        assert not (tmp_path / name).exists()


def test_unit_faults_and_a_used_destination_are_refused(imported, tmp_path):
    src = _copy_fixture("u2pp_conformer", tmp_path / "src")
    with pytest.raises(FileExistsError, match="exists and is not empty"):
        import_wenet(str(src), str(imported["u2pp_conformer"]))
    _edit_yaml(src / "train.yaml", lambda c: c["tokenizer_conf"]["special_tokens"].update(
        {"<sos>": 5, "<eos>": 5}))
    with pytest.raises(ValueError, match="sos/eos id 5 is the unit 'b', not <sos/eos>"):
        import_wenet(str(src), str(tmp_path / "dst"))
    _edit_yaml(src / "train.yaml", lambda c: c.update(output_dim=13))
    with pytest.raises(ValueError, match=r"ids 0\.\.12 \(the model's output_dim\)"):
        import_wenet(str(src), str(tmp_path / "dst"))


def test_a_cmvn_file_unlike_the_checkpoints_is_refused(tmp_path):
    src = _copy_fixture("u2pp_conformer", tmp_path / "src")
    stats = json.loads((src / "global_cmvn").read_text())
    stats["mean_stat"][3] += 1000.0
    (src / "global_cmvn").write_text(json.dumps(stats))
    with pytest.raises(ValueError, match="differ from the checkpoint's encoder.global_cmvn.mean"):
        import_wenet(str(src), str(tmp_path / "dst"))


def test_fine_tuning_starts_from_the_imported_weights(imported, tmp_path):
    """One epoch of train.py (--init_checkpoint, the imported train.yaml and units) on a
    tiny corpus: it trains, and the result is the imported model moved a little (the
    warm-up's first learning rate is tiny), not a fresh random model."""
    dst = imported["u2pp_conformer"]
    corpus = T.make_corpus(str(tmp_path / "data"), num_utts=4, num_shards=1, cv_utts=2)
    corpus["units"] = str(dst / "units.txt")
    code = train_cli(T.train_args(corpus, str(dst / "train.yaml"), str(tmp_path / "exp"), [
        "--init_checkpoint", str(dst / "final.pt"), "--cmvn", str(dst / "global_cmvn"),
        "--override_config", "max_epoch 1", "--override_config", "optim_conf.lr 0.01"]))
    assert code == 0
    start = torch.load(dst / "final.pt", weights_only=True)
    tuned = torch.load(tmp_path / "exp" / "0.pt", weights_only=True)
    assert start.keys() == tuned.keys()
    moved = [k for k in start if not torch.equal(start[k], tuned[k])]
    assert moved  # it trained
    for k in start:
        if start[k].is_floating_point():
            assert (tuned[k] - start[k]).abs().max() < 1e-3, k
