#!/usr/bin/env bash
# Stage 0 of the built-in corpus: synthesise English speech with espeak-ng and
# flite (local/synth), then make Kaldi data dirs <data>/{train,dev,test} from it:
# normalised text, fixed and validated (local/synth_corpus_prep.sh, shared with
# the broad corpus). A rerun on a finished corpus only redoes the cheap list
# steps. Dev/test voices and sentences are held out from training (see
# local/synth/voices.py and local/synth/generate.py).
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
# shellcheck disable=SC1091
. "${root}/tools/parse_options.sh"

[ "$#" -eq 2 ] || { printf '%s\n' "${help_message}" >&2; exit 1; }
exec "${root}/local/synth_corpus_prep.sh" local.synth.generate "$1" "$2" nj="${nj}" \
  seed="${seed}" train_utts="${train_utts}" dev_utts="${dev_utts}" test_utts="${test_utts}"
