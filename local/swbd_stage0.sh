#!/usr/bin/env bash
# Stage 0 of the Switchboard recipe (WeNet examples/swbd/s0 stage 0):
#   1. MS98 transcriptions and lexicon (local/swbd1_data_download.sh)
#   2. lexicon and acronym map (local/swbd1_prepare_dict.sh)
#   3. <data>/train from LDC97S62 (local/swbd1_data_prep.sh)
#   4. <data>/eval2000 from LDC2002S09 + LDC2002T43 (local/eval2000_data_prep.sh)
#   5. train text upper-cased, acronym dots removed (i._b._m. -> I B M), THEM_1 -> THEM;
#      train_dev = the first --num_dev_utts utterances, train_nodev the rest,
#      train_nodup = train_nodev with at most --max_dup utterances per transcript
#   6. eval2000 text upper-cased without (%HESITATION)-style tags, <B_ASIDE>-style
#      markers and parentheses; empty utterances dropped.
set -euo pipefail
export LC_ALL=C

download=false
num_dev_utts=4000
max_dup=300
help_message="Usage: $0 [options] <swbd1-dir> \"<eval2000-speech-dir> <eval2000-transcript-dir>\" <data-dir>
  --download true      fetch the MS98 transcriptions from OpenSLR if the corpus lacks them
  --num_dev_utts N     size of train_dev, taken from the start of train (default 4000)
  --max_dup N          most utterances kept per distinct transcript in train_nodup (300)"
option_types=(download=bool num_dev_utts=posint max_dup=posint)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck disable=SC1091
. "${root}/tools/parse_options.sh"
me=$(basename "$0")
fail() { echo "${me}: error: $*" >&2; exit 1; }
[ "$#" -eq 3 ] || { printf '%s\n' "${help_message}" >&2; exit 1; }
swbd=$1
read -r -a eval_dirs <<< "$2"
data=$3
[ -n "${swbd}" ] || fail "no Switchboard directory given (run.sh --swbd1_dir DIR)"
[ "${#eval_dirs[@]}" -eq 2 ] \
  || fail "eval2000 needs two directories, speech and transcripts (run.sh --eval2000_dir \"LDC2002S09/hub5e_00 LDC2002T43\")"

mkdir -p "${data}/local/train"
"${root}/local/swbd1_data_download.sh" --download "${download}" "${swbd}" "${data}/local/train"
"${root}/local/swbd1_prepare_dict.sh" "${data}/local/train" "${data}/local/dict_nosp"
"${root}/local/swbd1_data_prep.sh" "${swbd}" "${data}"
"${root}/local/eval2000_data_prep.sh" "${eval_dirs[0]}" "${eval_dirs[1]}" "${data}"

# Train text: upper case; the acronym form i._b._m. becomes I B M.
cp "${data}/train/text" "${data}/train/text.org"
awk '{ k = $1; $1 = ""; print k toupper($0) }' "${data}/train/text.org" \
  | sed -e 's/\._/ /g' -e 's/\.//g' -e 's/THEM_1/THEM/g' > "${data}/train/text"
"${root}/tools/fix_data_dir.sh" "${data}/train"

total=$(wc -l < "${data}/train/text")
[ "${total}" -gt "${num_dev_utts}" ] \
  || fail "train has ${total} utterances, not more than --num_dev_utts ${num_dev_utts}"
"${root}/tools/subset_data_dir.sh" --first "${num_dev_utts}" "${data}/train" "${data}/train_dev"
"${root}/tools/subset_data_dir.sh" --last "$((total - num_dev_utts))" "${data}/train" "${data}/train_nodev"
"${root}/tools/data/remove_dup_utts.sh" "${max_dup}" "${data}/train_nodev" "${data}/train_nodup"

# eval2000: upper case, no (%HESITATION)-style tags, <B_ASIDE>-style markers or
# parentheses. Each tag is removed on its own (WeNet's greedy pattern also
# deleted the words between two tags on a line).
cp "${data}/eval2000/text" "${data}/eval2000/text.org"
awk '{ k = $1; $1 = ""; print k toupper($0) }' "${data}/eval2000/text.org" \
  | sed -e 's/(%[^)]*)//g' -e 's/<[^>]*>//g' -e 's/[()]//g' \
  | awk '{ $1 = $1; print }' > "${data}/eval2000/text"
"${root}/tools/fix_data_dir.sh" "${data}/eval2000"

for x in train_nodup train_dev eval2000; do
  "${root}/tools/validate_data_dir.sh" "${data}/${x}"
done
