# Kaldi-style option parsing, sourced by a script after it sets its defaults:
#
#   stage=0                            # the script's options: the variables assigned
#   nj=4                               # at the start of a line above help_message=
#   use_gpu=false
#   help_message="Usage: $0 [options] <arg>"
#   option_types=(stage=0..6 nj=posint)  # optional: what values each option takes
#   . tools/parse_options.sh
#
# Which variables are options is read from the calling script's own text: every
# "name=..." at the start of a line above its help_message= line (above the line
# that sources this file when there is none); arrays (name=(...)) are not options.
# Nothing else can be set: an option naming another variable (--PATH, --help_message,
# a variable set later) exits 1 naming it, with the usage. So source this file from
# the script itself, before any cd, with one default per line.
#
# Forms: "--some-name value", "--some-name=value", "--some_name value" all set some_name.
# Each value is checked as it is set; a bad one exits 1 with a message naming the
# option and the values it takes. option_types entries are name=type with type one of
#   bool      true or false (also every option whose default is true or false)
#   uint      a non-negative integer      posint   a positive integer
#   int       an integer                  N..M     an integer from N to M
#   a|b|c     one of the words            nonempty any non-empty string
#   float     a decimal number (1, -0.5, .3, 2e-3)
# Integers are stored in plain decimal (--nj 08 sets nj=8).
#
# "--config FILE" (or --config=FILE) reads FILE before the command-line options are
# applied, wherever it stands, so those win. FILE is parsed, never sourced: blank
# lines, "# comments" and name=value lines, where value is 'literal', "literal"
# (\" \\ \$ \` escapes; an unescaped $ or ` is refused) or a bare word without
# shell characters; nothing is expanded or run. A name that is not an option, or
# a line of another form, exits 1 naming FILE:LINE.
# "--help" / "-h" among the options prints $help_message on stdout and exits 0.
# Parsing stops at the first argument that does not start with "--"; it and the
# rest remain as "$@".

_po_usage() {
  if [ -n "${help_message:-}" ]; then
    printf '%s\n' "${help_message}" >&2
  else
    echo "Usage: $0 [--option value ...] (no help_message defined)" >&2
  fi
}
_po_die() { echo "$0: $*" >&2; exit 1; }
_po_die_usage() { echo "$0: $*" >&2; _po_usage; exit 1; }

# The caller's options: its "name=" lines above help_message= (or above the source line).
_po_caller="${BASH_SOURCE[1]:-}"
if [ -z "${_po_caller}" ] || [ ! -r "${_po_caller}" ]; then
  echo "parse_options.sh: cannot read the calling script '${_po_caller}' to learn its options" \
    "(source parse_options.sh from a script file, before any cd)" >&2
  exit 2
fi
declare -A _po_type=()
_po_re_default='^([A-Za-z_][A-Za-z0-9_]*)=([^(]|$)'
_po_lineno=0
while IFS= read -r _po_line || [ -n "${_po_line}" ]; do
  _po_lineno=$((_po_lineno + 1))
  [ "${_po_lineno}" -lt "${BASH_LINENO[0]}" ] || break
  [[ "${_po_line}" == help_message=* ]] && break
  if [[ "${_po_line}" =~ ${_po_re_default} ]]; then
    _po_name="${BASH_REMATCH[1]}"
    case "${_po_name}" in config|help|_po_*) continue ;; esac
    _po_type[${_po_name}]=
    case "${!_po_name-}" in true|false) _po_type[${_po_name}]=bool ;; esac
  fi
done < "${_po_caller}"

if [[ "$(declare -p option_types 2> /dev/null)" == "declare -a"* ]]; then
  for _po_spec in ${option_types[@]+"${option_types[@]}"}; do
    _po_name="${_po_spec%%=*}"
    if [ -z "${_po_type[${_po_name}]+set}" ]; then
      echo "parse_options.sh: option_types names '${_po_name}', which is not an option of $0" \
        "(options are the name=... lines above help_message=)" >&2
      exit 2
    fi
    _po_type[${_po_name}]="${_po_spec#*=}"
  done
