#!/usr/bin/env bash
# Checks a Kaldi data directory, as Kaldi's utils/validate_data_dir.sh does:
#   - every file is sorted by key in the C locale and has unique keys;
#   - utt2spk and spk2utt describe the same mapping;
#   - text, utt2spk and segments (or wav.scp when there are no segments) hold
#     the same utterances; every segment's recording is in wav.scp;
#   - text is UTF-8 and no transcript is empty; line formats are right.
# Stops at the first problem with a non-zero exit and a message naming the
# file and line at fault. Run tools/fix_data_dir.sh to repair most problems.
set -euo pipefail
export LC_ALL=C

no_text=false
no_wav=false
help_message="Usage: $0 [--no-text] [--no-wav] <data-dir>
Validates a Kaldi data directory (wav.scp, text, utt2spk, spk2utt, optional
segments, spk2gender, utt2dur, ...).
  --no-text   the directory need not have a text file
  --no-wav    the directory need not have a wav.scp file"

# Kaldi's --no-* switches take no value, so they are read before the usual parser.
args=()
for a in "$@"; do
  case "${a}" in
    --no-text|--no_text) no_text=true ;;
    --no-wav|--no_wav) no_wav=true ;;
    --no-feats|--no_feats) ;;  # accepted for Kaldi compatibility: we never need feats.scp
    *) args+=("${a}") ;;
  esac
done
set -- ${args[@]+"${args[@]}"}
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/parse_options.sh"
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/data_dir_lib.sh"

expect_args 1 "$@"
data=$1
[ -d "${data}" ] || fail "no such directory ${data}"
required=(utt2spk spk2utt)
"${no_text}" || required+=(text)
"${no_wav}" || required+=(wav.scp)
for f in "${required[@]}"; do
  [ -f "${data}/${f}" ] || fail "${data}/${f} does not exist"
done

# Sortedness, unique keys, no blank lines or carriage returns.
check_sorted() {
  local f=$1
  awk -v f="${f}" '
    /\r/ { printf "%s:%d: carriage return in line (DOS line ending?)\n", f, FNR; exit 1 }
    NF == 0 { printf "%s:%d: empty line\n", f, FNR; exit 1 }
    {
      key = $1 ""
      if (FNR > 1 && key == prev) { printf "%s:%d: duplicate key %s\n", f, FNR, key; exit 1 }
      if (FNR > 1 && key < prev) {
        printf "%s:%d: key %s comes after %s: not sorted in the C locale\n", f, FNR, key, prev
        exit 1
      }
      prev = key
    }' "${f}"
}

# Field counts and values per file type.
check_format() {
  local f=$1 kind=$2
  awk -v f="${f}" -v kind="${kind}" '
    function bad(msg) { printf "%s:%d: %s: %s\n", f, FNR, msg, $0; exit 1 }
    function isnum(s) { return s ~ /^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ }
    kind == "utt2spk" && NF != 2 { bad("expected \"utterance speaker\"") }
    kind == "spk2utt" && NF < 2 { bad("speaker without utterances") }
    kind == "wav.scp" && NF < 2 { bad("no audio for recording") }
    kind == "text" && NF < 2 { bad("empty transcript") }
    kind == "spk2gender" && (NF != 2 || ($2 != "m" && $2 != "f")) { bad("expected \"speaker m|f\"") }
    kind == "utt2dur" && (NF != 2 || !isnum($2)) { bad("expected \"utterance seconds\"") }
    kind == "segments" {
      if (NF != 4 || !isnum($3) || !isnum($4)) bad("expected \"segment recording start end\"")
      if ($4 + 0 != -1 && $4 + 0 <= $3 + 0) bad("end is not after start")
    }' "${f}"
}

