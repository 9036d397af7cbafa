#!/usr/bin/env bash
# Stage-4 launcher: starts this node's training processes of a DDP job and waits for them.
#
#   tools/launch_train.sh [--num_nodes N] [--node_rank R] [--num_cpu_workers K]
#                         [--init_method URL] -- <wenet/bin/train.py arguments>
#
# One process per GPU in CUDA_VISIBLE_DEVICES (nccl), or per GPU that nvidia-smi lists when
# the variable is unset; with no GPU, K CPU processes (gloo; OMP_NUM_THREADS split between
# them unless set). Ranks: node_rank * procs_per_node + i; world size num_nodes * procs_per_node
# (every node must have the same number of processes). Rendezvous through a file:// init file
# (default MODEL_DIR/ddp_init on a disk all nodes share), which node 0 (only node 0) deletes
# before starting, so start node 0 first. Logs: MODEL_DIR/train.<rank>.log; this node's first
# process is also shown on the console. If any process fails, the others are killed and the
# launcher exits non-zero.
set -euo pipefail

num_nodes=1
node_rank=0
num_cpu_workers=1
init_method=
help_message="Usage: $0 [--num_nodes N] [--node_rank R] [--num_cpu_workers K] [--init_method URL] -- <train.py args>"
option_types=(num_nodes=posint node_rank=uint num_cpu_workers=posint)

opts=()
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
if [ "$#" -eq 0 ]; then echo "$0: missing '--' before the train.py arguments" >&2; echo "${help_message}" >&2; exit 1; fi
shift
train_args=("$@")
set -- ${opts[@]+"${opts[@]}"}
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/parse_options.sh"
if [ "$#" -ne 0 ]; then echo "$0: unexpected argument '$1' before '--'" >&2; exit 1; fi
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

