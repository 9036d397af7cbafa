# Sourced by run.sh and the test runner: activates the project's virtualenv and
# puts the repository root on PYTHONPATH. The virtualenv is (re)installed by
# tools/install.sh when it is missing or was built from other requirements:
# .venv/.installed holds the hash of requirements*.txt it was installed from,
# written only after an install that succeeded.
_wenet_root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The venv and the requirements are those beside the real path.sh (a work dir may link to it).
_wenet_home="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
_wenet_hash="$(export LC_ALL=C; cd "${_wenet_home}" && sha256sum requirements*.txt | sha256sum | cut -d' ' -f1)"
if [ "$(cat "${_wenet_home}/.venv/.installed" 2> /dev/null)" != "${_wenet_hash}" ]; then
  [ ! -f "${_wenet_home}/.venv/.installed" ] \
    || echo "path.sh: requirements*.txt changed since ${_wenet_home}/.venv was installed: reinstalling" >&2
  rm -f "${_wenet_home}/.venv/.installed"
  if ! bash "${_wenet_home}/tools/install.sh"; then
    echo "path.sh: tools/install.sh failed; ${_wenet_home}/.venv is not ready" >&2
    unset _wenet_root _wenet_home _wenet_hash
    return 1 2> /dev/null || exit 1
  fi
  printf '%s\n' "${_wenet_hash}" > "${_wenet_home}/.venv/.installed"
fi
# shellcheck disable=SC1091
source "${_wenet_home}/.venv/bin/activate"
export PYTHONPATH="${_wenet_root}${PYTHONPATH:+:${PYTHONPATH}}"
export PYTHONIOENCODING=UTF-8
export LC_ALL=C
unset _wenet_root _wenet_home _wenet_hash
