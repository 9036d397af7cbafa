#!/usr/bin/env bash
# The first thing to run on a machine with a GPU: probes the environment, then runs stages 4-6
# of the main job on the GPU from a small data bundle, and prints one table (audio s/s per
# config and precision, peak GPU memory, WER per decoding mode, wall time per step).
#
# 1. On any machine where the main job's stages 0-3 ran (CPU is fine), make the bundle (<= 50 MB:
#    data dirs, units, BPE model, CMVN, audio as Opus; tools/gpu_check_bundle.py); with
#    --bundle_wheels DIR also the wheels of the requirements the GPU machine may lack (about
#    6 MB for sentencepiece, soundfile + cffi + pycparser, PyYAML, tensorboardX + protobuf +
#    packaging, tqdm, torchaudio; `pip download --no-deps` them for its python):
#      tools/gpu_check.sh --make_bundle gpu_bundle --recipe . [--bundle_wheels WHEEL_DIR]
# 2. On the GPU machine (needs python with torch; the project's .venv is used when there,
#    missing requirements are installed from --wheels, --no-deps, into WORK/pylib):
#      tools/gpu_check.sh --bundle gpu_bundle [--wheels gpu_bundle/wheels] [--work /tmp/gpu_check]
#    With this project's lent `device` tool: carry the git-ignored gpu_bundle/ (the bundle
#    made with --bundle_wheels, copied into the checkout), timeout_s 570, and the command
#      tools/gpu_check.sh --bundle gpu_bundle --python python3 --wheels gpu_bundle/wheels \
#        --work /tmp/gpu_check; cp /tmp/gpu_check/table.md /tmp/gpu_check/logs/* "$OUT"/
#    (a probe alone, to look first: python3 tools/gpu_check_probe.py, ~10 s)
#
# Steps, each under `timeout` (limits in seconds; all of them end within --budget, 450 s, a
# step's limit shrinks to what is left of it, and the table gets 20 s more, so the check ends
# within 8 minutes; a step that runs out of time is killed with its processes, 5 s after TERM
# at most, and the check goes on with what it left):
#   wheels 25 (only with --wheels)  probe 40  lists 30 (shards of train/dev/test, stage 3)
#   train_main_bf16 150 (conf/train_zipformer.yaml, --epochs 7, bf16)  average_main 15
#   decode_main 45 (every CTC/attention mode on the GPU, scored)  export_main 25
#   train_main_fp16 40 (1 epoch, fp16 + GradScaler)
#   train_small_bf16 55 (conf/train_zipformer_librispeech_small.yaml, pruned transducer + CTC,
#   1 epoch)  average_small 10  decode_small 25 (CTC and transducer modes)  table 20
# Output: WORK/table.md (also printed), WORK/logs/<step>.log and <run>.train.log, WORK/exp/<run>.
# The CPU dry run (tests/tools/test_gpu_check.py) runs the same steps:
#   tools/gpu_check.sh --bundle B --device cpu --epochs 1 --max_utts 4 --tiny true
set -euo pipefail

bundle=                 # the data bundle (from --make_bundle)
make_bundle=            # make a bundle in this dir (with --recipe) and stop
recipe=                 # --make_bundle: a recipe dir where stages 0-3 ran
codec=opus              # --make_bundle: opus | vorbis | mp3 | flac
level=0.97              # --make_bundle: libsndfile compression level (Opus 0.97: ~16 kbit/s)
bundle_wheels=          # --make_bundle: also copy these wheels into the bundle (BUNDLE/wheels)
nj=4                    # processes for encoding (--make_bundle) and shard writing
work=/tmp/gpu_check     # the check's outputs (emptied first)
python=                 # the python to run; empty: the project's .venv when there, else python3
wheels=                 # a dir of wheels: those of missing requirements are installed
device=cuda             # cuda | cpu (the dry run)
epochs=7                # epochs of the main bf16 run (the main job trains 9; 7 fit the time limits)
max_utts=0              # > 0: the first N utterances of each set only (dry run)
tiny=false              # true: the same configs shrunk to a few thousand parameters (dry run)
budget=450              # seconds for all steps but the table
help_message="Usage: $0 --bundle DIR [options]   or   $0 --make_bundle DIR --recipe RECIPE_DIR [options]
See the header of $0 for the steps and their time limits."
option_types=(codec='opus|vorbis|mp3|flac' level=float nj=posint device='cuda|cpu' epochs=posint
              max_utts=uint tiny=bool budget=posint)
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/parse_options.sh"
[ "$#" -eq 0 ] || { echo "$0: unexpected argument '$1'" >&2; exit 1; }
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "$0: $*" >&2; exit 1; }

