"""The ``./run.sh`` commands of docs/own_data.md, for the tests that run them.

Each command is found by its ``--data_root`` (and, for the fine-tuning one, by
``--units_from``); ``DOC_COMMANDS`` names every one the tests run, and
test_own_data_doc.py checks that it is the doc's whole list.
"""
from __future__ import annotations

import os
import re
import shlex
from typing import Dict, List, Optional

from tests.common import REPO

DOC = os.path.join(REPO, "docs", "own_data.md")
# what the doc's full runs train: the tests replace it by their tiny config's dir
DOC_EXP = "exp/custom_train_conformer"
DOC_COMMANDS = {
    "/data/my_kaldi_dirs", "/data/call_centre", "/data/cv-corpus/en", "/data/my_audiofolder",
    "/data/nemo_manifests", "/data/LibriSpeech", "/data/icefall_manifests",
    "/data/call_centre_no_dev", "/data/mandarin", "/data/mandarin (fine-tuning)",
}


def _name(argv: List[str]) -> str:
    root = argv[argv.index("--data_root") + 1]
    return root + (" (fine-tuning)" if "--units_from" in argv else "")


def doc_commands() -> Dict[str, List[str]]:
    """{name: run.sh arguments} of every ``./run.sh`` line in the doc's sh blocks."""
    with open(DOC, encoding="utf-8") as f:
        blocks = re.findall(r"```sh\n(.*?)```", f.read(), flags=re.S)
    out: Dict[str, List[str]] = {}
    for block in blocks:
        for line in block.splitlines():
            if line.startswith("./run.sh "):
                argv = shlex.split(line)[1:]
                out[_name(argv)] = argv
    return out


def doc_command(name: str, replace: Optional[Dict[str, str]] = None) -> List[str]:
    """The arguments of the doc's command ``name``, each value in ``replace`` replaced."""
    argv = doc_commands()[name]
    replace = replace or {}
    return [replace.get(a, a.replace(DOC_EXP, replace.get(DOC_EXP, DOC_EXP))) for a in argv]
