"""The documentation against the code it describes: the README's headline figures are RESULTS.md's
summary, every run.sh variable is in docs/options.md, every wenet/ room is in the README's
layout, every command of README.md and docs/*.md names a script and options that exist, the
README and RESULTS.md stay short, and relative links lead to files."""
import json
import os
import re
import shlex
import subprocess
import sys
from typing import Dict, List, Optional, Set, Tuple

import pytest

from tests.common import REPO

USER_PAGES = ["README.md"] + sorted(f"docs/{n}" for n in os.listdir(os.path.join(REPO, "docs"))
                                    if n.endswith(".md"))
FLOAT = re.compile(r"\d+(?:\.\d+)?")


def _read(rel: str) -> str:
    with open(os.path.join(REPO, rel), encoding="utf-8") as f:
        return f.read()


def _section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def _table(section: str) -> List[List[str]]:
    """The cells of a markdown table's body rows (header and rule dropped)."""
    rows = [line.strip().strip("|").split("|") for line in section.splitlines()
            if line.startswith("|")]
    return [[c.strip() for c in r] for r in rows[2:]]


def _summary() -> Dict[Tuple[str, str], List[str]]:
    """RESULTS.md's summary: (recipe, model) -> the row's cells."""
    return {(r[0], r[1]): r for r in _table(_section(_read("RESULTS.md"), "## Summary"))}


def test_readme_headline_is_the_results_summary():
    (row,) = [r for (recipe, _), r in _summary().items() if "`./run.sh`" in recipe]
    wer = re.search(r"\*\*([\d.]+)\*\*", row[3]).group(1)
    wall = re.sub(r"\s*\(.*\)$", "", row[4])
    first_screen = " ".join(_read("README.md").splitlines()[:50])
    m = re.search(r"`\./run\.sh` takes \*\*(.+?)\*\* on a 2-core (.+?) and reaches \*\*([\d.]+) %\*\*",
                  first_screen)
    assert m, "README's first screen lacks the main job's time and WER sentence"
    assert (m.group(1), m.group(3)) == (wall, wer)
    assert all(part in m.group(2) for part in row[5].split(", ")), (m.group(2), row[5])


def test_readme_results_table_quotes_results_summary():
    summary = {key: FLOAT.findall(r[3]) for key, r in _summary().items() if FLOAT.search(r[3])}
    readme = {(r[0], r[1]): FLOAT.findall(r[3])
              for r in _table(_section(_read("README.md"), "## Results"))}
    assert readme == summary


def _run_sh_variables(path: str = "run.sh") -> List[str]:
    """The options of a parse_options.sh script: names assigned at a line's start above
    its help_message= line."""
    head = _read(path).split("\nhelp_message=", 1)[0]
    return re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)=(?!\()", head, flags=re.M)


def test_every_run_sh_variable_is_in_the_options_page():
    options = _read("docs/options.md")
    names = _run_sh_variables()
    assert len(names) > 50
    assert [n for n in names if f"`{n}`" not in options] == []


def test_every_wenet_room_is_in_the_readme_layout():
    layout = _section(_read("README.md"), "## Layout")
    rooms = sorted(d for d in os.listdir(os.path.join(REPO, "wenet"))
                   if os.path.isfile(os.path.join(REPO, "wenet", d, "__init__.py")))
    assert [r for r in rooms if not re.search(rf"(?<![\w/]){r}/", layout.replace("wenet/", " "))] == []
    assert len(layout.strip().splitlines()) <= 13  # the fence and ~10 lines


def test_readme_and_results_stay_short():
    assert len(_read("README.md").splitlines()) <= 150
    assert len(_read("RESULTS.md").splitlines()) <= 300


def _without_code(text: str) -> str:
    return re.sub(r"```.*?```", "", re.sub(r"`[^`\n]*`", "", text, flags=re.S), flags=re.S)


@pytest.mark.parametrize("rel", ["RESULTS.md", "CHANGELOG.md", "docs/experiments/README.md"]
                         + USER_PAGES)
def test_relative_links_lead_to_files(rel):
    base = os.path.dirname(os.path.join(REPO, rel))
    targets = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", _without_code(_read(rel)))
    missing = [t for t in targets if not re.match(r"[a-z]+:", t)
               and not os.path.exists(os.path.normpath(os.path.join(base, t)))]
    assert missing == []


# ------------------------------------------------------------------ commands in the docs

SCRIPT = re.compile(r"^(?:\./)?(run\.sh|(?:wenet|tools|bench|local)/\S*[^/\s])$")


def _commands(text: str) -> List[List[str]]:
    """Shell words of every simple command in the ```bash and ```sh blocks of a page."""
    out = []
    for lang, block in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S):
        if lang not in ("bash", "sh"):
            continue
        block = re.sub(r"\\\n", " ", block)
        for line in block.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line.replace("$(", ";").replace(")", " "))
            for part in re.split(r"\|\||&&|[|;&]", line):
                try:
                    words = shlex.split(part)
                except ValueError:  # an unbalanced quote across a split point
                    words = part.split()
                if words:
                    out.append([w.strip("[]") for w in words])
    return out


