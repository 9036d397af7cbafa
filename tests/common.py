"""Paths and small helpers shared by the test folders (fixtures live in conftest.py)."""
import importlib.util
import os
from pathlib import Path
from types import ModuleType

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT_PATH = Path(REPO)
CONF_DIR = os.path.join(REPO, "conf")
TOOLS_DIR = os.path.join(REPO, "tools")
# What ./run.sh writes beside itself: no test may read or write the checkout's own
# (conftest.py watches them), so the suite passes the same before and after a run.
OUTPUT_DIRS = ("data", "raw_wav", "exp", "corpus")


def load_tool(name: str) -> ModuleType:
    """Import ``tools/<name>.py`` (the tools are scripts, not a package) as a module."""
    spec = importlib.util.spec_from_file_location(f"tool_{name}", os.path.join(TOOLS_DIR, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recipe_copy(dest: Path) -> Path:
    """A recipe dir at ``dest`` whose code is the checkout's (symlinks to run.sh, path.sh,
    conf/, local/, tools/, wenet/, ...) and which holds none of its run outputs: run.sh
    run there (``cwd=dest``) sees a fresh clone, whatever the checkout's last run left."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in sorted(os.listdir(REPO)):
        if not name.startswith(".") and name not in OUTPUT_DIRS:
            (dest / name).symlink_to(os.path.join(REPO, name))
    return dest
