#!/usr/bin/env bash
# What tools/{fix,subset,validate}_data_dir.sh share about Kaldi data directories.
# Sourced by them after tools/parse_options.sh (which must be sourced from the
# script itself: it reads the script's own text to learn its options). Defines
#   me, fail                  the script's name; an error message naming it, exit 1
#   expect_args N ARGS...     usage ($help_message) and exit 1 unless N arguments are left
#   utt_files, reco_files, spk_files
#                             the files keyed by utterance, by recording, by speaker
#   keep KEYS IN OUT          the lines of IN whose first field is listed in KEYS
#   write_spk2utt UTT2SPK OUT spk2utt of UTT2SPK, speakers sorted, utterances in order
#   subset_reco_spk_files SRC DEST UTTS WORK
#                             recording and speaker files of SRC that DEST's utterances use
set -euo pipefail

me=$(basename "$0")

fail() { echo "${me}: error: $*" >&2; exit 1; }

expect_args() {
  local n=$1
  shift
  if [ "$#" -ne "${n}" ]; then
    printf '%s\n' "${help_message}" >&2
    exit 1
  fi
}

# shellcheck disable=SC2034  # read by the scripts that source this file
utt_files=(utt2spk text segments feats.scp utt2dur utt2num_frames utt2uniq utt2lang)
# shellcheck disable=SC2034
reco_files=(wav.scp reco2dur reco2file_and_channel)
# shellcheck disable=SC2034
spk_files=(spk2gender cmvn.scp)

keep() {
  awk 'FILENAME == ARGV[1] { k[$1] = 1; next } ($1 in k)' "$1" "$2" > "$3"
}

write_spk2utt() {
  awk '{ if (!($2 in list)) order[++n] = $2; list[$2] = list[$2] " " $1 }
       END { for (i = 1; i <= n; i++) print order[i] list[order[i]] }' "$1" \
    | sort -s -k1,1 > "$2"
}

# subset_reco_spk_files SRC DEST UTTS WORK: DEST already holds the utterance files of
# the utterances listed in UTTS. Writes DEST's recording files (those of the recordings
# DEST/segments uses, or of the utterances UTTS when there are no segments), spk2utt
# from DEST/utt2spk, and the speaker files of the speakers left. WORK: a scratch folder.
subset_reco_spk_files() {
  local src=$1 dest=$2 utts=$3 work=$4 f
  if [ -f "${dest}/segments" ]; then
    awk '{ print $2 }' "${dest}/segments" | sort -u > "${work}/recs"
  else
    cp "${utts}" "${work}/recs"
  fi
  for f in "${reco_files[@]}"; do
    if [ -f "${src}/${f}" ]; then keep "${work}/recs" "${src}/${f}" "${dest}/${f}"; fi
  done
  write_spk2utt "${dest}/utt2spk" "${dest}/spk2utt"
  for f in "${spk_files[@]}"; do
    if [ -f "${src}/${f}" ]; then keep "${dest}/spk2utt" "${src}/${f}" "${dest}/${f}"; fi
  done
}