if [ -z "${python}" ]; then
  if [ -x "${repo}/.venv/bin/python" ]; then python="${repo}/.venv/bin/python"; else python=python3; fi
fi
command -v "${python}" > /dev/null || die "--python '${python}' is not a command"
python="$(command -v "${python}")"
export PYTHONIOENCODING=UTF-8 LC_ALL=C

if [ -n "${make_bundle}" ]; then
  [ -n "${recipe}" ] || die "--make_bundle needs --recipe (a recipe dir where stages 0-3 ran)"
  PYTHONPATH="${repo}${PYTHONPATH:+:${PYTHONPATH}}" timeout 3600 "${python}" \
    "${repo}/tools/gpu_check_bundle.py" --recipe "${recipe}" --codec "${codec}" --level "${level}" \
    --nj "${nj}" ${bundle_wheels:+--bundle_wheels "${bundle_wheels}"} "${make_bundle}"
  exit 0
fi

[ -n "${bundle}" ] || die "give --bundle DIR (or --make_bundle DIR --recipe RECIPE_DIR); see --help"
[ -f "${bundle}/manifest.json" ] \
  || die "--bundle '${bundle}' holds no manifest.json: not a bundle of --make_bundle"
bundle="$(cd "${bundle}" && pwd)"
[ -z "${wheels}" ] || [ -d "${wheels}" ] || die "--wheels '${wheels}' is not a dir"
[ -z "${wheels}" ] || wheels="$(cd "${wheels}" && pwd)"
if [ -e "${work}" ] && [ -n "$(ls -A "${work}" 2> /dev/null)" ] && [ ! -f "${work}/.gpu_check" ]; then
  die "--work '${work}' exists and is not an earlier check's work dir: give a new or empty dir"
fi
rm -rf "${work}"
mkdir -p "${work}/logs" "${work}/bin" "${work}/pylib" "${work}/exp"
touch "${work}/.gpu_check"  # so a rerun may empty it
work="$(cd "${work}" && pwd)"
# what tools/launch_train.sh calls `python` (a script, not a link: a venv's python finds its
# packages from the path it is called by)
printf '#!/bin/sh\nexec "%s" "$@"\n' "${python}" > "${work}/bin/python"
chmod +x "${work}/bin/python"
export PATH="${work}/bin:${PATH}"
export PYTHONPATH="${work}/pylib:${repo}${PYTHONPATH:+:${PYTHONPATH}}"
cd "${repo}"

if [ "${device}" = cuda ]; then
  gpu=0; export CUDA_VISIBLE_DEVICES=0
else
  gpu=-1; export CUDA_VISIBLE_DEVICES=
fi
deadline=$(( $(date +%s) + budget ))
failed=0

# step NAME LIMIT FUNCTION [ARGS]: runs FUNCTION in bash under `timeout` (its process group
# is killed at the limit), output to logs/NAME.log; one line in steps.tsv.
step() {
  local name=$1 limit=$2 left rc=0 t0 t1 status; shift 2
  left=$(( deadline - $(date +%s) ))
  [ "${left}" -ge "${limit}" ] || limit=${left}
  if [ "${limit}" -lt 5 ]; then
    printf '%s\t%s\t0\tskipped: budget spent\n' "${name}" "${limit}" >> "${work}/steps.tsv"
    echo "== ${name}: skipped (the --budget is spent)"; failed=1; return 1
  fi
  echo "== ${name} (limit ${limit} s, log ${work}/logs/${name}.log)"
  t0=$(date +%s%N)
  timeout -k 5 "${limit}" bash -c '"$@"' _ "$@" > "${work}/logs/${name}.log" 2>&1 || rc=$?
  t1=$(date +%s%N)
  case "${rc}" in 0) status=ok ;; 124 | 137) status="timeout" ;; *) status="exit ${rc}" ;; esac
  printf '%s\t%s\t%.1f\t%s\n' "${name}" "${limit}" "$(( (t1 - t0) / 1000000 ))e-3" "${status}" \
    >> "${work}/steps.tsv"
  if [ "${rc}" -ne 0 ]; then
    failed=1
    echo "== ${name}: ${status}; last lines of its log:"
    tail -n 5 "${work}/logs/${name}.log"
  fi
  return "${rc}"
}

