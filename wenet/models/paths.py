"""Where the files a model directory's ``train.yaml`` names are: one rule for all of them.

A ``train.yaml`` names files by the paths training was given (``cmvn_file``,
``symbol_table``, ``bpe_model``), usually relative to the recipe the job ran in, and stage 6
copies them beside the model (``global_cmvn``, ``units.txt``, ``bpe.model``). Whoever loads
the model later may run anywhere, so a relative path is never read against the process's
working directory (a second recipe there would hand over its own, wrong files whenever
their sizes happen to agree). The rule:

1. the model directory: the copy beside the model, then the named path below the dir;
2. the recipe root recorded at training time (``recipe_root`` in ``train.yaml``); a
   ``train.yaml`` written before that key existed takes the nearest of the dir's three
   ancestors holding the named path (run.sh lays models out as ``<recipe>/exp/<name>``).

Every candidate that exists is read: if two differ (content hash, or a units file whose
size is not the model's ``output_dim``), a ``ValueError`` names both files rather than
choosing one silently. The first candidate wins when they agree.

A checkpoint carries its CMVN as encoder buffers, so models loaded from one never need the
CMVN file (:func:`wenet.models.load_model`); the rule still decides which file it is when
one is asked for.
"""
from __future__ import annotations

import glob
import hashlib
import logging
import os
from typing import Any, Callable, Dict, List, Mapping, Optional

from wenet.utils.file_utils import read_symbol_table

RECIPE_ROOT_KEY = "recipe_root"
CMVN_NAME = "global_cmvn"
UNITS_NAME = "units.txt"
BPE_NAME = "bpe.model"
_LEGACY_DEPTH = 3  # ancestors of a model dir searched when train.yaml records no recipe root


def recorded_paths(cmvn_file: Optional[str], symbol_table: Optional[str],
                   bpe_model: Optional[str], recipe_root: Optional[str] = None
                   ) -> Dict[str, Any]:
    """The ``train.yaml`` keys that let a loader find training's files from anywhere: the
    paths as given (relative ones are relative to ``recipe_root``, the working directory of
    training by default, stored absolute)."""
    return {"cmvn_file": cmvn_file, "symbol_table": symbol_table, "bpe_model": bpe_model,
            RECIPE_ROOT_KEY: os.path.abspath(recipe_root or os.getcwd())}


def units_size(path: str) -> int:
    """Entries of a units file (max id + 1), which is the model's ``output_dim``."""
    return max(read_symbol_table(path).values()) + 1


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def named_or_only(folder: str, name: str, pattern: str) -> Optional[str]:
    """``folder/name`` if it is a file, else the only file of ``folder`` matching
    ``pattern``, else None."""
    exact = os.path.join(folder, name)
    if os.path.isfile(exact):
        return exact
    found = sorted(glob.glob(os.path.join(folder, pattern)))
    return found[0] if len(found) == 1 else None


def _recipe_candidate(model_dir: str, configs: Mapping[str, Any], value: str) -> Optional[str]:
    """``value`` under the recorded recipe root, else (older train.yaml) under the nearest
    ancestor of ``model_dir`` that holds it; None when nowhere."""
    root = configs.get(RECIPE_ROOT_KEY)
    if root:
        candidate = os.path.join(root, value)
        return candidate if os.path.isfile(candidate) else None
    base = os.path.abspath(model_dir)
    for _ in range(_LEGACY_DEPTH):
        base = os.path.dirname(base)
        candidate = os.path.join(base, value)
        if os.path.isfile(candidate):
            return candidate
    return None


def candidates(model_dir: str, configs: Mapping[str, Any], key: str,
               beside: Optional[str]) -> List[str]:
    """Existing files, in the rule's order, that may be what ``configs[key]`` names:
    ``beside`` (a file of the model dir), the named path below the dir, then under the
    recipe root. Duplicates (the same file reached twice) are dropped."""
    found: List[str] = []
    if beside:
        found.append(beside)
    value = configs.get(key)
    if value:
        value = str(value)
        if os.path.isabs(value):
            found.append(value)
        else:
            found.append(os.path.join(model_dir, value))
            recipe = _recipe_candidate(model_dir, configs, value)
            if recipe:
                found.append(recipe)
    unique: List[str] = []
    for path in found:
        if os.path.isfile(path) and all(not os.path.samefile(path, u) for u in unique):
            unique.append(os.path.normpath(path))
    return unique


