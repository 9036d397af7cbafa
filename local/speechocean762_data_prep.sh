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
  --download true   fetch the release from OpenSLR and unpack it as <corpus-dir>
                    first, if <corpus-dir> does not hold it (--url, default ${url})
  --num_dev_spk N   speakers taken out of train for dev when the corpus has no dev/"
option_types=(download=bool num_dev_spk=posint url=nonempty)
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

# fetch DEST: downloads the release to DEST.tar.gz and unpacks it as DEST. tar writes
# into DEST.extracting, renamed to DEST only once it has finished, so an interrupted
# run never leaves a partial corpus at DEST: the next one unpacks again, from the
# archive when its download had completed.
fetch() {
  local dest=${1%/} tgz tmp rc
  tgz="${dest}.tar.gz"
  tmp="${dest}.extracting"
  if [ -e "${dest}" ] && { [ ! -d "${dest}" ] || [ -n "$(ls -A "${dest}")" ]; }; then
    fail "${dest} exists but holds no train/wav.scp: remove it, or point at the release"
  fi
  mkdir -p "$(dirname "${dest}")"
  if [ ! -f "${tgz}" ]; then
    echo "${me}: downloading ${url} to ${tgz}"
    if command -v curl > /dev/null; then
      curl -fL --retry 3 -o "${tgz}.part" "${url}"
    elif command -v wget > /dev/null; then
      wget -O "${tgz}.part" "${url}"
    else
      fail "neither curl nor wget is installed; download ${url} by hand to ${tgz}"
    fi
    mv "${tgz}.part" "${tgz}"
  fi
  echo "${me}: unpacking ${tgz}"
  rm -rf "${tmp}"
  mkdir -p "${tmp}"
  # The archive has one top folder, speechocean762/; its content becomes dest.
  if tar -xzf "${tgz}" -C "${tmp}" --strip-components=1; then rc=0; else rc=$?; fi
  if [ "${rc}" -ne 0 ]; then
    # tar killed by a signal: the archive is kept for the next run; a broken one is not.
    [ "${rc}" -gt 128 ] || rm -f "${tgz}"
    fail "unpacking ${tgz} failed (exit ${rc}); rerun to unpack it again"
  fi
  [ -f "${tmp}/train/wav.scp" ] || { rm -f "${tgz}"; fail "${url} holds no speechocean762/train/wav.scp"; }
  [ ! -d "${dest}" ] || rmdir "${dest}"
  mv -T "${tmp}" "${dest}"
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
