#!/usr/bin/env bash
# Copies part of a Kaldi data directory, as Kaldi's utils/subset_data_dir.sh does.
# The utterances are chosen by exactly one of
#   --first N       the first N utterances (utt2spk order, i.e. sorted by key)
#   --last N        the last N utterances
#   --utt-list F    the utterances named in the first column of F
#   --spk-list F    every utterance of the speakers named in the first column of F
# Every file is subset consistently: utterance files (text, utt2spk, segments,
# utt2dur, ...) by utterance; wav.scp and other recording files by the
# recordings the kept segments use (or by utterance when there are no
# segments); spk2gender and cmvn.scp by the speakers left; spk2utt is
# regenerated from the new utt2spk.
set -euo pipefail
export LC_ALL=C

first=0
last=0
utt_list=
spk_list=
help_message="Usage: $0 [--first N | --last N | --utt-list FILE | --spk-list FILE] <src-dir> <dest-dir>
Writes to <dest-dir> the chosen utterances of the Kaldi data directory <src-dir>."
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/parse_options.sh"
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/data_dir_lib.sh"

expect_args 2 "$@"
src=$1
dest=$2

chosen=0
for v in "${first}" "${last}"; do
  [[ "${v}" =~ ^[0-9]+$ ]] || fail "--first/--last take a non-negative integer, not '${v}'"
  [ "${v}" -gt 0 ] && chosen=$((chosen + 1))
done
[ -n "${utt_list}" ] && chosen=$((chosen + 1))
[ -n "${spk_list}" ] && chosen=$((chosen + 1))
[ "${chosen}" -eq 1 ] || fail "give exactly one of --first N, --last N, --utt-list FILE, --spk-list FILE"

[ -f "${src}/utt2spk" ] || fail "${src}/utt2spk does not exist"
[ "$(realpath -m "${src}")" != "$(realpath -m "${dest}")" ] || fail "source and destination are the same: ${src}"
for f in "${utt_list}" "${spk_list}"; do
  [ -z "${f}" ] || [ -f "${f}" ] || fail "list file ${f} does not exist"
done

tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT

total=$(wc -l < "${src}/utt2spk")
if [ "${first}" -gt 0 ]; then
  [ "${first}" -le "${total}" ] || fail "--first ${first}: ${src} has only ${total} utterances"
  head -n "${first}" "${src}/utt2spk" | awk '{ print $1 }' > "${tmp}/utts"
elif [ "${last}" -gt 0 ]; then
  [ "${last}" -le "${total}" ] || fail "--last ${last}: ${src} has only ${total} utterances"
  tail -n "${last}" "${src}/utt2spk" | awk '{ print $1 }' > "${tmp}/utts"
elif [ -n "${utt_list}" ]; then
  keep "${utt_list}" "${src}/utt2spk" "${tmp}/u2s"
  awk '{ print $1 }' "${tmp}/u2s" > "${tmp}/utts"
  listed=$(awk 'NF > 0' "${utt_list}" | wc -l)
  found=$(wc -l < "${tmp}/utts")
  [ "${found}" -eq "${listed}" ] \
    || echo "${me}: warning: $((listed - found)) of the ${listed} utterances in ${utt_list} are not in ${src}" >&2
else
  awk 'FILENAME == ARGV[1] { k[$1] = 1; next } ($2 in k) { print $1 }' \
    "${spk_list}" "${src}/utt2spk" > "${tmp}/utts"
fi

mkdir -p "${dest}"
for f in "${utt_files[@]}" "${reco_files[@]}" "${spk_files[@]}" spk2utt; do
  rm -f "${dest:?}/${f}"
done
for f in "${utt_files[@]}"; do
  if [ -f "${src}/${f}" ]; then keep "${tmp}/utts" "${src}/${f}" "${dest}/${f}"; fi
done
subset_reco_spk_files "${src}" "${dest}" "${tmp}/utts" "${tmp}"
echo "${me}: ${dest}: $(wc -l < "${dest}/utt2spk") of ${total} utterances of ${src}, $(wc -l < "${dest}/spk2utt") speakers"
