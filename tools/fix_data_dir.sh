#!/usr/bin/env bash
# Repairs a Kaldi data directory in place, as Kaldi's utils/fix_data_dir.sh does:
#   - sorts every file by key in the C locale, keeping the first line of a
#     duplicated key;
#   - keeps only utterances present in utt2spk, text (when the directory has
#     one) and wav.scp -- or, when there are segments, in segments with their
#     recording in wav.scp; wav.scp then keeps the recordings still used;
#   - drops utterances whose transcript is empty;
#   - regenerates spk2utt from utt2spk and filters the per-utterance,
#     per-recording and per-speaker extras (utt2dur, reco2dur, spk2gender, ...).
# Prints how many utterances were dropped for each reason. The original files
# are kept in <data-dir>/.backup/.
set -euo pipefail
export LC_ALL=C

help_message="Usage: $0 <data-dir>
Sorts and filters a Kaldi data directory so that all its files agree.
Originals are copied to <data-dir>/.backup/ first."
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/parse_options.sh"
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/data_dir_lib.sh"

expect_args 1 "$@"
data=$1
[ -d "${data}" ] || fail "no such directory ${data}"
for f in utt2spk wav.scp; do
  [ -f "${data}/${f}" ] || fail "${data}/${f} does not exist"
done

tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT

mkdir -p "${data}/.backup"
for f in "${utt_files[@]}" "${reco_files[@]}" "${spk_files[@]}" spk2utt; do
  [ -f "${data}/${f}" ] && cp "${data}/${f}" "${data}/.backup/${f}"
done

# Sort by key keeping the first line of each key (in file order); report duplicates.
for f in "${utt_files[@]}" "${reco_files[@]}" "${spk_files[@]}"; do
  [ -f "${data}/${f}" ] || continue
  awk -v f="${data}/${f}" -v me="${me}" '
    NF == 0 { blank++; next }
    { sub(/\r$/, "") }
    ($1 in seen) { dup++; next }
    { seen[$1] = 1; print }
    END {
      if (blank) printf "%s: %s: skipped %d blank lines\n", me, f, blank > "/dev/stderr"
      if (dup) printf "%s: %s: dropped %d lines whose key was already seen (kept the first)\n", me, f, dup > "/dev/stderr"
    }' "${data}/${f}" | sort -s -k1,1 > "${tmp}/${f}"
done

has_text=false; [ -f "${tmp}/text" ] && has_text=true
has_seg=false; [ -f "${tmp}/segments" ] && has_seg=true
has_feats=false; [ -f "${tmp}/feats.scp" ] && has_feats=true
for f in text segments feats.scp; do [ -f "${tmp}/${f}" ] || : > "${tmp}/${f}"; done

# Decide which utterances stay. Each dropped utterance is counted under the
# first reason that applies, in the order below.
awk -v has_text="${has_text}" -v has_seg="${has_seg}" -v has_feats="${has_feats}" \
    -v kept="${tmp}/kept" -v u2s="${tmp}/utt2spk" -v txt="${tmp}/text" \
    -v seg="${tmp}/segments" -v wav="${tmp}/wav.scp" -v feats="${tmp}/feats.scp" '
  FILENAME == u2s { all[$1] = 1; u2s_ok[$1] = (NF == 2); next }
  FILENAME == txt { all[$1] = 1; text_ok[$1] = (NF >= 2); next }
  FILENAME == wav { rec[$1] = 1; if (has_seg == "false") all[$1] = 1; next }
  FILENAME == seg {
    all[$1] = 1
    seg_ok[$1] = (NF == 4 && $3 ~ /^[0-9.eE+-]+$/ && $4 ~ /^[0-9.eE+-]+$/ && ($4 + 0 == -1 || $4 + 0 > $3 + 0))
    seg_rec[$1] = $2
    next
  }
  FILENAME == feats { all[$1] = 1; in_feats[$1] = 1; next }
  END {
    n = 0; dropped = 0
    for (u in all) {
      n++
      why = ""
      if (!(u in u2s_ok)) why = "not in utt2spk"
      else if (!u2s_ok[u]) why = "utt2spk line without exactly one speaker"
      else if (has_text == "true" && !(u in text_ok)) why = "not in text"
      else if (has_text == "true" && !text_ok[u]) why = "empty transcript"
      else if (has_seg == "true" && !(u in seg_ok)) why = "not in segments"
      else if (has_seg == "true" && !seg_ok[u]) why = "malformed segments line"
      else if (has_seg == "true" && !(seg_rec[u] in rec)) why = "recording not in wav.scp"
      else if (has_seg == "false" && !(u in rec)) why = "not in wav.scp"
      else if (has_feats == "true" && !(u in in_feats)) why = "not in feats.scp"
      if (why == "") print u > kept
      else { count[why]++; dropped++ }
    }
    close(kept)
    msg = sprintf("kept %d of %d utterances", n - dropped, n)
    if (dropped) {
      msg = msg sprintf("; dropped %d:", dropped)
      sep = " "
      nr = split("not in utt2spk|utt2spk line without exactly one speaker|not in text|" \
                 "empty transcript|not in segments|malformed segments line|" \
                 "recording not in wav.scp|not in wav.scp|not in feats.scp", reasons, "|")
      for (i = 1; i <= nr; i++) if (reasons[i] in count) {
        msg = msg sprintf("%s%d %s", sep, count[reasons[i]], reasons[i]); sep = ", "
      }
    }
    print msg
  }' "${tmp}/utt2spk" "${tmp}/text" "${tmp}/wav.scp" "${tmp}/segments" "${tmp}/feats.scp" \
  > "${tmp}/summary"
touch "${tmp}/kept"
echo "${me}: ${data}: $(cat "${tmp}/summary")"
[ -s "${tmp}/kept" ] || fail "no utterances left in ${data} (originals in ${data}/.backup)"

for f in "${utt_files[@]}"; do
  if [ -f "${data}/${f}" ]; then keep "${tmp}/kept" "${tmp}/${f}" "${data}/${f}"; fi
done
subset_reco_spk_files "${tmp}" "${data}" "${tmp}/kept" "${tmp}"
if "${has_seg}"; then
  before=$(wc -l < "${tmp}/wav.scp")
  after=$(wc -l < "${data}/wav.scp")
  if [ "${before}" -gt "${after}" ]; then
    echo "${me}: ${data}: dropped $((before - after)) of ${before} recordings no kept segment uses"
  fi
fi