def agreed(what: str, model_dir: str, found: List[str],
           check: Optional[Callable[[str], Optional[str]]] = None) -> Optional[str]:
    """The first of ``found`` after checking that every one passes ``check`` (which returns
    a reason to refuse a file, or None) and that all have the same content; a
    ``ValueError`` naming both files otherwise."""
    for path in found:
        reason = check(path) if check else None
        if reason:
            raise ValueError(f"{model_dir}: {what} {path} {reason}")
    for other in found[1:]:
        if _sha256(other) != _sha256(found[0]):
            raise ValueError(
                f"{model_dir}: two {what} files disagree: {found[0]} and {other} differ. "
                "Remove the wrong one or name the file explicitly.")
    return found[0] if found else None


def resolve_cmvn(model_dir: str, configs: Mapping[str, Any]) -> Optional[str]:
    """The CMVN statistics of a model dir: ``global_cmvn`` beside it and ``cmvn_file`` by
    the rule; None when the model has none (``cmvn_file`` null); FileNotFoundError when
    it has one but no candidate exists."""
    beside = os.path.join(model_dir, CMVN_NAME)
    found = candidates(model_dir, configs, "cmvn_file",
                       beside if os.path.isfile(beside) else None)
    if not found and configs.get("cmvn_file"):
        raise FileNotFoundError(
            f"{model_dir}: train.yaml's cmvn_file {configs['cmvn_file']} is neither below the "
            f"dir nor under the recipe root {configs.get(RECIPE_ROOT_KEY) or '(not recorded)'}, "
            f"and there is no {CMVN_NAME} beside it (run.sh stage 6 copies it there)")
    return agreed("CMVN", model_dir, found)


def _legacy_recipe_units(model_dir: str, output_dim: Optional[int]) -> List[str]:
    """A model dir of this recipe from before stage 6 copied units and before train.yaml
    named them: the only ``data/lang_char/*_units.txt`` two levels up of the model's size."""
    recipe = sorted(glob.glob(os.path.join(model_dir, "..", "..", "data", "lang_char",
                                           "*_units.txt")))
    fits = [os.path.normpath(u) for u in recipe
            if output_dim is None or units_size(u) == output_dim]
    if len(fits) == 1:
        logging.info("%s has no %s: using the recipe's %s", model_dir, UNITS_NAME, fits[0])
        return fits
    return []


def resolve_units(model_dir: str, configs: Mapping[str, Any]) -> str:
    """The units file of a model dir: ``units.txt`` (or its only ``*_units.txt``) and
    ``symbol_table`` by the rule, each of the model's ``output_dim`` entries."""
    output_dim = configs.get("output_dim")
    found = candidates(model_dir, configs, "symbol_table",
                       named_or_only(model_dir, UNITS_NAME, "*_units.txt"))
    if not found and not configs.get("symbol_table"):
        found = _legacy_recipe_units(model_dir, output_dim)
    if not found:
        raise FileNotFoundError(
            f"{model_dir}: no {UNITS_NAME} (run.sh stage 6 copies it there: ./run.sh --stage 6 "
            f"--stop_stage 6 --dir {model_dir}; or name it, e.g. --dict "
            "data/lang_char/..._units.txt)")

    def wrong_size(path: str) -> Optional[str]:
        size = units_size(path)
        if output_dim is not None and size != int(output_dim):
            return f"has {size} units but the model's output_dim is {output_dim}"
        return None

    return agreed("units", model_dir, found, wrong_size)  # type: ignore[return-value]


def resolve_bpe(model_dir: str, configs: Mapping[str, Any], units: str) -> Optional[str]:
    """The sentencepiece model of a model dir (``bpe.model`` or its only ``*.model``, and
    ``bpe_model`` by the rule), else the ``<stem>.model`` beside a recipe's
    ``<stem>_units.txt``, else None (the units are characters, or hotwords are cut into
    characters: logged when the units look like word pieces)."""
    found = candidates(model_dir, configs, "bpe_model",
                       named_or_only(model_dir, BPE_NAME, "*.model"))
    if found:
        return agreed("BPE model", model_dir, found)
    if units.endswith("_units.txt") and os.path.isfile(units[:-len("_units.txt")] + ".model"):
        return units[:-len("_units.txt")] + ".model"  # the recipe's data/lang_char pair
    with open(units, encoding="utf-8") as f:
        pieces = [line.split()[0] for line in f if line.strip()]
    if any(p.startswith("\u2581") and len(p) > 1 for p in pieces):
        logging.warning("%s: %s holds word pieces but there is no %s beside it: hotword "
                        "phrases will be cut into characters (run.sh stage 6 copies it; or "
                        "name it)", model_dir, units, BPE_NAME)
    return None