fi

# _po_set NAME VALUE LABEL: checks VALUE against NAME's type and sets NAME; a bad
# value exits naming LABEL (how the user wrote the option) and the accepted values.
_po_set() {
  local _po_t="${_po_type[$1]}" _po_v="$2" _po_ok=true _po_accepted _po_w
  case "${_po_t}" in
    '') _po_accepted= ;;
    bool)
      _po_accepted="true or false"
      [[ "${_po_v}" == true || "${_po_v}" == false ]] || _po_ok=false ;;
    uint|posint|int|*..*)
      case "${_po_t}" in
        uint) _po_accepted="a non-negative integer (0, 1, 2, ...)" ;;
        posint) _po_accepted="a positive integer (1, 2, ...)" ;;
        int) _po_accepted="an integer" ;;
        *) _po_accepted="an integer from ${_po_t%%..*} to ${_po_t##*..}" ;;
      esac
      if [[ "${_po_v}" =~ ^(-?)([0-9]{1,18})$ ]] && { [ "${_po_t}" = int ] || [ -z "${BASH_REMATCH[1]}" ]; }; then
        _po_v="${BASH_REMATCH[1]}$((10#${BASH_REMATCH[2]}))"
        [ "${_po_v}" != -0 ] || _po_v=0
        case "${_po_t}" in
          posint) [ "${_po_v}" -ge 1 ] || _po_ok=false ;;
          *..*) { [ "${_po_v}" -ge "${_po_t%%..*}" ] && [ "${_po_v}" -le "${_po_t##*..}" ]; } || _po_ok=false ;;
        esac
      else
        _po_ok=false
      fi ;;
    float)
      _po_accepted="a number (e.g. 0.5, -1, 2e-3)"
      [[ "${_po_v}" =~ ^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] || _po_ok=false ;;
    nonempty)
      _po_accepted="a non-empty value"
      [ -n "${_po_v}" ] || _po_ok=false ;;
    *'|'*)
      _po_accepted="one of ${_po_t}"
      _po_ok=false
      IFS='|' read -r -a _po_w <<< "${_po_t}"
      for _po_t in "${_po_w[@]}"; do [ "${_po_v}" != "${_po_t}" ] || _po_ok=true; done ;;
    *)
      echo "parse_options.sh: unknown type '${_po_t}' for option $1 in option_types of $0" >&2
      exit 2 ;;
  esac
  "${_po_ok}" || _po_die "$3 takes ${_po_accepted}, not '$2'"
  printf -v "$1" '%s' "${_po_v}"
}

