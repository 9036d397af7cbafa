#!/usr/bin/env bash
# Stage 0 of a corpus of one's own (./run.sh --corpus custom --data_root DIR): Kaldi data
# dirs <data>/<set> for the train, dev and test sets found in DIR, whatever their form
# (tools/custom_corpus_prep.py; docs/own_data.md), each then validated. What was skipped
# is counted and listed in <data>/<set>/stage0_report.txt.
set -euo pipefail

train_set=train
dev_set=dev
test_sets=test
text_norm=upper
dev_share=0.1
seed=777
train_config=
help_message="Usage: $0 [options] <corpus-dir> <data-dir>
  --train_set NAME --dev_set NAME --test_sets \"A B\"   the sets (dev: held out of train,
                     whole speakers, when <corpus-dir> has none)
  --text_norm upper|lower|none   transcript normalisation (default ${text_norm})
  --dev_share F      share of training utterances held out as dev (default ${dev_share})
  --seed N           seed of the held-out speakers (default ${seed})
  --train_config F   training yaml: utterances at another rate than its resample_rate are counted"
option_types=(train_set=nonempty dev_set=nonempty test_sets=nonempty text_norm='upper|lower|none'
              dev_share=float seed=uint)

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck disable=SC1091
. "${root}/tools/parse_options.sh"
[ "$#" -eq 2 ] || { printf '%s\n' "${help_message}" >&2; exit 1; }
corpus=$1
out=$2

python "${root}/tools/custom_corpus_prep.py" --train_set "${train_set}" --dev_set "${dev_set}" \
  --test_sets "${test_sets}" --text_norm "${text_norm}" --dev_share "${dev_share}" \
  --seed "${seed}" ${train_config:+--train_config "${train_config}"} "${corpus}" "${out}"
read -r -a sets <<< "${train_set} ${dev_set} ${test_sets}"
declare -A seen=()
for set in "${sets[@]}"; do
  [ -z "${seen[${set}]:-}" ] || continue
  seen[${set}]=1
  "${root}/tools/validate_data_dir.sh" "${out}/${set}"
done