install_wheels() { python tools/gpu_check_probe.py --install_from "${wheels}" --target "${work}/pylib"; }
probe() { python tools/gpu_check_probe.py --device "${device}" --out "${work}/probe.json"; }

# stage 3 from the bundle: absolute audio paths (the first max_utts), shards; the sets at once
make_lists() {
  local x pids=() rc=0
  for x in train dev test; do
    mkdir -p "${work}/data/${x}"
    awk -v b="${bundle}" -v n="${max_utts}" 'n == 0 || NR <= n { print $1 " " b "/" $2 }' \
      "${bundle}/data/${x}/wav.scp" > "${work}/data/${x}/wav.scp"
    awk 'NR == FNR { keep[$1] = 1; next } $1 in keep' "${work}/data/${x}/wav.scp" \
      "${bundle}/data/${x}/text" > "${work}/data/${x}/text"
    python tools/make_shard_list.py --num_utts_per_shard 200 --nj "${nj}" \
      "${work}/data/${x}/wav.scp" "${work}/data/${x}/text" "${work}/data/${x}/shards" \
      "${work}/data/${x}/data.list" &
    pids+=($!)
  done
  for x in "${pids[@]}"; do wait "${x}" || rc=$?; done
  return "${rc}"
}

# The shrunk models of the dry run: the configs' own structure, widths of a few units.
tiny_main=(--override_config "encoder_conf.encoder_dim [16, 16, 16, 16, 16]"
  --override_config "encoder_conf.encoder_unmasked_dim [16, 16, 16, 16, 16]"
  --override_config "encoder_conf.feedforward_dim [32, 32, 32, 32, 32]"
  --override_config "encoder_conf.num_heads [2, 2, 2, 2, 2]"
  --override_config "encoder_conf.cnn_module_kernel [3, 3, 3, 3, 3]"
  --override_config "encoder_conf.frontend_channels [2, 4, 8]"
  --override_config "decoder_conf.linear_units 32" --override_config "decoder_conf.attention_heads 2")
tiny_small=(--override_config "encoder_conf.num_encoder_layers [1, 1, 1, 1, 1, 1]"
  --override_config "encoder_conf.encoder_dim [16, 16, 16, 16, 16, 16]"
  --override_config "encoder_conf.encoder_unmasked_dim [16, 16, 16, 16, 16, 16]"
  --override_config "encoder_conf.feedforward_dim [32, 32, 32, 32, 32, 32]"
  --override_config "encoder_conf.num_heads [2, 2, 2, 2, 2, 2]"
  --override_config "encoder_conf.cnn_module_kernel [3, 3, 3, 3, 3, 3]"
  --override_config "encoder_conf.frontend_channels [2, 4, 8]"
  --override_config "predictor_conf.embed_size 16" --override_config "joint_conf.join_dim 16")

# train RUN CONFIG PRECISION EPOCHS NUM_WORKERS [train.py options]: stage 4 as run.sh runs it
train() {
  local run=$1 config=$2 amp=$3 n=$4 workers=$5; shift 5
  tools/launch_train.sh --num_cpu_workers 1 -- --config "${config}" --data_type shard \
    --dict "${bundle}/lang/units.txt" --bpe_model "${bundle}/lang/bpe.model" --prefetch 100 \
    --train_data "${work}/data/train/data.list" --cv_data "${work}/data/dev/data.list" \
    --model_dir "${work}/exp/${run}" --tensorboard_dir "${work}/exp/${run}/tensorboard" \
    --num_workers "${workers}" --use_amp "${amp}" --cmvn "${bundle}/global_cmvn" --ddp_timeout 60 \
    --seed 777 --override_config "max_epoch ${n}" "$@"
}