model_dir=
for ((i = 0; i < ${#train_args[@]}; i++)); do
  if [ "${train_args[$i]}" = "--model_dir" ] && [ $((i + 1)) -lt ${#train_args[@]} ]; then
    model_dir="${train_args[$((i + 1))]}"
  fi
done
[ -n "${model_dir}" ] || { echo "$0: the train.py arguments must include --model_dir" >&2; exit 1; }
if [ "${node_rank}" -ge "${num_nodes}" ]; then
  echo "$0: --node_rank takes 0..$((num_nodes - 1)) with --num_nodes ${num_nodes}, not '${node_rank}'" >&2; exit 1
fi
mkdir -p "${model_dir}"

# GPUs as CUDA numbers them: CUDA_VISIBLE_DEVICES when set (an invalid or negative entry
# hides it and every later one, as in CUDA; "" or -1: no GPU), else what nvidia-smi lists.
# Each process gets one index (train.py --gpu N narrows CUDA_VISIBLE_DEVICES to it), so
# GPU UUIDs are refused.
gpus=()
if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
  IFS=',' read -r -a listed <<< "${CUDA_VISIBLE_DEVICES}"
  for g in ${listed[@]+"${listed[@]}"}; do
    g="${g// /}"
    case "${g}" in
      GPU-* | MIG-*)
        echo "$0: CUDA_VISIBLE_DEVICES='${CUDA_VISIBLE_DEVICES}' names a GPU by UUID ('${g}');" \
          "the launcher gives each process a GPU index (train.py --gpu N): list indices as" \
          "'nvidia-smi -L' numbers them, e.g. CUDA_VISIBLE_DEVICES=0,1" >&2
        exit 1 ;;
    esac
    [[ "${g}" =~ ^[0-9]+$ ]] || break  # -1 and anything CUDA cannot parse end the list
    gpus+=("$((10#${g}))")
  done
elif command -v nvidia-smi > /dev/null 2>&1; then
  smi_rc=0
  smi_out=$(timeout 60 nvidia-smi -L 2> /dev/null) || smi_rc=$?
  if [ "${smi_rc}" -eq 124 ]; then
    echo "$0: 'nvidia-smi -L' did not answer within 60 s; set CUDA_VISIBLE_DEVICES (e.g. 0,1," \
      "or '' for CPU training) so the launcher need not ask it" >&2
    exit 1
  elif [ "${smi_rc}" -ne 0 ]; then
    echo "$0: 'nvidia-smi -L' failed (exit ${smi_rc}): no GPU used" >&2
  fi
  n=$(printf '%s\n' "${smi_out}" | grep -c '^GPU [0-9]' || true)
  for ((g = 0; g < ${n:-0}; g++)); do gpus+=("${g}"); done
fi
if [ "${#gpus[@]}" -gt 0 ]; then
  procs=${#gpus[@]}; backend=nccl
else
  procs=${num_cpu_workers}; backend=gloo
  if [ -z "${OMP_NUM_THREADS:-}" ]; then
    threads=$(( $(nproc) / procs )); [ "${threads}" -ge 1 ] || threads=1
    export OMP_NUM_THREADS=${threads}
  fi
fi
world_size=$((num_nodes * procs))

[ -n "${init_method}" ] || init_method="file://$(realpath -m "${model_dir}")/ddp_init"
if [ "${node_rank}" -eq 0 ] && [[ "${init_method}" == file://* ]]; then
  rm -f "${init_method#file://}"
fi
echo "$0: node ${node_rank}/${num_nodes}: ${procs} ${backend} process(es), world size ${world_size}, init ${init_method}"

pids=()
on_signal() {
  echo "$0: interrupted: stopping training processes" >&2
  for p in ${pids[@]+"${pids[@]}"}; do kill -TERM "${p}" 2> /dev/null || true; done
  exit 130
}
trap on_signal INT TERM

for ((i = 0; i < procs; i++)); do
  rank=$((node_rank * procs + i))
  if [ "${backend}" = nccl ]; then dev=(--gpu "${gpus[$i]}"); else dev=(--gpu -1); fi
  cmd=(python "${repo}/wenet/bin/train.py" "${train_args[@]}" "${dev[@]}"
       --ddp.dist_backend "${backend}" --ddp.init_method "${init_method}"
       --ddp.world_size "${world_size}" --ddp.rank "${rank}")
  log="${model_dir}/train.${rank}.log"
  if [ "${i}" -eq 0 ]; then
    "${cmd[@]}" > >(tee "${log}") 2>&1 &
  else
    "${cmd[@]}" > "${log}" 2>&1 &
  fi
  pids+=($!)
done

alive=("${pids[@]}")
status=0
while [ "${#alive[@]}" -gt 0 ]; do
  finished=
  if wait -n -p finished "${alive[@]}"; then rc=0; else rc=$?; fi
  [ -n "${finished}" ] || break
  still=()
  for p in "${alive[@]}"; do [ "${p}" = "${finished}" ] || still+=("${p}"); done
  alive=(${still[@]+"${still[@]}"})
  if [ "${rc}" -ne 0 ]; then
    for ((i = 0; i < procs; i++)); do
      [ "${pids[$i]}" = "${finished}" ] && echo "$0: rank $((node_rank * procs + i)) failed" \
        "(exit ${rc}); see ${model_dir}/train.$((node_rank * procs + i)).log" >&2
    done
    status=${rc}
    for p in ${alive[@]+"${alive[@]}"}; do kill -TERM "${p}" 2> /dev/null || true; done
    for ((t = 0; t < 50; t++)); do  # up to 5 s to exit on TERM, then KILL
      any=false
      for p in ${alive[@]+"${alive[@]}"}; do kill -0 "${p}" 2> /dev/null && any=true; done
      "${any}" || break
      sleep 0.1
    done
    for p in ${alive[@]+"${alive[@]}"}; do kill -KILL "${p}" 2> /dev/null || true; done
    for p in ${alive[@]+"${alive[@]}"}; do wait "${p}" 2> /dev/null || true; done
    break
  fi
done
wait 2> /dev/null || true  # the console tee
exit "${status}"
