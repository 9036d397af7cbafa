#!/usr/bin/env bash
# Stage 0 of the built-in corpus: synthesise English speech with espeak-ng and
# flite (local/synth), then make Kaldi data dirs <data>/{train,dev,test} from it:
# normalised text, fixed and validated. A rerun on a finished corpus only
# redoes the cheap list steps. Dev/test voices and sentences are held out from
# training (see local/synth/voices.py and local/synth/generate.py).
set -euo pipefail

nj=2
seed=777
train_utts=       # sizes; empty: the generator's defaults (about 4.2 h / 10 min / 10 min)
dev_utts=
test_utts=
help_message="Usage: $0 [options] <corpus-dir> <data-dir>
  e.g. $0 --nj 2 --seed 777 corpus/synth data
Options:
  --nj N            parallel synthesis jobs (default ${nj})
  --seed N          corpus seed: same seed, same texts, voices and audio (default ${seed})
  --train_utts N    utterances in train (default: python -m local.synth.generate --help)
  --dev_utts N      utterances in dev
  --test_utts N     utterances in test"
option_types=(nj=posint seed=uint train_utts=posint dev_utts=posint test_utts=posint)

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${root}${PYTHONPATH:+:${PYTHONPATH}}"
# shellcheck disable=SC1091
. "${root}/tools/parse_options.sh"

if [ "$#" -ne 2 ]; then
  printf '%s\n' "${help_message}" >&2; exit 1
fi
corpus_dir=$1
data=$2
for engine in espeak-ng flite; do
  command -v "${engine}" > /dev/null 2>&1 \
    || { echo "$0: ${engine} is not installed (tools/install.sh installs it)" >&2; exit 1; }
done

sizes=()
for x in train dev test; do
  n_var="${x}_utts"
  [ -z "${!n_var}" ] || sizes+=("--${n_var}" "${!n_var}")
done
python -m local.synth.generate --data_root "${corpus_dir}" --seed "${seed}" --nj "${nj}" \
  ${sizes[@]+"${sizes[@]}"}

for x in train dev test; do
  mkdir -p "${data}/${x}"
  rm -rf "${data:?}/${x}/.backup"
  for f in wav.scp utt2spk spk2utt; do
    cp "${corpus_dir}/lists/${x}/${f}" "${data}/${x}/${f}"
  done
  python "${root}/tools/normalize_text.py" < "${corpus_dir}/lists/${x}/text" > "${data}/${x}/text"
  "${root}/tools/fix_data_dir.sh" "${data}/${x}"
  "${root}/tools/validate_data_dir.sh" --no-feats "${data}/${x}"
done

echo "$0: corpus ${corpus_dir} (seed ${seed}) -> ${data}/{train,dev,test}"
python -m local.synth.summary "${data}/train" "${data}/dev" "${data}/test"
