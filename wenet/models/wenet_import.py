"""A WeNet 2.x / 3.x model dir → one of our model dirs (``tools/import_wenet.py``).

A WeNet exp dir holds ``train.yaml``, the checkpoint (``final.pt``, ``avg_N.pt``...), and
usually the files its recipe made: the units (``units.txt``, ``lang_char.txt``,
``words.txt`` or ``*_units.txt``), ``global_cmvn`` (JSON, or Kaldi text with
``is_json_cmvn: false``) and for BPE units the sentencepiece model (``train_*.model``).
:func:`import_wenet` writes a dir that every tool of ours loads as its own:

- ``train.yaml``: our keys (``wenet.models.wenet_config.map_config``), naming the files
  below by their names in the dir;
- ``final.pt``: the state_dict with our names, checked tensor for tensor (strict: every
  WeNet tensor consumed, every tensor of our model filled, shapes equal);
- ``units.txt`` with ``<sos/eos>`` last, as ours are. WeNet 3.x recipes put it at id 2;
  then every id above 2 moves down one and ``<sos/eos>`` goes last, and the rows of the
  three layers indexed by token id (CTC output, decoder embedding and output) move with
  them, so the model computes the same function on the renumbered units;
- ``global_cmvn`` in our JSON format (the same sums; Kaldi text is converted), checked
  against the CMVN buffers inside the checkpoint, which the model normalises with;
- ``bpe.model`` when the model has one.

The state_dict names are WeNet's own (our modules were written to keep them), so the
only tensors not copied one for one are WeNet 3.x's saved positional tables (``*.pe``):
they are compared with ours (same sinusoids) and dropped, since ours are rebuilt, not
saved. ``import.json`` in the new dir records the source and what was done.
"""
from __future__ import annotations

import glob
import json
import logging
import os
import re
import shutil
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import torch
import yaml

from wenet.dataprep.cmvn import CmvnStats, save_cmvn, stats_to_mean_istd
from wenet.dataprep.cmvn import read_cmvn_stats
from wenet.models.factory import CMVN_ISTD_KEY, CMVN_MEAN_KEY, init_model
from wenet.models.paths import BPE_NAME, CMVN_NAME, UNITS_NAME
from wenet.models.wenet_config import (UnsupportedWenetConfig, cmvn_source, map_config,
                                       special_sos_eos, tokenizer_paths)
from wenet.transformer.cmvn import GlobalCMVN
from wenet.utils.file_utils import load_yaml, read_symbol_table

CHECKPOINT_NAME = "final.pt"
UNITS_NAMES = ("units.txt", "lang_char.txt", "words.txt")
EOS_UNIT = "<sos/eos>"
# tensors whose first dimension is indexed by token id
_TOKEN_ROWS = re.compile(r"^(ctc\.ctc_lo\.(weight|bias)|decoder\.((left|right)_decoder\.)?"
                         r"(output_layer\.(weight|bias)|embed\.0\.weight))$")
_CMVN_TOLERANCE = 1e-4  # relative: the file's statistics vs the checkpoint's buffers
# a saved positional table vs ours: float32 rounding of sin/cos arguments up to ~5000 rad
_TABLE_TOLERANCE = 1e-3


def _find(src: str, named: Optional[str], names: Tuple[str, ...], pattern: str,
          what: str) -> Optional[str]:
    """A file of a WeNet dir: the one the config names (an absolute path; a relative one
    under the dir, its base name beside the model, or under the recipe two levels up, as
    WeNet lays out ``<recipe>/exp/<name>``; never against the working directory), else
    the first of ``names`` beside it, else the only match of ``pattern``; None when none
    exists."""
    tried: List[str] = []
    if named and os.path.isabs(named):
        tried.append(named)
    elif named:
        tried += [os.path.join(src, named), os.path.join(src, os.path.basename(named)),
                  os.path.join(src, "..", "..", named)]
    tried += [os.path.join(src, n) for n in names]
    for path in tried:
        if os.path.isfile(path):
            return os.path.normpath(path)
    found = sorted(glob.glob(os.path.join(src, pattern)))
    if len(found) > 1:
        raise ValueError(f"{src}: several {what} files {found}; name the one to use")
    return found[0] if found else None


def read_kaldi_cmvn(path: str) -> CmvnStats:
    """Kaldi text CMVN statistics (``compute-cmvn-stats --binary=false``): ``[`` the D sums,
    the frame count, the D sums of squares, ``0 ]``."""
    with open(path, "rb") as f:
        if f.read(2) == b"\0B":
            raise ValueError(f"{path}: binary Kaldi CMVN is not supported; write it as text "
                             "(compute-cmvn-stats --binary=false)")
    with open(path, encoding="utf-8") as f:
        fields = f.read().split()
    if len(fields) < 6 or fields[0] != "[" or fields[-1] != "]" or (len(fields) - 2) % 2:
        raise ValueError(f"{path}: not Kaldi text CMVN statistics ('[ sums count squares 0 ]')")
    values = np.array([float(v) for v in fields[1:-1]], dtype=np.float64)
    dim = len(values) // 2 - 1
    count = values[dim]
    if count <= 0 or not count.is_integer():
        raise ValueError(f"{path}: frame count {count} is not a positive integer")
    return CmvnStats(dim=dim, mean_stat=values[:dim], var_stat=values[dim + 1:2 * dim + 1],
                     frame_num=int(count))


