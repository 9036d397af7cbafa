#!/usr/bin/env bash
# Real-time factor of the exported model: TorchScript (wenet/bin/transcribe.py on
# final.zip) against ONNX fp32 and int8 (python -m wenet.runtime on DIR/onnx), at batch 1
# and 16, one thread each (OMP/MKL and onnxruntime). RTF = wall seconds of the whole
# command (start-up and model loading included) / seconds of audio; each command's WER
# beside it. Run from the recipe root on a quiet machine, after stage 6 and
# bench/onnx_parity.py (which writes DIR/onnx):
#   bash bench/onnx_rtf.sh exp/synth_train_zipformer data/test [attention_rescoring]
set -euo pipefail
dir=$1
data=$2
mode=${3:-attention_rescoring}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONPATH="${repo}${PYTHONPATH:+:${PYTHONPATH}}" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
out="${dir}/onnx_rtf"
mkdir -p "${out}"
audio_s=$(python - "${data}/wav.scp" <<'EOF'
import sys
import soundfile as sf
total = 0.0
for line in open(sys.argv[1], encoding="utf-8"):
    info = sf.info(line.split(maxsplit=1)[1].strip())
    total += info.frames / info.samplerate
print(f"{total:.3f}")
EOF
)
echo "# ${dir}, ${mode}, ${audio_s} s of audio ($(lscpu | sed -n 's/^Model name: *//p'), 1 thread)"
echo "| batch | TorchScript RTF (WER) | ONNX fp32 RTF (WER) | ONNX int8 RTF (WER) |"
echo "|---|---:|---:|---:|"
for batch in 1 16; do
  row="| ${batch}"
  for kind in torchscript fp32 int8; do
    hyp="${out}/${kind}_b${batch}.txt"
    start=$(date +%s.%N)
    if [ "${kind}" = torchscript ]; then
      python "${repo}/wenet/bin/transcribe.py" --model_dir "${dir}" --mode "${mode}" \
        --batch_size "${batch}" --output "${hyp}" "${data}/wav.scp" 2>/dev/null
    else
      flags=()
      [ "${kind}" = int8 ] && flags=(--int8)
      python -m wenet.runtime --onnx_dir "${dir}/onnx" --mode "${mode}" \
        --batch_size "${batch}" --output "${hyp}" "${flags[@]}" "${data}/wav.scp" 2>/dev/null
    fi
    end=$(date +%s.%N)
    wer=$(python "${repo}/tools/compute-wer.py" --char=0 --v=0 "${data}/text" "${hyp}" |
          sed -n 's/^Overall -> \([0-9.]*\) %.*/\1/p')
    row="${row} | $(python -c "print(f'{(${end} - ${start}) / ${audio_s}:.4f}')") (${wer} %)"
  done
  echo "${row} |"
done