# _po_option_name LABEL: the variable an option names (dashes read as underscores),
# or exit with the usage when it is not one of the caller's options.
_po_option_name() {
  local _po_n="${1#--}"
  _po_n="${_po_n//-/_}"
  if [[ ! "${_po_n}" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || [ -z "${_po_type[${_po_n}]+set}" ]; then
    _po_die_usage "unknown option $1"
  fi
  _po_name="${_po_n}"
}

# _po_unquote VALUE WHERE: the literal value of the right-hand side of a config line.
_po_re_single="^'([^']*)'([[:space:]]+#.*)?[[:space:]]*\$"
_po_re_double='^"(([\].|[^"\$`])*)"([[:space:]]+#.*)?[[:space:]]*$'
_po_re_bare='^([^[:space:]'"'"'"\$`;&|<>()]*)([[:space:]]+#.*)?[[:space:]]*$'
_po_unquote() {
  local _po_r="$1" _po_out= _po_c
  if [[ "${_po_r}" =~ ${_po_re_single} ]]; then
    _po_value="${BASH_REMATCH[1]}"
  elif [[ "${_po_r}" =~ ${_po_re_double} ]]; then
    _po_r="${BASH_REMATCH[1]}"
    while [ -n "${_po_r}" ]; do  # as the shell reads "...": \ before " \ $ ` escapes it
      _po_c="${_po_r:0:1}"
      if [ "${_po_c}" = '\' ] && [[ "${_po_r:1:1}" == [\"\\\$\`] ]]; then
        _po_c="${_po_r:1:1}"; _po_r="${_po_r:2}"
      else
        _po_r="${_po_r:1}"
      fi
      _po_out+="${_po_c}"
    done
    _po_value="${_po_out}"
  elif [[ "${_po_r}" =~ ${_po_re_bare} ]] && [[ "${_po_r}" != '~'* ]]; then
    _po_value="${BASH_REMATCH[1]}"
  else
    _po_die "$2: cannot read the value '${_po_r}': values are taken literally, never expanded" \
      "or run; quote a value with spaces or shell characters in '...'"
  fi
}

# _po_read_config FILE: applies FILE's name=value lines.
_po_read_config() {
  local _po_f="$1" _po_n=0 _po_l
  [ -f "${_po_f}" ] && [ -r "${_po_f}" ] || _po_die "--config: cannot read config file '${_po_f}'"
  while IFS= read -r _po_l || [ -n "${_po_l}" ]; do
    _po_n=$((_po_n + 1))
    _po_l="${_po_l#"${_po_l%%[![:space:]]*}"}"
    [ -n "${_po_l}" ] && [[ "${_po_l}" != '#'* ]] || continue
    [[ "${_po_l}" =~ ^([A-Za-z_][A-Za-z0-9_]*)=(.*)$ ]] \
      || _po_die "${_po_f}:${_po_n}: expected name=value, got: ${_po_l}"
    _po_name="${BASH_REMATCH[1]}"
    [ -n "${_po_type[${_po_name}]+set}" ] \
      || _po_die_usage "${_po_f}:${_po_n}: unknown option '${_po_name}'"
    _po_unquote "${BASH_REMATCH[2]}" "${_po_f}:${_po_n}"
    _po_set "${_po_name}" "${_po_value}" "${_po_f}:${_po_n}: --${_po_name}"
  done < "${_po_f}"
}

# _po_split ARG [NEXT...]: _po_label, _po_value and _po_step (arguments used) of the
# option at ARG; returns 1 when ARG is not an option.
_po_split() {
  case "$1" in
    --*=*) _po_label="${1%%=*}"; _po_value="${1#*=}"; _po_step=1 ;;
    --*)
      [ "$#" -ge 2 ] || _po_die_usage "option $1 needs a value"
      _po_label="$1"; _po_value="$2"; _po_step=2 ;;
    *) return 1 ;;
  esac
}

# First pass: --help wins wherever it stands; --config files are applied in order.
_po_i=1
while [ "${_po_i}" -le "$#" ]; do
  case "${!_po_i}" in
    --help|-h)
      if [ -n "${help_message:-}" ]; then printf '%s\n' "${help_message}"; else echo "Usage: $0 [options]"; fi
      exit 0 ;;
  esac
  _po_split "${@:${_po_i}:2}" || break
  _po_i=$((_po_i + _po_step))
done
_po_i=1
while [ "${_po_i}" -le "$#" ]; do
  _po_split "${@:${_po_i}:2}" || break
  _po_i=$((_po_i + _po_step))
  case "${_po_label}" in --config) _po_read_config "${_po_value}" ;; esac
done

# Second pass: the command-line options, in order.
while [ "$#" -gt 0 ]; do
  _po_split "${@:1:2}" || break
  shift "${_po_step}"
  [ "${_po_label}" != --config ] || continue
  _po_option_name "${_po_label}"
  _po_set "${_po_name}" "${_po_value}" "${_po_label}"
done

unset -f _po_usage _po_die _po_die_usage _po_set _po_option_name _po_unquote _po_read_config _po_split
unset _po_caller _po_type _po_lineno _po_line _po_name _po_spec _po_value _po_label _po_step _po_i \
  _po_re_default _po_re_single _po_re_double _po_re_bare
true
