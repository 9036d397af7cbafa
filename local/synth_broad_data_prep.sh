#!/usr/bin/env bash
# Stage 0 of the broad synthetic corpus (--corpus synth_broad): sentences from the
# Debian packages wordnet-base and fortunes spoken by every English espeak-ng and
# flite voice, through simulated rooms, noise and channels (local/synth_broad), then
# Kaldi data dirs <data>/{train,dev,test}: normalised text, fixed and validated
# (local/synth_corpus_prep.sh, shared with the built-in corpus). Dev/test voices
# and sentences are held out from training. A rerun on a finished corpus only
# redoes the cheap list steps.
set -euo pipefail

nj=2
seed=777
hours=            # training audio in hours; empty: the generator's default
dev_utts=
test_utts=
simulation=default
styles=none
help_message="Usage: $0 [options] <corpus-dir> <data-dir>
  e.g. $0 --nj 2 --hours 10 corpus/synth_broad data
Options:
  --nj N              parallel synthesis jobs (default ${nj})
  --seed N            corpus seed: same seed, same texts, voices, simulation and audio (default ${seed})
  --hours H           training audio in hours (default: python -m local.synth_broad.generate --help)
  --dev_utts N        utterances in dev
  --test_utts N       utterances in test
  --simulation SPEC   default | none | 'default,babble=0' ... (kinds: rir noise babble band
                      telephone gain; local/synth_broad/simulate.py) (default ${simulation})
  --styles SPEC       none | 'child=0.3,accent=0.5,reading=0.3,natural=0.2' (speaker styles;
                      local/synth_broad/style.py) (default ${styles})"
option_types=(nj=posint seed=uint hours=float dev_utts=posint test_utts=posint simulation=nonempty
  styles=nonempty)

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck disable=SC1091
. "${root}/tools/parse_options.sh"

[ "$#" -eq 2 ] || { printf '%s\n' "${help_message}" >&2; exit 1; }
exec "${root}/local/synth_corpus_prep.sh" local.synth_broad.generate "$1" "$2" nj="${nj}" \
  seed="${seed}" hours="${hours}" dev_utts="${dev_utts}" test_utts="${test_utts}" \
  simulation="${simulation}" styles="${styles}"
