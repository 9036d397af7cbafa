#!/usr/bin/env bash
# Stage 0 of the broad synthetic corpus (--corpus synth_broad): sentences from the
# Debian packages wordnet-base and fortunes spoken by every English espeak-ng and
# flite voice, through simulated rooms, noise and channels (local/synth_broad), then
# Kaldi data dirs <data>/{train,dev,test}: normalised text, fixed and validated.
# Dev/test voices and sentences are held out from training. A rerun on a finished
# corpus only redoes the cheap list steps.
set -euo pipefail

nj=2
seed=777
hours=            # training audio in hours; empty: the generator's default
dev_utts=
test_utts=
simulation=default
help_message="Usage: $0 [options] <corpus-dir> <data-dir>
  e.g. $0 --nj 2 --hours 10 corpus/synth_broad data
Options:
  --nj N              parallel synthesis jobs (default ${nj})
  --seed N            corpus seed: same seed, same texts, voices, simulation and audio (default ${seed})
  --hours H           training audio in hours (default: python -m local.synth_broad.generate --help)
  --dev_utts N        utterances in dev
  --test_utts N       utterances in test
  --simulation SPEC   default | none | 'default,babble=0' ... (kinds: rir noise babble band
                      telephone gain; local/synth_broad/simulate.py) (default ${simulation})"
option_types=(nj=posint seed=uint hours=float dev_utts=posint test_utts=posint simulation=nonempty)

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

opts=()
for x in hours dev_utts test_utts; do
  [ -z "${!x}" ] || opts+=("--${x}" "${!x}")
done
python -m local.synth_broad.generate --data_root "${corpus_dir}" --seed "${seed}" --nj "${nj}" \
  --simulation "${simulation}" ${opts[@]+"${opts[@]}"}

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

echo "$0: corpus ${corpus_dir} (seed ${seed}, simulation ${simulation}) -> ${data}/{train,dev,test}"
python -m local.synth.summary "${data}/train" "${data}/dev" "${data}/test"
