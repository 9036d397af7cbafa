#!/usr/bin/env bash
# Caps how many utterances may share one transcript, as Kaldi's
# utils/data/remove_dup_utts.sh does: of the utterances whose (whitespace-
# normalised) transcripts are identical, the first MAX in sorted key order are
# kept and the rest dropped. Switchboard uses it to thin out the thousands of
# "UH-HUH" and "YEAH" turns. The output directory is then fixed with
# tools/fix_data_dir.sh.
set -euo pipefail
export LC_ALL=C

help_message="Usage: $0 <max-count> <src-dir> <dest-dir>
Keeps at most <max-count> utterances per distinct transcript."
tools=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck disable=SC1091
. "${tools}/parse_options.sh"

me=$(basename "$0")
fail() { echo "${me}: error: $*" >&2; exit 1; }
if [ "$#" -ne 3 ]; then
  printf '%s\n' "${help_message}" >&2; exit 1
fi
max=$1
src=$2
dest=$3
[[ "${max}" =~ ^[1-9][0-9]*$ ]] || fail "max-count must be a positive integer, not '${max}'"
[ -f "${src}/text" ] || fail "${src}/text does not exist"

tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT

sort -s -k1,1 "${src}/text" | awk -v max="${max}" '
  NF == 0 { next }
  { t = ""; for (i = 2; i <= NF; i++) t = t " " $i
    if (++count[t] <= max) print $1; else removed++ }
  END { print removed + 0 > "/dev/stderr" }' > "${tmp}/keep" 2> "${tmp}/removed"

"${tools}/subset_data_dir.sh" --utt-list "${tmp}/keep" "${src}" "${dest}" > /dev/null
"${tools}/fix_data_dir.sh" "${dest}"
echo "${me}: removed $(cat "${tmp}/removed") of $(awk 'NF > 0' "${src}/text" | wc -l) utterances of ${src}" \
  "whose transcript was already used ${max} times; ${dest} has $(wc -l < "${dest}/utt2spk")"
