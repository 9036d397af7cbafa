#!/usr/bin/env bash
# The stage-0 body both synthetic corpora share (local/synth_data_prep.sh and
# local/synth_broad_data_prep.sh parse their options and call it): synthesise the
# corpus with the generator module into <corpus-dir> (local/synth/corpus.py: a rerun
# on a finished corpus writes no audio), then make Kaldi data dirs
# <data-dir>/{train,dev,test} from its lists: normalised text, fixed and validated.
#
# Each name=value after the two folders is handed to the generator as --name value
# (dropped when the value is empty: the generator's default).
set -euo pipefail

if [ "$#" -lt 3 ]; then
  echo "Usage: $0 <generator-module> <corpus-dir> <data-dir> [name=value ...]
  e.g. $0 local.synth.generate corpus/synth data seed=777 nj=2 train_utts=" >&2
  exit 1
fi
generator=$1
corpus_dir=$2
data=$3
shift 3
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${root}${PYTHONPATH:+:${PYTHONPATH}}"

opts=()
for pair in "$@"; do
  [[ "${pair}" == *=* ]] || { echo "$0: expected name=value, got '${pair}'" >&2; exit 1; }
  [ -z "${pair#*=}" ] || opts+=("--${pair%%=*}" "${pair#*=}")
done
for engine in espeak-ng flite; do
  command -v "${engine}" > /dev/null 2>&1 \
    || { echo "$0: ${engine} is not installed (tools/install.sh installs it)" >&2; exit 1; }
done

python -m "${generator}" --data_root "${corpus_dir}" ${opts[@]+"${opts[@]}"}

for x in train dev test; do
  # whole dirs afresh: files another corpus's stage 0 left here (spk2gender, segments...)
  # would fail validation or, worse, change what the lists mean
  rm -rf "${data:?}/${x}"
  mkdir -p "${data}/${x}"
  for f in wav.scp utt2spk spk2utt; do
    cp "${corpus_dir}/lists/${x}/${f}" "${data}/${x}/${f}"
  done
  python "${root}/tools/normalize_text.py" < "${corpus_dir}/lists/${x}/text" > "${data}/${x}/text"
  "${root}/tools/fix_data_dir.sh" "${data}/${x}"
  "${root}/tools/validate_data_dir.sh" --no-feats "${data}/${x}"
done

echo "$0: corpus ${corpus_dir} (${generator} ${opts[*]+"${opts[*]}"}) -> ${data}/{train,dev,test}"
python -m local.synth.summary "${data}/train" "${data}/dev" "${data}/test"
