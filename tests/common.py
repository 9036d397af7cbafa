"""Paths and small helpers shared by the test folders (fixtures live in conftest.py)."""
import os
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT_PATH = Path(REPO)
CONF_DIR = os.path.join(REPO, "conf")
TOOLS_DIR = os.path.join(REPO, "tools")