def _invocation(words: List[str]) -> Optional[Tuple[str, List[str]]]:
    """(script, its option words) when the command runs a script of the repository."""
    while words and re.match(r"^[A-Za-z_]+=", words[0]):  # VAR=value prefixes
        words = words[1:]
    for i, w in enumerate(words):
        if w == "-m" and i + 1 < len(words) and words[i + 1].startswith("wenet"):
            return "-m " + words[i + 1], words[i + 2:]
        if SCRIPT.match(w) and (i == 0 or re.search(r"python|bash|torchrun|time|--", " ".join(words[:i]))):
            return SCRIPT.match(w).group(1), words[i + 1:]
    return None


def _options(words: List[str]) -> List[str]:
    return [w.split("=", 1)[0] for w in words if re.match(r"^--[A-Za-z]", w)]


_GRAB = r"""
import argparse, json, runpy, sys
class Done(Exception):
    pass
found = {}
def grab(self, *a, **k):
    found[target] = sorted(self._option_string_actions)
    raise Done
argparse.ArgumentParser.parse_args = grab
argparse.ArgumentParser.parse_known_args = grab
for target in json.loads(sys.argv[1]):
    sys.argv = [target, "--help"]
    try:
        if target.startswith("-m "):
            runpy.run_module(target[3:], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except (Done, SystemExit):
        pass
print(json.dumps(found))
"""


_OPTIONS: Dict[str, List[str]] = {}  # script -> its argparse options, read once per session


def _python_options(scripts: Set[str]) -> Dict[str, List[str]]:
    """Each Python script's argparse options, read by running it with its parser's
    parse_args replaced (one process for all: torch is imported once)."""
    todo = sorted(scripts - set(_OPTIONS))
    if todo:
        env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}
        run = subprocess.run([sys.executable, "-c", _GRAB, json.dumps(todo)], cwd=REPO,
                             env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        _OPTIONS.update(json.loads(run.stdout.strip().splitlines()[-1]))
    return {s: _OPTIONS[s] for s in scripts if s in _OPTIONS}


def _shell_options(script: str) -> Set[str]:
    text = _read(script)
    if "parse_options.sh" in text:
        return {"--" + n for n in _run_sh_variables(script)} | {"--config", "--help"}
    return set(re.findall(r"--[A-Za-z][\w-]*", text))


def _faults(pages: Dict[str, str]) -> Tuple[int, List[str]]:
    """(commands that run a repository script, what is wrong with them): scripts that do not
    exist, options their parser (or, for shell scripts, their text) does not know."""
    calls = [(page, inv) for page, text in pages.items() for words in _commands(text)
             for inv in [_invocation(words)] if inv]
    faults = sorted({f"{page}: {script} does not exist" for page, (script, _) in calls
                     if not script.startswith("-m ")
                     and not os.path.exists(os.path.join(REPO, script))})
    present = [(page, (s, w)) for page, (s, w) in calls
               if s.startswith("-m ") or os.path.exists(os.path.join(REPO, s))]
    python = {s for _, (s, _) in present if s.endswith(".py") or s.startswith("-m ")}
    known: Dict[str, Set[str]] = {s: set(o) for s, o in
                                  _python_options(python | {"wenet/bin/train.py"}).items()}
    known.update({s: _shell_options(s) for _, (s, _) in present if s not in python})
    for page, (script, words) in present:
        if "--" in words:  # tools/launch_train.sh ... -- <train.py options>
            cut = words.index("--")
            words, rest = words[:cut], words[cut + 1:]
            faults += [f"{page}: wenet/bin/train.py {o}" for o in _options(rest)
                       if o not in known["wenet/bin/train.py"]]
        if script not in known:
            faults.append(f"{page}: {script} has no argparse parser")
            continue
        faults += [f"{page}: {script} {o}" for o in _options(words) if o not in known[script]]
    return len(calls), faults


def test_commands_in_the_docs_name_scripts_and_options_that_exist():
    count, faults = _faults({page: _read(page) for page in USER_PAGES})
    assert count > 50  # the parser still finds the pages' commands
    assert faults == []


def test_the_command_check_finds_what_is_wrong():
    page = ("```bash\nOMP_NUM_THREADS=1 python wenet/bin/transcribe.py --model_dir d --nbest 3 "
            "--no_such_flag 1 a.wav | sort\n./run.sh --stage 4 --nope=1 # --not_an_option\n"
            "tools/launch_train.sh --num_nodes 1 -- --config c.yaml --bogus\n"
            "python bench/nothing.py --x 1\n```\n```python\nimport os  # --ignored\n```\n")
    assert _faults({"p.md": page}) == (4, [
        "p.md: bench/nothing.py does not exist",
        "p.md: wenet/bin/transcribe.py --no_such_flag",
        "p.md: run.sh --nope",
        "p.md: wenet/bin/train.py --bogus"])


def test_every_test_the_reliability_matrix_names_exists():
    """docs/reliability.md names a test per case: each path::name is a file of tests/
    defining that test function, so the matrix cannot point at a renamed or lost test."""
    refs = re.findall(r"(tests/[\w/]+\.py)::(\w+)", _read("docs/reliability.md"))
    assert len(refs) > 40
    missing = [f"{path}::{name}" for path, name in refs
               if not os.path.exists(os.path.join(REPO, path))
               or not re.search(rf"^(?:async )?def {name}\(", _read(path), flags=re.M)]
    assert missing == []
