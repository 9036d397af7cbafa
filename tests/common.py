"""Paths and small helpers shared by the test folders (fixtures live in conftest.py)."""
import importlib.util
import os
from pathlib import Path
from types import ModuleType

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT_PATH = Path(REPO)
CONF_DIR = os.path.join(REPO, "conf")
TOOLS_DIR = os.path.join(REPO, "tools")


def load_tool(name: str) -> ModuleType:
    """Import ``tools/<name>.py`` (the tools are scripts, not a package) as a module."""
    spec = importlib.util.spec_from_file_location(f"tool_{name}", os.path.join(TOOLS_DIR, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
