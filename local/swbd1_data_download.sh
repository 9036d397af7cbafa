#!/usr/bin/env bash
# Makes the MS98 (Mississippi State) Switchboard transcriptions and lexicon
# available as <local-dir>/swb_ms98_transcriptions: linked from
# <swbd1-dir>/transcriptions/swb_ms98_transcriptions when the corpus copy has
# them, otherwise downloaded from OpenSLR resource 5 -- only with --download true.
set -euo pipefail
export LC_ALL=C

download=false
url=https://www.openslr.org/resources/5/switchboard_word_alignments.tar.gz
help_message="Usage: $0 [--download false] <swbd1-dir> <local-dir>
Links or (with --download true) downloads swb_ms98_transcriptions into <local-dir>."
option_types=(download=bool url=nonempty)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck disable=SC1091
. "${root}/tools/parse_options.sh"
me=$(basename "$0")
fail() { echo "${me}: error: $*" >&2; exit 1; }
[ "$#" -eq 2 ] || { printf '%s\n' "${help_message}" >&2; exit 1; }
swbd=$1
dir=$2

[ -d "${swbd}" ] || fail "Switchboard directory '${swbd}' does not exist (--swbd1_dir)"
mkdir -p "${dir}"
if [ -d "${dir}/swb_ms98_transcriptions" ]; then
  echo "${me}: ${dir}/swb_ms98_transcriptions is already there"
elif [ -d "${swbd}/transcriptions/swb_ms98_transcriptions" ]; then
  ln -sfn "$(cd "${swbd}/transcriptions/swb_ms98_transcriptions" && pwd)" "${dir}/swb_ms98_transcriptions"
  echo "${me}: using ${swbd}/transcriptions/swb_ms98_transcriptions"
elif "${download}"; then
  # Unpacked into a temporary dir and moved into place once tar has finished, so an
  # interrupted run leaves no partial swb_ms98_transcriptions: the next one unpacks again.
  tgz="${dir}/ms98.tar.gz"
  if [ ! -f "${tgz}" ]; then
    echo "${me}: downloading ${url}"
    if command -v wget > /dev/null; then
      wget -O "${tgz}.part" "${url}"
    else
      curl -fL --retry 3 -o "${tgz}.part" "${url}"
    fi
    mv "${tgz}.part" "${tgz}"
  fi
  tmp="${dir}/.ms98.extracting"
  rm -rf "${tmp}"
  mkdir -p "${tmp}"
  if tar -xzf "${tgz}" -C "${tmp}"; then rc=0; else rc=$?; fi
  if [ "${rc}" -ne 0 ]; then
    [ "${rc}" -gt 128 ] || rm -f "${tgz}"  # killed: kept for the next run; broken: fetched again
    fail "unpacking ${tgz} failed (exit ${rc}); rerun to unpack it again"
  fi
  [ -d "${tmp}/swb_ms98_transcriptions" ] || { rm -f "${tgz}"; fail "${url} did not hold swb_ms98_transcriptions"; }
  mv -T "${tmp}/swb_ms98_transcriptions" "${dir}/swb_ms98_transcriptions"
  rm -rf "${tmp}" "${tgz}"
else
  fail "no MS98 transcriptions: put them at ${swbd}/transcriptions/swb_ms98_transcriptions or ${dir}/swb_ms98_transcriptions, or rerun with --download true (${url})"
fi