# Lines of $2 whose keys are not keys of $1, and keys of $1 missing from $2.
check_same_keys() {
  local ref=$1 f=$2
  awk -v ref="${ref}" -v f="${f}" '
    FILENAME == ref { line[$1] = FNR; next }
    !($1 in line) { printf "%s:%d: %s is not in %s\n", f, FNR, $1, ref; err = 1; exit 1 }
    { seen[$1] = 1 }
    END {
      if (err) exit 1
      first = ""
      for (k in line) if (!(k in seen) && (first == "" || line[k] < line[first])) first = k
      if (first != "") { printf "%s:%d: %s is missing from %s\n", ref, line[first], first, f; exit 1 }
    }' "${ref}" "${f}"
}

files=()
for f in utt2spk spk2utt text wav.scp segments spk2gender utt2dur utt2num_frames \
         reco2dur reco2file_and_channel feats.scp cmvn.scp utt2uniq utt2lang; do
  [ -f "${data}/${f}" ] && files+=("${f}")
done
for f in "${files[@]}"; do
  msg=$(check_sorted "${data}/${f}") || fail "${msg}"
  msg=$(check_format "${data}/${f}" "${f}") || fail "${msg}"
done

if [ -f "${data}/text" ]; then
  if bad=$(LC_ALL=C.UTF-8 grep -naxv -m 1 '.*' "${data}/text"); then
    fail "${data}/text:${bad%%:*}: not valid UTF-8"
  fi
fi

# utt2spk <-> spk2utt.
msg=$(awk -v s2u="${data}/spk2utt" -v u2s="${data}/utt2spk" '
  FILENAME == s2u {
    for (i = 2; i <= NF; i++) {
      if ($i in spk) { printf "%s:%d: utterance %s is listed twice\n", s2u, FNR, $i; err = 1; exit 1 }
      spk[$i] = $1 ""; where[$i] = FNR
    }
    next
  }
  !($1 in spk) { printf "%s:%d: utterance %s is not in %s\n", u2s, FNR, $1, s2u; err = 1; exit 1 }
  spk[$1] != $2 "" {
    printf "%s:%d: utterance %s has speaker %s but %s:%d lists it under %s\n", u2s, FNR, $1, $2, s2u, where[$1], spk[$1]
    err = 1; exit 1
  }
  { seen[$1] = 1 }
  END {
    if (err) exit 1
    first = ""
    for (u in spk) if (!(u in seen) && (first == "" || where[u] < where[first])) first = u
    if (first != "") { printf "%s:%d: utterance %s is not in %s\n", s2u, where[first], first, u2s; exit 1 }
  }' "${data}/spk2utt" "${data}/utt2spk") || fail "utt2spk and spk2utt disagree: ${msg}"

# The same utterances everywhere.
if [ -f "${data}/text" ]; then
  msg=$(check_same_keys "${data}/utt2spk" "${data}/text") || fail "${msg}"
fi
for f in utt2dur utt2num_frames feats.scp; do
  if [ -f "${data}/${f}" ]; then
    msg=$(check_same_keys "${data}/utt2spk" "${data}/${f}") || fail "${msg}"
  fi
done
if [ -f "${data}/segments" ]; then
  msg=$(check_same_keys "${data}/utt2spk" "${data}/segments") || fail "${msg}"
  if [ -f "${data}/wav.scp" ]; then
    msg=$(awk -v w="${data}/wav.scp" -v s="${data}/segments" '
      FILENAME == w { rec[$1] = 1; next }
      !($2 in rec) { printf "%s:%d: recording %s of segment %s is not in %s\n", s, FNR, $2, $1, w; exit 1 }
    ' "${data}/wav.scp" "${data}/segments") || fail "${msg}"
  fi
elif [ -f "${data}/wav.scp" ]; then
  msg=$(check_same_keys "${data}/utt2spk" "${data}/wav.scp") || fail "${msg}"
fi
if [ -f "${data}/spk2gender" ]; then
  msg=$(check_same_keys "${data}/spk2utt" "${data}/spk2gender") || fail "${msg}"
fi

echo "${me}: ${data} is valid ($(wc -l < "${data}/utt2spk") utterances, $(wc -l < "${data}/spk2utt") speakers)"
