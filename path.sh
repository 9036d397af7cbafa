# Sourced by run.sh and the test runner: activates the project's virtualenv
# (installing it on first use) and puts the repository root on PYTHONPATH.
_wenet_root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ ! -f "${_wenet_root}/.venv/.installed" ]; then
  bash "${_wenet_root}/tools/install.sh"
fi
# shellcheck disable=SC1091
source "${_wenet_root}/.venv/bin/activate"
export PYTHONPATH="${_wenet_root}${PYTHONPATH:+:${PYTHONPATH}}"
export PYTHONIOENCODING=UTF-8
export LC_ALL=C
unset _wenet_root