# average RUN: the 2 best epochs (fewer when fewer were kept), as run.sh stage 5 on the main job
average() {
  local dir="${work}/exp/$1" kept
  kept=$(find "${dir}" -maxdepth 1 -regextype posix-extended -regex '.*/[0-9]+\.pt' | wc -l)
  [ "${kept}" -gt 0 ] || { echo "no epoch checkpoint in ${dir}: training finished no epoch" >&2; return 1; }
  python wenet/bin/average_model.py --dst_model "${dir}/avg.pt" --src_path "${dir}" \
    --num "$(( kept < 2 ? kept : 2 ))" --val_best
}

# decode RUN "MODES": stage 5's recognition and scoring of the test set
decode() {
  local dir="${work}/exp/$1" mode
  [ -f "${dir}/avg.pt" ] || { echo "no ${dir}/avg.pt to decode" >&2; return 1; }
  python wenet/bin/recognize.py --gpu "${gpu}" --modes "$2" --config "${dir}/train.yaml" \
    --data_type shard --test_data "${work}/data/test/data.list" --checkpoint "${dir}/avg.pt" \
    --batch_size 16 --penalty 0.0 --dict "${bundle}/lang/units.txt" \
    --bpe_model "${bundle}/lang/bpe.model" --beam_size 10 --ctc_weight 0.5 --reverse_weight 0.0 \
    --decoding_chunk_size -1 --num_decoding_left_chunks -1 --result_dir "${dir}/test"
  for mode in $2; do
    python tools/compute-wer.py --char=0 --v=1 "${work}/data/test/text" "${dir}/test/${mode}/text" \
      > "${dir}/test/${mode}/wer"
    grep '^Overall' "${dir}/test/${mode}/wer" | sed "s/^/${mode}: /"
  done
}

# export RUN: stage 6
export_jit() {
  local dir="${work}/exp/$1"
  python wenet/bin/export_jit.py --config "${dir}/train.yaml" --checkpoint "${dir}/avg.pt" \
    --output_file "${dir}/final.zip" --output_quant_file "${dir}/final_quant.zip"
}

export -f install_wheels probe make_lists train average decode export_jit
export work bundle wheels device gpu nj max_utts
main_extra=() small_extra=() small_workers=4
if "${tiny}"; then main_extra=("${tiny_main[@]}"); small_extra=("${tiny_small[@]}"); small_workers=1; fi
main_modes="ctc_greedy_search ctc_prefix_beam_search attention attention_rescoring"
small_modes="ctc_greedy_search ctc_prefix_beam_search rnnt_greedy_search rnnt_beam_search"
{ printf 'main_bf16\tconf/train_zipformer.yaml\tbf16\n'
  printf 'main_fp16\tconf/train_zipformer.yaml\tfp16\n'
  printf 'small_bf16\tconf/train_zipformer_librispeech_small.yaml\tbf16\n'; } > "${work}/runs.tsv"

if [ -n "${wheels}" ]; then step wheels 25 install_wheels || true; fi
if step probe 40 probe && step lists 30 make_lists; then
  step train_main_bf16 150 train main_bf16 conf/train_zipformer.yaml bf16 "${epochs}" 1 \
    ${main_extra[@]+"${main_extra[@]}"} || true
  if step average_main 15 average main_bf16; then
    step decode_main 45 decode main_bf16 "${main_modes}" || true
    step export_main 25 export_jit main_bf16 || true
  fi
  step train_main_fp16 40 train main_fp16 conf/train_zipformer.yaml fp16 1 1 \
    ${main_extra[@]+"${main_extra[@]}"} || true
  step train_small_bf16 55 train small_bf16 conf/train_zipformer_librispeech_small.yaml bf16 1 \
    "${small_workers}" ${small_extra[@]+"${small_extra[@]}"} || true
  if step average_small 10 average small_bf16; then
    step decode_small 25 decode small_bf16 "${small_modes}" || true
  fi
fi
deadline=$(( deadline + 20 ))
step table 20 bash -c 'python tools/gpu_check_table.py --work "${work}" > "${work}/table.md"' || true
for run in main_bf16 main_fp16 small_bf16; do
  log="${work}/exp/${run}/train.0.log"
  [ ! -f "${log}" ] || cp "${log}" "${work}/logs/${run}.train.log"
done
[ ! -f "${work}/table.md" ] || cat "${work}/table.md"
exit "${failed}"
