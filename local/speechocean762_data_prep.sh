#!/usr/bin/env bash
# Stage 0 for speechocean762 (OpenSLR 101): Kaldi data dirs from the release.
#
# The release (or the FLAC copy under ../shared/corpora) holds
# <corpus>/{train,test[,dev]}/{wav.scp,text,utt2spk,spk2utt,spk2gender} with
# wav.scp paths relative to <corpus>. For each list present this writes
# <out>/<set>/ with absolute audio paths and normalised transcripts
# (tools/normalize_text.py), then fixes and validates it. When the corpus has
# no dev/ list, a dev set of whole speakers (--num_dev_spk, spread evenly over
# the sorted speaker ids, so the same every run) is taken out of train.
set -euo pipefail
export LC_ALL=C

download=false
num_dev_spk=10
url=https://www.openslr.org/resources/101/speechocean762.tar.gz
help_message="Usage: $0 [--download false] [--num_dev_spk 10] <corpus-dir> <out-data-dir>
Writes <out-data-dir>/{train,dev[,test]} from the speechocean762 release in <corpus-dir>.
  --download true   fetch and unpack the release from OpenSLR into <corpus-dir>
                    first, if <corpus-dir> does not hold it (${url})
  --num_dev_spk N   speakers taken out of train for dev when the corpus has no dev/"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck disable=SC1091
. "${root}/tools/parse_options.sh"

me=$(basename "$0")
fail() { echo "${me}: error: $*" >&2; exit 1; }
if [ "$#" -ne 2 ]; then
  printf '%s\n' "${help_message}" >&2; exit 1
fi
corpus=$1
out=$2
[ -n "${corpus}" ] || fail "no corpus directory given"

fetch() {
  local dest=$1 tgz
  mkdir -p "${dest}"
  tgz="${dest}/speechocean762.tar.gz"
  echo "${me}: downloading ${url} to ${tgz}"
  if command -v curl > /dev/null; then
    curl -fL --retry 3 -o "${tgz}.part" "${url}"
  elif command -v wget > /dev/null; then
    wget -O "${tgz}.part" "${url}"
  else
    fail "neither curl nor wget is installed; download ${url} by hand and unpack it into ${dest}"
  fi
  mv "${tgz}.part" "${tgz}"
  # The archive has one top folder, speechocean762/; unpack its content into dest.
  tar -xzf "${tgz}" -C "${dest}" --strip-components=1
  rm -f "${tgz}"
}

if [ ! -f "${corpus}/train/wav.scp" ]; then
  if "${download}"; then
    fetch "${corpus}"
    [ -f "${corpus}/train/wav.scp" ] || fail "the download did not produce ${corpus}/train/wav.scp"
  else
    fail "${corpus}/train/wav.scp not found: is ${corpus} the speechocean762 release? (--download true fetches it)"
  fi
fi

# prepare_set SRC DEST: one release list -> one Kaldi data dir.
prepare_set() {
  local src=$1 dest=$2 f
  for f in wav.scp text utt2spk; do
    [ -f "${src}/${f}" ] || fail "${src}/${f} not found"
  done
  rm -rf "${dest}"
  mkdir -p "${dest}"
  python "${root}/local/speechocean762_prep.py" wav-scp "${corpus}" "${src}/wav.scp" > "${dest}/wav.scp"
  python "${root}/tools/normalize_text.py" "${src}/text" > "${dest}/text"
  awk '{ $1 = $1; print }' "${src}/utt2spk" > "${dest}/utt2spk"
  if [ -f "${src}/spk2gender" ]; then
    awk '{ print $1, tolower($2) }' "${src}/spk2gender" > "${dest}/spk2gender"
  fi
  "${root}/tools/fix_data_dir.sh" "${dest}"
}

mkdir -p "${out}"
if [ -f "${corpus}/dev/wav.scp" ]; then
  prepare_set "${corpus}/train" "${out}/train"
  prepare_set "${corpus}/dev" "${out}/dev"
else
  [[ "${num_dev_spk}" =~ ^[1-9][0-9]*$ ]] || fail "--num_dev_spk must be a positive integer"
  all="${out}/.speechocean762_train_all"
  prepare_set "${corpus}/train" "${all}"
  python "${root}/local/speechocean762_prep.py" dev-speakers "${all}/spk2utt" "${num_dev_spk}" \
    > "${all}/dev_speakers"
  awk 'FILENAME == ARGV[1] { d[$1] = 1; next } !($1 in d) { print $1 }' \
    "${all}/dev_speakers" "${all}/spk2utt" > "${all}/train_speakers"
  rm -rf "${out}/train" "${out}/dev"
  "${root}/tools/subset_data_dir.sh" --spk-list "${all}/train_speakers" "${all}" "${out}/train"
  "${root}/tools/subset_data_dir.sh" --spk-list "${all}/dev_speakers" "${all}" "${out}/dev"
  echo "${me}: dev speakers taken out of train: $(tr '\n' ' ' < "${all}/dev_speakers")"
  rm -rf "${all}"
fi
sets=(train dev)
if [ -f "${corpus}/test/wav.scp" ]; then
  prepare_set "${corpus}/test" "${out}/test"
  sets+=(test)
elif [ -d "${out}/test" ]; then
  echo "${me}: ${corpus} has no test/ list: removing the stale ${out}/test"
  rm -rf "${out:?}/test"
fi

dirs=()
for set in "${sets[@]}"; do
  "${root}/tools/validate_data_dir.sh" "${out}/${set}"
  dirs+=("${out}/${set}")
done
python "${root}/local/speechocean762_prep.py" summary "${dirs[@]}"
