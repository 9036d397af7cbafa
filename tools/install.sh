#!/usr/bin/env bash
# One-time set-up: a virtualenv in .venv with the pinned requirements, and the
# Debian packages the built-in corpus needs (text-to-speech engines and sox), the
# broad corpus's text (wordnet-base, fortunes, fortunes-min: --corpus synth_broad) and voices
# and the tests need (chromium, for the browser test of the recognition server).
# Safe to rerun: it only installs what is missing or pinned differently. path.sh
# calls it when .venv is missing or was installed from other requirements*.txt,
# and records their hash in .venv/.installed once this has succeeded.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${root}/.venv"
python="${PYTHON:-python3.11}"
command -v "${python}" > /dev/null 2>&1 || python=python3
debs=(espeak-ng flite sox wordnet-base fortunes fortunes-min)
# the broad corpus's festival voices (--styles natural=...)
debs+=(festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts)
# needed by the tests only: the browser test of the recognition server's page
test_debs=(chromium)

missing=()
for pkg in "${debs[@]}" "${test_debs[@]}"; do
  dpkg -s "${pkg}" > /dev/null 2>&1 || missing+=("${pkg}")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "install.sh: installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" > /dev/null
  else
    echo "install.sh: missing Debian packages: ${missing[*]}" >&2
    echo "install.sh: run as root:  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

if [ ! -x "${venv}/bin/python" ]; then
  echo "install.sh: creating ${venv} with $(${python} --version)"
  "${python}" -m venv "${venv}"
fi
echo "install.sh: installing Python requirements (about a minute)"
"${venv}/bin/python" -m pip install -q --disable-pip-version-check \
  -r "${root}/requirements.txt" -r "${root}/requirements-test.txt"
echo "install.sh: done"
