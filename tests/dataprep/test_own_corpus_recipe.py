"""``./run.sh --corpus custom`` end to end on tiny corpora (tests/dataprep/own_corpus.py),
in a copy of the recipe, with a tiny model trained for one epoch:

- a TSV manifest with a bad row and no dev set, BPE units, stages 0-5: the bad row is
  skipped and reported, dev is whole held-out speakers, the test set is scored in words;
- a Kaldi-dir corpus (one file an utterance) of Mandarin text, character units, stages 0-6: no BPE model
  anywhere, stage 5 scores characters, and the exported dir transcribes like stage 5;
  then fine-tuning from that exported dir (its units, its weights, replaying a list).
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
import yaml

from tests.common import REPO, recipe_copy
from tests.dataprep import own_corpus as oc
from tests.dataprep.own_data_doc import DOC_EXP, doc_command
from tests.tiny_experiment import read_hyps
from tests.train.testlib import TINY_CONFIG
from wenet.utils.file_utils import read_kaldi_map

MANDARIN = ["你好，世界。", "今天天气很好", "我们去学校", "他在看书", "一二三四",
            "五六七八", "谢谢你们", "明天见", "八九十", "再见朋友！"]


def tiny_config(path: Path) -> Path:
    c = copy.deepcopy(TINY_CONFIG)
    c.update(max_epoch=1, accum_grad=1)
    c["dataset_conf"].update(spec_aug=False, batch_conf={"batch_type": "static", "batch_size": 8})
    path.write_text(yaml.safe_dump(c))
    return path


def run_sh(recipe: Path, args: List[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(["./run.sh", *args], cwd=recipe, capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def overall(wer_file: Path) -> str:
    return next(x for x in wer_file.read_text().splitlines() if x.startswith("Overall"))


def test_tsv_corpus_with_a_bad_row_and_no_dev_set_runs_stages_0_to_5(tmp_path):
    recs = oc.write_recordings(tmp_path / "rec")
    corpus = oc.table(tmp_path / "corpus", recs, ".tsv")
    (corpus / "dev.tsv").unlink()
    with open(corpus / "train.tsv", "a") as f:
        f.write(f"{recs['s1rec']}\t1.5\t2.5\tpast the end\ts1\n")  # line 8
    recipe = recipe_copy(tmp_path / "recipe")
    # docs/own_data.md's whole run, with a tiny model and 20 BPE units
    r = run_sh(recipe, doc_command("/data/call_centre_no_dev",
                                   {"/data/call_centre_no_dev": str(corpus)})
               + ["--stop_stage", "5", "--train_config", str(tiny_config(tmp_path / "tiny.yaml")),
                  "--nbpe", "20", "--data_type", "raw", "--decode_modes", "ctc_greedy_search"])
    data = recipe / "data"
    assert f"skip\tsegment past the end of its recording\t{corpus}/train.tsv:8" in \
        (data / "train" / "stage0_report.txt").read_text()
    spk = {s: set(read_kaldi_map(str(data / s / "utt2spk")).values()) for s in ("train", "dev")}
    assert spk["train"] | spk["dev"] == {"s1", "s2", "s3"} and not spk["train"] & spk["dev"]
    assert len(spk["dev"]) == 1  # 0.2 of 6 utterances: one speaker's two
    assert (data / "lang_char" / "train_unigram20.model").is_file()
    result = recipe / "exp" / "custom_tiny" / "test" / "ctc_greedy_search"
    assert sorted(read_hyps(result / "text")) == sorted(u[0] for u in oc.utterances("test"))
    assert " N=4 " in overall(result / "wer")  # EIGHT NINE / TEN AGAIN: words
    assert "scoring characters" not in r.stdout


def test_mandarin_kaldi_corpus_with_character_units_runs_stages_0_to_6(tmp_path):
    recs = oc.write_recordings(tmp_path / "rec")
    corpus = oc.kaldi_whole(tmp_path / "corpus", oc.whole_files(tmp_path / "wav", recs, "wav"))
    for s in oc.SETS:  # the same utterances, Mandarin transcripts
        lines = (corpus / s / "text").read_text().splitlines()
        (corpus / s / "text").write_text("".join(
            f"{x.split()[0]} {MANDARIN[oc.TEXTS.index(x.split(' ', 1)[1])]}\n" for x in lines))
    recipe = recipe_copy(tmp_path / "recipe")
    # docs/own_data.md's character run, with a tiny model
    r = run_sh(recipe, doc_command("/data/mandarin", {"/data/mandarin": str(corpus)})
               + ["--stop_stage", "6", "--train_config", str(tiny_config(tmp_path / "tiny.yaml")),
                  "--data_type", "raw", "--decode_modes", "ctc_greedy_search"])
    assert "data/test/text has no spaces: scoring characters (CER)" in r.stdout
    data = recipe / "data"
    assert (data / "test" / "text").read_text() == \
        "s5rec-00000100-00000900 八九十\ns5rec-00001000-00001950 再见朋友\n"
    units = (data / "lang_char" / "train_char_units.txt").read_text().split("\n")
    train_chars = sorted(set("".join(read_kaldi_map(str(data / "train" / "text")).values())))
    assert units[:-1] == [f"{u} {i}" for i, u in enumerate(
        ["<blank>", "<unk>", *train_chars, "<sos/eos>"])]
    exp = recipe / "exp" / "custom_tiny"
    assert " N=7 " in overall(exp / "test" / "ctc_greedy_search" / "wer")  # 3 + 4 characters
    assert "| mode | CER % |" in (exp / "RESULTS.md").read_text()  # the table says what it scored
    assert not list(recipe.rglob("*.model")) and not (exp / "bpe.model").exists()
    assert (exp / "units.txt").read_text() == "\n".join(units)
    # the exported dir (final.zip, units.txt, no bpe.model) decodes as stage 5 did
    out = tmp_path / "hyp.txt"
    t = subprocess.run([sys.executable, f"{REPO}/wenet/bin/transcribe.py", "--model_dir",
                        str(exp), "--mode", "ctc_greedy_search", "--output", str(out),
                        str(data / "test" / "wav.scp")], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert t.returncode == 0, t.stderr
    assert read_hyps(out) == read_hyps(exp / "test" / "ctc_greedy_search" / "text")
    # ... and aligns (the training set: every character has a unit): the aligned tokens of
    # each utterance are its transcript's characters
    aligned = tmp_path / "ali.txt"
    a = subprocess.run([sys.executable, f"{REPO}/wenet/bin/alignment.py", "--config",
                        str(exp / "train.yaml"), "--checkpoint", str(exp / "avg_1.pt"),
                        "--input_file", str(recipe / "raw_wav" / "train" / "data.list"),
                        "--dict", str(exp / "units.txt"), "--result_file", str(aligned)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert a.returncode == 0, a.stderr
    tokens = {}
    for line in Path(f"{aligned}.tokens").read_text().splitlines():
        key, unit = line.split()[:2]
        tokens.setdefault(key, []).append(unit)
    assert tokens == {k: list(t) for k, t in read_kaldi_map(str(data / "train" / "text")).items()}
    # fine-tuning from the exported model: its character units kept, every tensor but the
    # CMVN copied from final.zip, the old corpus's list replayed
    replay = tmp_path / "replay.list"
    replay.write_text((recipe / "raw_wav" / "train" / "data.list").read_text())
    r = run_sh(recipe, doc_command("/data/mandarin (fine-tuning)",
                                   {"/data/mandarin": str(corpus),
                                    "/data/old_corpus/data.list": str(replay),
                                    DOC_EXP: "exp/custom_tiny"})
               + ["--stop_stage", "4", "--train_config", str(tmp_path / "tiny.yaml"),
                  "--data_type", "raw"])
    assert "units: exp/custom_tiny has no bpe.model: its units are characters" in r.stderr
    assert "units: 0 of " in r.stdout
    assert (data / "lang_char" / "train_inherited_units.txt").read_text() == "\n".join(units)
    log = (recipe / "exp" / "finetuned" / "train.0.log").read_text()
    assert "is a TorchScript export: taking its weights" in log
    num = len(__import__("torch").load(exp / "avg_1.pt"))
    assert (f"initialised {num - 2} of {num} tensors from exp/custom_tiny/final.zip; not copied: "
            "encoder.global_cmvn.mean (excluded), encoder.global_cmvn.istd (excluded)") in log


def test_init_weights_from_an_exported_model_equal_those_from_its_checkpoint(tmp_path):
    """--init_checkpoint final.zip (export_jit's TorchScript) copies the same tensors, with
    the same values, as the checkpoint it was exported from."""
    import torch
    from tests.tiny_experiment import tiny_config as tiny_model_config, write_experiment
    from wenet.models import init_model
    from wenet.train.checkpoint import load_init_weights
    config = tiny_model_config()
    write_experiment(tmp_path, config, jit=True)
    from_jit, from_ckpt = init_model(config), init_model(config)
    copied_jit, _ = load_init_weights(from_jit, str(tmp_path / "final.zip"))
    copied_ckpt, _ = load_init_weights(from_ckpt, str(tmp_path / "model.pt"))
    assert copied_jit == copied_ckpt and len(copied_ckpt) == len(from_ckpt.state_dict())
    for name, tensor in from_ckpt.state_dict().items():
        assert torch.equal(tensor, from_jit.state_dict()[name]), name
