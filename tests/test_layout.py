"""The package layout holds: rooms import only downwards, no import cycles, small files
and functions (docs/architecture.md draws the rooms).

The checker reads the sources with ``ast`` (nothing is imported), so a lazy import
inside a function counts like one at the top of a file.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from typing import Dict, List, Set, Tuple

from tests.common import REPO

# Rank of each room: a module may import its own room, another room of the same
# rank (without cycles), or a room of a lower rank; never a higher one.
ROOM_RANKS = {
    "bin": 6, "serve": 6,
    "train": 5, "inference": 5, "export": 5, "eval": 5, "runtime": 5,
    "decode": 4, "lm": 4, "alignment": 4,
    "models": 3,
    "transformer": 2, "transducer": 2, "zipformer": 2,
    "dataset": 1, "dataprep": 1,
    "utils": 0,
}
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_UTILS_FILES = 5
MAX_ROOM_SHARE = 0.15  # of the package's lines


@dataclass(frozen=True)
class Import:
    source: str   # importing module, dotted
    target: str   # imported module, dotted
    where: str    # file:line


def module_name(root: str, path: str) -> str:
    rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def python_files(package_dir: str) -> List[str]:
    out = []
    for d, _, files in os.walk(package_dir):
        out.extend(os.path.join(d, f) for f in files if f.endswith(".py"))
    return sorted(out)


def collect_imports(root: str, package: str = "wenet") -> Tuple[List[Import], Set[str]]:
    """Every import of a ``package`` module by a ``package`` module, and the module set."""
    paths = python_files(os.path.join(root, package))
    modules = {module_name(root, p) for p in paths}
    found: List[Import] = []
    for path in paths:
        source = module_name(root, path)
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        for node in ast.walk(tree):
            targets: List[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # "from wenet.x import y": y may be a module of its own
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                           else node.module for a in node.names]
            for target in targets:
                if target == package or target.startswith(package + "."):
                    found.append(Import(source, target, f"{os.path.relpath(path, root)}:{node.lineno}"))
    return found, modules


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ROOM_RANKS) else ""


def upward_imports(imports: List[Import]) -> List[str]:
    """Imports from a lower room into a higher one, described for a person."""
    bad = []
    for imp in imports:
        src, dst = room_of(imp.source), room_of(imp.target)
        if not src or not dst or src == dst:
            continue
        if src not in ROOM_RANKS or dst not in ROOM_RANKS:
            bad.append(f"{imp.where}: {imp.source} imports {imp.target}: "
                       f"room {src or dst} is not in the layout (tests/test_layout.py ROOM_RANKS)")
        elif ROOM_RANKS[dst] > ROOM_RANKS[src]:
            bad.append(f"{imp.where}: {imp.source} imports {imp.target}: "
                       f"{src}/ may not import the higher room {dst}/")
    return bad


def import_cycles(imports: List[Import], modules: Set[str]) -> List[List[str]]:
    """Strongly connected groups of more than one module (or a module importing itself)."""
    graph: Dict[str, Set[str]] = {m: set() for m in modules}
    for imp in imports:
        target = imp.target
        while target not in modules and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in modules and target != imp.source:
            graph[imp.source].add(target)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    cycles: List[List[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def _describe_cycle(group: List[str], imports: List[Import]) -> str:
    members = set(group)
    edges = [f"{i.where} ({i.source} -> {i.target})" for i in imports
             if i.source in members and any(i.target == m or i.target.startswith(m + ".")
                                            for m in members - {i.source})]
    return "cycle among " + ", ".join(group) + ": " + "; ".join(edges)


def oversized(root: str, package: str = "wenet") -> List[str]:
    """Files over MAX_FILE_LINES and functions over MAX_FUNCTION_LINES."""
    bad = []
    for path in python_files(os.path.join(root, package)):
        text = open(path, encoding="utf-8").read()
        rel = os.path.relpath(path, root)
        if text.count("\n") > MAX_FILE_LINES:
            bad.append(f"{rel}: {text.count(chr(10))} lines (at most {MAX_FILE_LINES})")
        for node in ast.walk(ast.parse(text, path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    bad.append(f"{rel}:{node.lineno}: {node.name}() is {length} lines "
                               f"(at most {MAX_FUNCTION_LINES})")
    return bad


def private_imports(root: str, folders=("wenet", "bench", "tools", "local", "tests")) -> List[str]:
    """``from M import _name`` of a project module M (wenet, local, tools, bench) by another
    file: a private name stays in its module (make it public, with a docstring, to share it).
    Tests may share their own helpers among themselves."""
    bad = []
    for folder in folders:
        for path in python_files(os.path.join(root, folder)):
            tree = ast.parse(open(path, encoding="utf-8").read(), path)
            here = module_name(root, path)
            for node in ast.walk(tree):
                if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                    continue
                if node.module.split(".")[0] not in ("wenet", "local", "tools", "bench"):
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__") \
                            and node.module != here:
                        bad.append(f"{os.path.relpath(path, root)}:{node.lineno}: "
                                   f"{alias.name} from {node.module}")
    return bad


# ------------------------------------------------------------------- the repository

def test_no_private_name_is_imported_across_modules():
    assert private_imports(REPO) == []


def test_no_room_holds_more_than_its_share_of_the_package():
    lines = {}
    for path in python_files(os.path.join(REPO, "wenet")):
        room = room_of(module_name(REPO, path)) or "(top)"
        with open(path, encoding="utf-8") as f:
            lines[room] = lines.get(room, 0) + sum(1 for _ in f)
    total = sum(lines.values())
    assert {r: f"{n / total:.1%}" for r, n in lines.items() if n > MAX_ROOM_SHARE * total} == {}

def test_no_upward_imports_in_wenet():
    imports, _ = collect_imports(REPO)
    assert upward_imports(imports) == []


def test_no_import_cycles_in_wenet():
    imports, modules = collect_imports(REPO)
    assert [_describe_cycle(g, imports) for g in import_cycles(imports, modules)] == []


def test_every_room_is_known_and_utils_is_small():
    rooms = sorted(d for d in os.listdir(os.path.join(REPO, "wenet"))
                   if os.path.isfile(os.path.join(REPO, "wenet", d, "__init__.py")))
    assert [r for r in rooms if r not in ROOM_RANKS] == []
    utils = [f for f in os.listdir(os.path.join(REPO, "wenet", "utils"))
             if f.endswith(".py") and f != "__init__.py"]
    assert len(utils) <= MAX_UTILS_FILES, sorted(utils)


def test_files_and_functions_are_small():
    assert oversized(REPO) == []


def test_tests_mirror_the_package():
    rooms = {d for d in os.listdir(os.path.join(REPO, "wenet"))
             if os.path.isfile(os.path.join(REPO, "wenet", d, "__init__.py"))}
    test_dirs = {d for d in os.listdir(os.path.join(REPO, "tests"))
                 if os.path.isdir(os.path.join(REPO, "tests", d)) and not d.startswith("__")}
    # every test folder is a room of wenet/ or one of the non-package parts of the repo,
    # or device/: the device guard across all rooms (issue 36)
    assert sorted(test_dirs - rooms - {"tools", "local", "device"}) == []


# ------------------------------------------------------------------ the checker itself

def _tree(tmp_path, files: Dict[str, str]) -> str:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path)


def test_checker_names_a_private_import_across_modules_only(tmp_path):
    root = _tree(tmp_path, {
        "wenet/__init__.py": "",
        "wenet/a.py": "_x = 1\n",
        "wenet/b.py": "from wenet.a import (y,\n    _x)\nfrom os import _exit\n",
        "wenet/c.py": "from wenet.c import _self\nfrom wenet.a import __doc__\n",
        "tests/t.py": "from tests.u import _helper\nfrom local.synth.g import _p\n",
    })
    assert private_imports(root) == ["wenet/b.py:1: _x from wenet.a",
                                     "tests/t.py:2: _p from local.synth.g"]


def test_checker_names_an_upward_import_and_a_lazy_one(tmp_path):
    root = _tree(tmp_path, {
        "wenet/__init__.py": "",
        "wenet/utils/__init__.py": "",
        "wenet/utils/a.py": "import os\nfrom wenet.models.f import g\n",
        "wenet/utils/b.py": "def h():\n    from wenet.bin import train\n",
        "wenet/models/__init__.py": "",
        "wenet/models/f.py": "from wenet.utils import a\n",
        "wenet/bin/__init__.py": "",
        "wenet/bin/train.py": "from wenet.models.f import g\n",
    })
    imports, _ = collect_imports(root)
    assert upward_imports(imports) == [
        "wenet/utils/a.py:2: wenet.utils.a imports wenet.models.f: "
        "utils/ may not import the higher room models/",
        "wenet/utils/b.py:2: wenet.utils.b imports wenet.bin.train: "
        "utils/ may not import the higher room bin/",
    ]


def test_checker_finds_a_cycle_and_only_that(tmp_path):
    root = _tree(tmp_path, {
        "wenet/__init__.py": "",
        "wenet/transformer/__init__.py": "",
        "wenet/transformer/x.py": "from wenet.transformer.y import Y\n",
        "wenet/transformer/y.py": "def f():\n    import wenet.transformer.z\n",
        "wenet/transformer/z.py": "from wenet.transformer import x\n",
        "wenet/transformer/w.py": "from wenet.transformer import x\n",
    })
    imports, modules = collect_imports(root)
    cycles = import_cycles(imports, modules)
    assert cycles == [["wenet.transformer.x", "wenet.transformer.y", "wenet.transformer.z"]]
    assert "wenet/transformer/y.py:2" in _describe_cycle(cycles[0], imports)


def test_checker_measures_files_and_functions(tmp_path):
    lines = [f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES)]
    body = "".join(lines)
    root = _tree(tmp_path, {
        "wenet/__init__.py": "",
        "wenet/utils/__init__.py": "",
        "wenet/utils/long.py": "def f():\n" + body + "\n" * (MAX_FILE_LINES - MAX_FUNCTION_LINES),
        "wenet/utils/short.py": "def g():\n" + "".join(lines[:-1]),
    })
    assert oversized(root) == [
        f"wenet/utils/long.py: {MAX_FILE_LINES + 1} lines (at most {MAX_FILE_LINES})",
        f"wenet/utils/long.py:1: f() is {MAX_FUNCTION_LINES + 1} lines "
        f"(at most {MAX_FUNCTION_LINES})",
    ]
