#!/usr/bin/env python3
"""The environment probe of tools/gpu_check.sh: what runs the check, in a few seconds.

Prints and writes (``--out probe.json``) the python and torch versions, torch's CUDA
version, the GPU's name, memory, compute capability and bf16 support, the driver
(``nvidia-smi``, under a 10 s timeout), and for every requirement of requirements.txt
whether it imports and which version is installed. Exits 1 when ``--device cuda`` and
CUDA is not usable, or a requirement the check needs does not import.

``--install_from DIR --target LIB`` instead installs, from the wheels in DIR, those whose
distribution is not installed (``pip install --no-index --no-deps --target LIB``), so a
machine that has torch needs nothing else; the check then puts LIB on PYTHONPATH.
"""
from __future__ import annotations

import argparse
import glob
import importlib
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
from typing import Dict, List, Optional

# requirement -> module it provides
IMPORT_NAMES = {"PyYAML": "yaml", "tensorboardX": "tensorboardX"}
# what stages 4-6 import; matplotlib (loss plot) and websockets (serving) are only reported
NOT_NEEDED = {"matplotlib", "websockets"}


def requirements(path: str) -> List[str]:
    """Distribution names of a requirements file (``name==version`` lines)."""
    names = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                names.append(re.split(r"[<>=!~\[; ]", line, maxsplit=1)[0])
    return names


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def installed(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def install_missing(wheel_dir: str, target: str) -> List[str]:
    """pip-install into ``target`` the wheels of ``wheel_dir`` whose distribution is missing,
    one at a time, so a wheel built for another python fails alone (the probe then reports
    what still does not import); → the wheels installed."""
    done = []
    for wheel in sorted(glob.glob(os.path.join(wheel_dir, "*.whl"))):
        dist = os.path.basename(wheel).split("-", 1)[0]
        if installed(dist) is not None or glob.glob(os.path.join(target, f"{_norm(dist)}-*.dist-info")):
            continue
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                            "--disable-pip-version-check", "--target", target, wheel],
                           capture_output=True, text=True)
        if r.returncode == 0:
            done.append(os.path.basename(wheel))
        else:
            print(f"{os.path.basename(wheel)}: pip failed: {r.stderr.strip().splitlines()[-1:]}",
                  file=sys.stderr)
    return done


def gpu_facts() -> Dict:
    import torch
    facts: Dict = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                   "cuda_available": torch.cuda.is_available()}
    if facts["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        facts.update(gpu_count=torch.cuda.device_count(), gpu=props.name,
                     gpu_memory_gib=round(props.total_memory / 2 ** 30, 1),
                     capability=f"{props.major}.{props.minor}",
                     bf16=torch.cuda.is_bf16_supported(),  # what --use_amp auto asks
                     bf16_native=torch.cuda.is_bf16_supported(including_emulation=False))
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        facts["nvidia_smi"] = out.stdout.strip() or out.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        facts["nvidia_smi"] = f"not usable: {e}"
    return facts


def probe(req_file: str) -> Dict:
    facts: Dict = {"python": platform.python_version(), "executable": sys.executable,
                   "platform": platform.platform(), "cpus": os.cpu_count(), "imports": {}}
    for dist in requirements(req_file):
        module = IMPORT_NAMES.get(dist, dist)
        try:
            importlib.import_module(module)
            facts["imports"][dist] = installed(dist) or "?"
        except Exception as e:  # any import failure is a finding, not a crash
            facts["imports"][dist] = f"FAILED: {type(e).__name__}: {e}"
    if not str(facts["imports"].get("torch", "")).startswith("FAILED"):
        facts.update(gpu_facts())
    return facts


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requirements", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "requirements.txt"))
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--out", default=None, help="write the facts here as JSON")
    p.add_argument("--install_from", default=None, help="wheel dir (see the module doc)")
    p.add_argument("--target", default=None, help="with --install_from: where to install")
    args = p.parse_args(argv)
    if args.install_from:
        if not args.target:
            p.error("--install_from needs --target")
        done = install_missing(args.install_from, args.target)
        print(f"installed into {args.target}: {', '.join(done) or 'nothing (all present)'}")
        return 0
    facts = probe(args.requirements)
    for key, value in facts.items():
        if key != "imports":
            print(f"{key}: {value}")
    for dist, version in facts["imports"].items():
        print(f"import {dist}: {version}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(facts, f, indent=1)
    failed = [d for d, v in facts["imports"].items() if v.startswith("FAILED") and d not in NOT_NEEDED]
    if failed:
        print(f"missing requirements: {', '.join(failed)} (pass their wheels with --wheels DIR)",
              file=sys.stderr)
        return 1
    if args.device == "cuda" and not facts.get("cuda_available"):
        print("CUDA is not available to torch (torch.version.cuda "
              f"{facts.get('torch_cuda')}): nothing to check on a GPU", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
