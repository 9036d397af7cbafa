#!/usr/bin/env bash
# The Switchboard lexicon from the MS98 dictionary (sw-ms98-dict.text), as in
# the Kaldi/WeNet swbd recipes: comments dropped, noise/silence entries and
# spelled-out letters added, MS98 spellings cleaned (local/swbd_prep.py
# map-words), acronyms rewritten in the Fisher form (ibm -> i._b._m.) with
# their map in acronyms.map (used on the transcripts), all lower case.
# Kaldi's local/dict.patch (hand fixes to a few entries) is not applied.
set -euo pipefail
export LC_ALL=C

help_message="Usage: $0 <local-train-dir> <dict-dir>
Reads <local-train-dir>/swb_ms98_transcriptions/sw-ms98-dict.text, writes <dict-dir>/lexicon.txt etc."
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck disable=SC1091
. "${root}/tools/parse_options.sh"
[ "$#" -eq 2 ] || { printf '%s\n' "${help_message}" >&2; exit 1; }
src=$1/swb_ms98_transcriptions/sw-ms98-dict.text
dir=$2
[ -f "${src}" ] || { echo "$(basename "$0"): error: no such file ${src}" >&2; exit 1; }
mkdir -p "${dir}"
prep=("python" "${root}/local/swbd_prep.py")

grep -v '^#' "${src}" | awk 'NF > 0 { $1 = $1; print }' | sort > "${dir}/lexicon1.txt"
awk '{ for (n = 2; n <= NF; n++) p[$n] = 1 } END { for (x in p) if (x != "sil") print x }' \
  "${dir}/lexicon1.txt" | sort > "${dir}/nonsilence_phones.txt"
printf '%s\n' sil spn nsn lau > "${dir}/silence_phones.txt"
echo sil > "${dir}/optional_silence.txt"
: > "${dir}/extra_questions.txt"
{ printf '%s\n' '!sil sil' '[vocalized-noise] spn' '[noise] nsn' '[laughter] lau' '<unk> spn'
  cat "${dir}/lexicon1.txt"
  "${prep[@]}" letters
} > "${dir}/lexicon2.txt"
"${prep[@]}" map-words 1 < "${dir}/lexicon2.txt" | sort -u > "${dir}/lexicon3.txt"
"${prep[@]}" acronyms "${dir}/lexicon3.txt" "${dir}/lexicon4.txt" "${dir}/acronyms_raw.map"
sort -u "${dir}/acronyms_raw.map" > "${dir}/acronyms.map"
{ echo 'i ay'; cat "${dir}/lexicon4.txt"; } | tr '[:upper:]' '[:lower:]' | sort -u > "${dir}/lexicon5.txt"
ln -sfn lexicon5.txt "${dir}/lexicon.txt"
echo "$(basename "$0"): ${dir}/lexicon.txt: $(wc -l < "${dir}/lexicon5.txt") entries," \
  "$(wc -l < "${dir}/acronyms.map") acronyms"
