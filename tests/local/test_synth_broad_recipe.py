"""The broad corpus in the recipe: run.sh hands its options to stage 0, and the
pretraining config's model initialises the speechocean762 model (run.sh --init_checkpoint)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch

from tests.common import CONF_DIR, REPO
from tests.tools.test_run_options import STUBS, calls, run_sh
from wenet.models.factory import init_model
from wenet.train.checkpoint import load_init_weights
from wenet.utils.file_utils import load_yaml


def _recipe(tmp_path: Path) -> Path:
    """run.sh and its option parser beside stub stage scripts (as tests/tools/test_run_options.py)."""
    d = tmp_path / "recipe"
    (d / "tools").mkdir(parents=True)
    (d / "local").mkdir()
    shutil.copy(Path(REPO, "run.sh"), d / "run.sh")
    shutil.copy(Path(REPO, "tools", "parse_options.sh"), d / "tools" / "parse_options.sh")
    (d / "conf").symlink_to(Path(CONF_DIR))
    stubs = {**STUBS, "local/synth_broad_data_prep.sh": STUBS["local/synth_data_prep.sh"]}
    for name, text in stubs.items():
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    return d


def test_run_sh_passes_the_corpus_options_to_stage_0(tmp_path):
    recipe = _recipe(tmp_path)
    proc = run_sh(recipe, ["--corpus", "synth_broad", "--stage", "0", "--stop_stage", "0",
                           "--hours", "2.5", "--simulation", "default,babble=0",
                           "--styles", "child=0.4,accent=0.5"])
    assert proc.returncode == 0, proc.stderr
    assert calls(recipe)[-1] == ("synth_broad_data_prep.sh [--nj] [2] [--seed] [777] [--hours] [2.5] "
                                 "[--simulation] [default,babble=0] [--styles] [child=0.4,accent=0.5] "
                                 "[corpus/synth_broad] [data]")
    default = run_sh(recipe, ["--corpus", "synth_broad", "--stage", "0", "--stop_stage", "0"])
    assert default.returncode == 0, default.stderr
    assert calls(recipe)[-1] == ("synth_broad_data_prep.sh [--nj] [2] [--seed] [777] "
                                 "[--simulation] [default] [--styles] [none] [corpus/synth_broad] [data]")
    bad = run_sh(recipe, ["--corpus", "synth_broad", "--hours", "many"])
    assert bad.returncode != 0 and "--hours" in bad.stderr


def _model(config: str, vocab: int, cmvn: str):
    configs = load_yaml(str(Path(CONF_DIR, config)))
    configs.update(input_dim=80, output_dim=vocab, cmvn_file=cmvn)
    torch.manual_seed(0)
    return init_model(configs)


def test_pretrained_model_initialises_every_speechocean762_tensor_but_the_excluded(tmp_path):
    cmvn = tmp_path / "global_cmvn"
    cmvn.write_text(json.dumps({"mean_stat": [1.0] * 80, "var_stat": [2.0] * 80, "frame_num": 1}))
    source = _model("train_conformer_synth_broad.yaml", 500, str(cmvn))
    ckpt = tmp_path / "avg_5.pt"
    torch.save(source.state_dict(), ckpt)
    target = _model("train_conformer_speechocean762.yaml", 256, str(cmvn))
    # run.sh's defaults: with --units_from (same units) the first, otherwise the second
    with_units, own_units = re.findall(r'init_exclude:=([^}]*)\}', Path(REPO, "run.sh").read_text())
    exclude = own_units
    copied, skipped = load_init_weights(target, str(ckpt), exclude)
    assert all(s.endswith("(excluded)") for s in skipped), skipped
    assert len(copied) + len(skipped) == len(target.state_dict())
    for name in copied:
        assert torch.equal(target.state_dict()[name], source.state_dict()[name])
    # only the unit-dependent layers and the CMVN start afresh
    assert {s.split(" ")[0] for s in skipped} == {n for n in target.state_dict() if re.search(exclude, n)}
    assert sum(target.state_dict()[n].numel() for n in copied) > 0.8 * sum(
        p.numel() for p in target.state_dict().values())
    # --units_from: the speechocean762 model has the broad model's 500 units, and every
    # tensor but the CMVN (recomputed on the new corpus) is the pretrained one
    same_units = _model("train_conformer_speechocean762.yaml", 500, str(cmvn))
    copied, skipped = load_init_weights(same_units, str(ckpt), with_units)
    assert sorted(s.split(" ")[0] for s in skipped) == ["encoder.global_cmvn.istd",
                                                        "encoder.global_cmvn.mean"]
    for name in copied:
        assert torch.equal(same_units.state_dict()[name], source.state_dict()[name])
    assert len(copied) == len(same_units.state_dict()) - 2
