#!/usr/bin/env bash
# Hub5 2000 English (LDC2002S09 speech, LDC2002T43 transcripts) data dir, as
# in the Kaldi/WeNet swbd recipes: segments from english/hub5e_00.pem (padded
# by 0.1 s without overlapping neighbours), text from
# reference/hub5e00.english.000405.stm without IGNORE_TIME_SEGMENT_ turns,
# wav.scp keyed by conversation side as in local/swbd1_data_prep.sh. The stm
# (with its known '((' and aside-marker faults fixed) and glm are kept in
# <data-dir>/local/eval2000 for sclite scoring.
set -euo pipefail
export LC_ALL=C

help_message="Usage: $0 <speech-dir> <transcription-dir> <data-dir>
e.g. $0 /corpora/LDC2002S09/hub5e_00 /corpora/LDC2002T43 data"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck disable=SC1091
. "${root}/tools/parse_options.sh"
me=$(basename "$0")
fail() { echo "${me}: error: $*" >&2; exit 1; }
[ "$#" -eq 3 ] || { printf '%s\n' "${help_message}" >&2; exit 1; }
sdir=$1
tdir=$2
data=$3
[ -d "${sdir}/english" ] || fail "expecting directory ${sdir}/english"
sdir=$(cd "${sdir}" && pwd)
[ -d "${tdir}/2000_hub5_eng_eval_tr" ] && tdir=${tdir}/2000_hub5_eng_eval_tr
[ -d "${tdir}/reference" ] || fail "expecting directory ${tdir}/reference"
pem=${sdir}/english/hub5e_00.pem
stm=${tdir}/reference/hub5e00.english.000405.stm
for f in "${pem}" "${stm}"; do [ -f "${f}" ] || fail "no such file ${f}"; done

dir=${data}/local/eval2000
mkdir -p "${dir}"
find -L "${sdir}/english" -iname '*.sph' | sort > "${dir}/sph.flist"
[ -s "${dir}/sph.flist" ] || fail "no .sph files under ${sdir}/english"
python "${root}/local/swbd_prep.py" eval2000 "${pem}" "${stm}" "${dir}"
sed -e 's:((:(:' -e 's:<B_ASIDE>::g' -e 's:<E_ASIDE>::g' "${stm}" > "${dir}/stm"
glm=${tdir}/reference/en20000405_hub5.glm
[ -f "${glm}" ] && cp "${glm}" "${dir}/glm"

python "${root}/local/swbd_prep.py" wav-scp "${dir}/sph.flist" > "${dir}/wav.scp"
awk '{ print $1, $2 }' "${dir}/segments" > "${dir}/utt2spk"
awk '{ r = $1; f = r; sub(/-[AB]$/, "", f); print r, f, substr(r, length(r)) }' "${dir}/wav.scp" \
  > "${dir}/reco2file_and_channel"

dest=${data}/eval2000
rm -rf "${dest}"
mkdir -p "${dest}"
for f in wav.scp text utt2spk segments reco2file_and_channel; do
  cp "${dir}/${f}" "${dest}/${f}"
done
"${root}/tools/fix_data_dir.sh" "${dest}"
if [ "$(wc -l < "${dest}/wav.scp")" -ne 80 ]; then
  echo "${me}: warning: expected 80 conversation sides (the full eval2000), got $(wc -l < "${dest}/wav.scp")" >&2
fi
echo "${me}: Hub5 2000 data preparation succeeded: ${dest}"
