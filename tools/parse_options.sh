# Kaldi-style option parsing, sourced by scripts after they set their defaults:
#
#   stage=0; nj=4
#   help_message="Usage: $0 [options] <arg>"
#   . tools/parse_options.sh
#
# "--some-name value" and "--some_name value" set some_name, but only when the
# calling script defined that variable before sourcing this file: anything else
# is an error that names the option and prints the usage. A variable whose
# default is true/false only takes true or false. "--config FILE" sources FILE
# (shell assignments) before the other options are applied, wherever it stands.
# "--help" / "-h" prints $help_message and exits 0. Parsing stops at the first
# argument that does not start with "--"; those remain as "$@".

_po_usage() {
  if [ -n "${help_message:-}" ]; then
    printf '%s\n' "${help_message}" >&2
  else
    echo "Usage: $0 [--option value ...] (no help_message defined)" >&2
  fi
}

# First pass: --config files, so that explicit options override them.
_po_i=1
while [ "${_po_i}" -le "$#" ]; do
  _po_arg="${!_po_i}"
  if [ "${_po_arg}" = "--config" ]; then
    _po_next=$((_po_i + 1))
    if [ "${_po_next}" -gt "$#" ]; then
      echo "$0: --config needs a file argument" >&2; _po_usage; exit 1
    fi
    _po_file="${!_po_next}"
    if [ ! -r "${_po_file}" ]; then
      echo "$0: cannot read config file ${_po_file}" >&2; exit 1
    fi
    # shellcheck disable=SC1090
    . "${_po_file}" || { echo "$0: error sourcing config file ${_po_file}" >&2; exit 1; }
  fi
  _po_i=$((_po_i + 1))
done

while true; do
  [ "$#" -eq 0 ] && break
  case "$1" in
    --help|-h)
      if [ -n "${help_message:-}" ]; then printf '%s\n' "${help_message}"; else echo "Usage: $0 [options]"; fi
      exit 0 ;;
    --config)
      shift 2 || { echo "$0: --config needs a file argument" >&2; exit 1; } ;;
    --*=*)
      echo "$0: options take the form '--name value', not '--name=value': $1" >&2
      _po_usage; exit 1 ;;
    --*)
      _po_name="$(printf '%s' "${1#--}" | sed 's/-/_/g')"
      if ! printf '%s' "${_po_name}" | grep -Eq '^[A-Za-z_][A-Za-z0-9_]*$' \
          || eval '[ -z "${'"${_po_name}"'+set}" ]'; then
        echo "$0: unknown option $1" >&2
        _po_usage; exit 1
      fi
      if [ "$#" -lt 2 ]; then
        echo "$0: option $1 needs a value" >&2
        _po_usage; exit 1
      fi
      _po_old="${!_po_name}"
      if { [ "${_po_old}" = "true" ] || [ "${_po_old}" = "false" ]; } \
          && [ "$2" != "true" ] && [ "$2" != "false" ]; then
        echo "$0: option $1 takes true or false, not '$2'" >&2
        exit 1
      fi
      printf -v "${_po_name}" '%s' "$2"
      shift 2 ;;
    *) break ;;
  esac
done

unset _po_i _po_arg _po_next _po_file _po_name _po_old
true