def _renumbering(units: Dict[str, int], output_dim: int, sos: Optional[int],
                 path: str) -> List[int]:
    """``order[new_id] = old_id`` that puts ``<sos/eos>`` last (identity when it is)."""
    ids = sorted(units.values())
    if ids != list(range(output_dim)):
        raise ValueError(f"{path}: the units must have the ids 0..{output_dim - 1} (the "
                         f"model's output_dim) once each; found {len(ids)} ids"
                         + (f" up to {ids[-1]}" if ids else ""))
    by_id = {i: u for u, i in units.items()}
    if sos is None:
        if EOS_UNIT not in units:
            raise ValueError(f"{path}: no {EOS_UNIT} unit and no special_tokens in train.yaml")
        sos = units[EOS_UNIT]
    if by_id.get(0) != "<blank>":
        raise ValueError(f"{path}: id 0 is {by_id.get(0)!r}, not <blank>")
    if by_id.get(sos) not in (EOS_UNIT, "<sos>", "<eos>"):
        raise ValueError(f"{path}: train.yaml's sos/eos id {sos} is the unit "
                         f"{by_id.get(sos)!r}, not {EOS_UNIT}")
    return [i for i in range(output_dim) if i != sos] + [sos]


def _write_units(units: Dict[str, int], order: List[int], path: str) -> None:
    by_id = {i: u for u, i in units.items()}
    names = [by_id[old] for old in order]
    names[-1] = EOS_UNIT  # ours is called <sos/eos>
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{u} {i}\n" for i, u in enumerate(names))


def _load_checkpoint(path: str) -> Dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
        raise ValueError(f"{path}: not a state_dict (name -> tensor), as WeNet saves models")
    return {(k[len("module."):] if k.startswith("module.") else k): v for k, v in state.items()}


def map_state_dict(state: Mapping[str, torch.Tensor], model: torch.nn.Module,
                   order: List[int], source: str) -> Dict[str, torch.Tensor]:
    """WeNet's tensors under our names for ``model`` (built from the mapped config), token
    rows renumbered by ``order``; ValueError naming every tensor that is left over,
    missing, or of another shape, and a WeNet positional table unlike ours."""
    own = model.state_dict()
    tables = {name + ".pe": m.pe for name, m in model.named_modules() if hasattr(m, "pe")}
    mapped: Dict[str, torch.Tensor] = {}
    problems: List[str] = []
    renumber = torch.tensor(order)
    for name, tensor in state.items():
        if name in tables and name not in own:
            ours = tables[name][:, :tensor.size(1)] if tensor.dim() == 3 else None
            if ours is None or ours.shape != tensor.shape or \
                    not torch.allclose(ours, tensor.float(), atol=_TABLE_TOLERANCE, rtol=0):
                problems.append(f"{name}: a positional table unlike our sinusoids")
            continue
        if name not in own:
            problems.append(f"{name}: in the WeNet checkpoint, not in our model")
            continue
        if _TOKEN_ROWS.match(name) and tensor.size(0) == len(order):
            tensor = tensor.index_select(0, renumber)
        if tensor.shape != own[name].shape:
            problems.append(f"{name}: shape {tuple(tensor.shape)} there, "
                            f"{tuple(own[name].shape)} here")
            continue
        mapped[name] = tensor.to(own[name].dtype)
    problems += [f"{name}: in our model, not in the WeNet checkpoint"
                 for name in own if name not in state]
    if problems:
        raise ValueError(f"{source}: the checkpoint does not fit the model its train.yaml "
                         f"describes ({len(problems)} tensors):\n  " + "\n  ".join(problems))
    return mapped


def _cmvn_stats(src: str, configs: Mapping[str, Any]) -> Optional[Tuple[CmvnStats, str]]:
    named = cmvn_source(configs)
    if named is None:
        return None
    path, is_json = named
    found = _find(src, path, (CMVN_NAME,), "*cmvn*", "CMVN")
    if found is None:
        raise FileNotFoundError(f"{src}: train.yaml names the CMVN file {path!r}, which is "
                                f"neither there nor beside the model as {CMVN_NAME}")
    return (read_cmvn_stats(found) if is_json else read_kaldi_cmvn(found)), found


