#!/usr/bin/env bash
# Switchboard-1 (LDC97S62) training data dir from the MS98 transcriptions, as
# in the Kaldi/WeNet swbd recipes: one utterance per MS98 turn and channel,
# cut from the conversation side by segments; wav.scp is keyed by side
# (sw02001-A = channel 1, -B = channel 2) with a pipe that decodes the SPHERE
# file: "sph2pipe -f wav -p -c N FILE |" when sph2pipe is on PATH, otherwise
# "python <repo>/tools/sph2wav.py -c N FILE |" (libsndfile: uncompressed SPHERE
# only; shorten-compressed files need sph2pipe). See local/swbd_prep.py wav-scp.
# Each conversation side is one speaker. Needs the dictionary's acronyms.map.
set -euo pipefail
export LC_ALL=C

help_message="Usage: $0 <swbd1-dir> <data-dir>
Writes <data-dir>/train (intermediate files in <data-dir>/local/train); needs
<data-dir>/local/train/swb_ms98_transcriptions and <data-dir>/local/dict_nosp/acronyms.map."
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck disable=SC1091
. "${root}/tools/parse_options.sh"
me=$(basename "$0")
fail() { echo "${me}: error: $*" >&2; exit 1; }
[ "$#" -eq 2 ] || { printf '%s\n' "${help_message}" >&2; exit 1; }
[ -d "$1" ] || fail "no such directory $1"
swbd=$(cd "$1" && pwd)
data=$2
dir=${data}/local/train
ms98=${dir}/swb_ms98_transcriptions
acronyms=${data}/local/dict_nosp/acronyms.map
[ -f "${ms98}/sw-ms98-dict.text" ] || fail "${ms98}/sw-ms98-dict.text not found (run local/swbd1_data_download.sh)"
[ -f "${acronyms}" ] || fail "${acronyms} not found (run local/swbd1_prepare_dict.sh)"
prep=(python "${root}/local/swbd_prep.py")

find -L "${swbd}" -iname '*.sph' | sort > "${dir}/sph.flist"
n=$(wc -l < "${dir}/sph.flist")
[ "${n}" -gt 0 ] || fail "no .sph files under ${swbd}"
if [ "${n}" -ne 2435 ] && [ "${n}" -ne 2438 ]; then
  echo "${me}: warning: expected 2435 or 2438 .sph files (the full LDC97S62), found ${n}" >&2
fi

shopt -s nullglob
trans=("${ms98}"/*/*/*-trans.text)
[ "${#trans[@]}" -gt 0 ] || fail "no */*/*-trans.text files under ${ms98}"
"${prep[@]}" ms98-trans "${trans[@]}" | sort -k1,1 > "${dir}/transcripts2.txt"
"${prep[@]}" map-words 2 < "${dir}/transcripts2.txt" \
  | "${prep[@]}" map-acronyms "${acronyms}" > "${dir}/text"

# sw02001-A_000098-001156 -> sw02001-A 0.98 11.56
awk '{ split($1, p, /[_-]/); printf "%s %s-%s %s %s\n", $1, p[1], p[2], p[3] / 100, p[4] / 100 }' \
  "${dir}/text" > "${dir}/segments"
awk '{ split($1, p, /_/); print $1, p[1] }' "${dir}/text" > "${dir}/utt2spk"

"${prep[@]}" wav-scp "${dir}/sph.flist" > "${dir}/wav.scp"
awk '{ r = $1; f = r; sub(/-[AB]$/, "", f); print r, f, substr(r, length(r)) }' "${dir}/wav.scp" \
  > "${dir}/reco2file_and_channel"

rm -rf "${data}/train"
mkdir -p "${data}/train"
for f in wav.scp text utt2spk segments reco2file_and_channel; do
  cp "${dir}/${f}" "${data}/train/${f}"
done
"${root}/tools/fix_data_dir.sh" "${data}/train"
echo "${me}: Switchboard-1 data preparation succeeded: ${data}/train"
