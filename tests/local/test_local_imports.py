"""No module of local/ uses another module's private (``_x``) name: what the corpora
share is public, documented where it lives (the two synthetic corpora share
local/synth/corpus.py). The sources are read with ``ast``; nothing is imported."""
from __future__ import annotations

import ast
import os
from typing import List, Set

from tests.common import REPO
from tests.test_layout import python_files


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(root: str, package: str) -> List[str]:
    """``file:line name`` of every private name a ``package`` module takes from another
    module: ``from m import _x``, or ``m._x`` where ``m`` was imported as a module."""
    found = []
    for path in python_files(os.path.join(root, package)):
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        modules: Set[str] = set()  # local names bound to imported modules
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules.update(a.asname or a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                for a in node.names:
                    if _is_private(a.name):
                        found.append(f"{rel}:{node.lineno} {node.module}.{a.name}")
                    elif os.path.exists(os.path.join(root, *f"{node.module}.{a.name}".split("."))
                                        + ".py"):
                        modules.add(a.asname or a.name)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _is_private(node.attr)
                    and isinstance(node.value, ast.Name) and node.value.id in modules):
                found.append(f"{rel}:{node.lineno} {node.value.id}.{node.attr}")
    return found


def test_no_local_module_uses_another_modules_private_name():
    assert private_uses(REPO, "local") == []


def test_private_uses_finds_both_forms(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "b.py").write_text("_hidden = 1\nshown = 2\n\n\ndef _f():\n    return _hidden\n")
    (pkg / "a.py").write_text("from __future__ import annotations\n"
                              "from pkg.b import _hidden, shown\n"
                              "from pkg import b\n"
                              "import os\n"
                              "x = b._f() + shown + os.sep.__len__()\n")
    assert private_uses(str(tmp_path), "pkg") == ["pkg/a.py:2 pkg.b._hidden", "pkg/a.py:5 b._f"]