def _check_cmvn(stats: CmvnStats, path: str, state: Mapping[str, torch.Tensor]) -> None:
    """The file's mean and inverse std against the checkpoint's buffers."""
    if CMVN_MEAN_KEY not in state:
        raise ValueError(f"the checkpoint has no {CMVN_MEAN_KEY} although train.yaml names "
                         f"the CMVN file {path}")
    mean, istd = stats_to_mean_istd(stats)
    for name, ours in ((CMVN_MEAN_KEY, mean), (CMVN_ISTD_KEY, istd)):
        theirs = state[name].double().numpy()
        if theirs.shape != ours.shape or not np.allclose(theirs, ours, rtol=_CMVN_TOLERANCE,
                                                         atol=1e-6):
            raise ValueError(f"{path}: its statistics differ from the checkpoint's {name} "
                             "(not this model's CMVN file?)")


def find_wenet_checkpoint(src: str) -> str:
    """``final.pt``, else the only ``avg_*.pt``; ValueError listing the choices."""
    final = os.path.join(src, CHECKPOINT_NAME)
    if os.path.isfile(final):
        return final
    averages = sorted(glob.glob(os.path.join(src, "avg_*.pt")))
    if len(averages) == 1:
        return averages[0]
    choices = sorted(glob.glob(os.path.join(src, "*.pt")))
    raise FileNotFoundError(f"{src}: no {CHECKPOINT_NAME}; name the checkpoint to import "
                            f"(--checkpoint), one of {choices or 'none found'}")


def import_wenet(src: str, dst: str, checkpoint: Optional[str] = None,
                 units: Optional[str] = None, bpe_model: Optional[str] = None
                 ) -> Dict[str, Any]:
    """Write our model dir ``dst`` for the WeNet model dir ``src`` (module docstring);
    returns what ``import.json`` records. Nothing is written when anything is refused;
    ``dst`` must be new or empty.
    ``checkpoint``, ``units``, ``bpe_model`` name files the dir does not hold or holds
    several of."""
    if os.path.isdir(dst) and os.listdir(dst):
        raise FileExistsError(f"{dst} exists and is not empty: import into a new dir (a file "
                              "left there, e.g. an old bpe.model, would be taken for the model's)")
    config_path = os.path.join(src, "train.yaml")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"{src}: no train.yaml (a WeNet exp dir has one)")
    wenet_configs = load_yaml(config_path)
    try:
        ours = map_config(wenet_configs)
    except UnsupportedWenetConfig as e:
        raise UnsupportedWenetConfig(f"{config_path}: {e}") from None
    checkpoint = checkpoint or find_wenet_checkpoint(src)
    units_named, bpe_named = tokenizer_paths(wenet_configs)
    units = units or _find(src, units_named, UNITS_NAMES, "*_units.txt", "units")
    if units is None:
        raise FileNotFoundError(f"{src}: no units file ({', '.join(UNITS_NAMES)} or "
                                "*_units.txt); name it (--units)")
    bpe_model = bpe_model or _find(src, bpe_named, (BPE_NAME,), "*.model", "BPE model")
    table = read_symbol_table(units)
    order = _renumbering(table, ours["output_dim"], special_sos_eos(wenet_configs), units)
    state = _load_checkpoint(checkpoint)
    cmvn = _cmvn_stats(src, wenet_configs)
    global_cmvn = None
    if cmvn is not None:
        _check_cmvn(cmvn[0], cmvn[1], state)
        global_cmvn = GlobalCMVN(state[CMVN_MEAN_KEY].float(), state[CMVN_ISTD_KEY].float())
    model = init_model(dict(ours, cmvn_file=None), global_cmvn=global_cmvn)
    mapped = map_state_dict(state, model, order, checkpoint)
    model.load_state_dict(mapped, strict=True)

    os.makedirs(dst, exist_ok=True)
    ours.update(cmvn_file=CMVN_NAME if cmvn else None, symbol_table=UNITS_NAME,
                bpe_model=BPE_NAME if bpe_model else None)
    if cmvn is not None:
        save_cmvn(cmvn[0], os.path.join(dst, CMVN_NAME))
    _write_units(table, order, os.path.join(dst, UNITS_NAME))
    if bpe_model:
        shutil.copyfile(bpe_model, os.path.join(dst, BPE_NAME))
    torch.save(model.state_dict(), os.path.join(dst, CHECKPOINT_NAME))
    with open(os.path.join(dst, "train.yaml"), "w", encoding="utf-8") as f:
        yaml.safe_dump(ours, f, sort_keys=False, allow_unicode=True)
    record = {"source": os.path.abspath(src), "checkpoint": os.path.abspath(checkpoint),
              "units": os.path.abspath(units), "cmvn": cmvn and os.path.abspath(cmvn[1]),
              "bpe_model": bpe_model and os.path.abspath(bpe_model),
              "sos_eos_moved_from": order[-1] if order[-1] != len(order) - 1 else None,
              "tensors": len(mapped)}
    with open(os.path.join(dst, "import.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    logging.info("imported %s (%d tensors) into %s", checkpoint, len(mapped), dst)
    return record
