#!/usr/bin/env bash
# Units dictionary for a BPE model (run.sh stage 2), WeNet's layout:
#   <blank> 0, <unk> 1, the sorted unique pieces of the encoded training text from 2, <sos/eos> last.
# Usage: tools/make_units.sh <bpemodel.model> <training text, one sentence a line> <units.txt>
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "Usage: $0 <bpemodel.model> <text> <units.txt>" >&2
  exit 1
fi
model=$1
text=$2
dict=$3
tools_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LC_ALL=C   # byte order for sort, so the ids do not depend on the user's locale
tmp="${dict}.tmp.$$"
trap 'rm -f "${tmp}"' EXIT
{ echo "<blank> 0"; echo "<unk> 1"
  "${tools_dir}/spm_encode" --model="${model}" --output_format=piece < "${text}" \
    | tr ' ' '\n' | sed -e '/^$/d' -e '/^<unk>$/d' | sort -u | awk '{print $0 " " NR+1}'
} > "${tmp}"
echo "<sos/eos> $(wc -l < "${tmp}")" >> "${tmp}"
mv "${tmp}" "${dict}"
trap - EXIT
