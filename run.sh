#!/usr/bin/env bash
# End-to-end recipe: corpus -> Kaldi data dirs -> CMVN -> BPE -> data lists ->
# training -> averaging + recognition + scoring -> TorchScript (and ONNX) export.
# Stages as in WeNet's Switchboard run.sh; run a part with --stage N --stop_stage M.
set -euo pipefail

stage=0
stop_stage=6
corpus=synth            # synth (built-in, text-to-speech) | synth_broad (broad TTS pretraining corpus) | speechocean762 | swbd | custom (your own, docs/own_data.md)
                        # | custom (your own corpus in --data_root: docs/own_data.md)
data_root=              # corpus location (speechocean762, custom); synth: where audio is written
download=false          # speechocean762: fetch the release when data_root lacks it; swbd: the MS98 transcriptions
swbd1_dir=              # swbd: LDC97S62 (audio) with swb_ms98_transcriptions
eval2000_dir=           # swbd: "LDC2002S09/hub5e_00 LDC2002T43" (two dirs, space-separated)
seed=777                # synth corpus generation seed; custom: seed of the held-out dev speakers
text_norm=upper         # custom: transcripts upper-cased, punctuation removed | lower | none (as written)
dev_share=0.1           # custom without a dev set: share of training utterances held out (whole speakers)
hours=                  # synth_broad: training audio in hours (empty: its default, local/synth_broad/generate.py)
simulation=default      # synth_broad: room/noise/channel simulation: default | none | 'default,babble=0' ...
styles=none             # synth_broad: speaker styles: none | 'child=0.3,accent=0.5,reading=0.3,natural=0.2'
nj=2                    # parallel jobs for data preparation
num_nodes=1             # training: number of machines
node_rank=0             # training: this machine's index, 0..num_nodes-1
num_cpu_workers=1       # training processes when no GPU is visible
num_workers=1           # data-loader workers per training process (ignored while dataset_conf.cache_features
                        # is true; on a GPU: --num_workers 4 --train_overrides "dataset_conf.cache_features false")
ddp_timeout=600         # training: seconds a rank waits for its peers (see help)
use_amp=none            # training precision: none (float32), bf16, fp16, auto (bf16 where the GPU/CPU computes it natively)
feat_dir=raw_wav
data_type=shard         # shard | raw
num_utts_per_shard=200
prefetch=100
nbpe=0                  # 0: the corpus default (synth 128, synth_broad 500, speechocean762 256, swbd 2000,
                        # custom 500)
bpemode=unigram
token_type=bpe          # bpe: sentencepiece units (nbpe, bpemode) | char: one unit per character,
                        # no BPE model (Mandarin, Japanese, Thai...; stage 5 then scores characters)
units_from=             # a model dir with units.txt (+ bpe.model unless its units are characters; run.sh
                        # stage 6 and export_onnx write one): stage 2
                        # takes its units instead of training new ones, so a fine-tuned model keeps the
                        # pretrained output layers and decoder (with --init_checkpoint of that model)
train_set=train
dev_set=dev
test_sets=              # empty: the corpus default
train_config=           # empty: the corpus default
train_overrides=        # "key.sub value; key value": changes to train_config (saved in \$dir/train.yaml)
train_seed=777          # training: seed of initialisation, dropout, augmentation and data order
                        # (another seed gives another model of the same recipe, e.g. for an ensemble)
cmvn=true
dir=                    # empty: exp/<corpus>_<config name>
checkpoint=             # resume training from this checkpoint
init_checkpoint=        # start training from another experiment's weights (transfer)
init_exclude=           # regex of init_checkpoint tensors not copied; empty: the CMVN and the
                        # unit-dependent layers, or only the CMVN with --units_from (same units)
init_allow_mismatch=false  # true: start from init_checkpoint although its train.yaml builds a model
                        # computing another function (training refuses otherwise and names the options)
replay_data=            # fine-tuning: a second data.list (e.g. ../pretrain/raw_wav/train/data.list, same
                        # data_type) of which every epoch also reads replay_ratio x the train list's
                        # lines: rehearsal of the pretraining corpus against overfitting and forgetting
replay_ratio=1.0        # with replay_data: replayed lines per train data.list line
init_method=            # DDP init file (file://...); empty: $dir/ddp_init
average_checkpoint=true
use_model_avg=false     # true: decode the training's running weight average, not an epoch average
decode_checkpoint=      # empty: $dir/avg_${average_num}.pt ($dir/model_avg.pt with use_model_avg)
decode_ensemble=        # stage 5: more checkpoints (space-separated, each beside its train.yaml) decoded
                        # together with decode_checkpoint, CTC and decoder posteriors averaged
average_num=0           # 0: the corpus default (synth 2: its short runs change the model too much between
                        # epochs to average 5; chosen on dev, RESULTS.md; others 5)
decode_modes="ctc_greedy_search ctc_prefix_beam_search attention attention_rescoring"
beam_size=10            # stage 5 recognition: beam of the CTC prefix / attention / transducer searches
ctc_weight=0.5          # attention_rescoring: weight of the CTC prefix score
reverse_weight=0.0      # rescoring: weight of the right-to-left decoder (bitransformer)
decoding_chunk_size=-1  # -1 full context; N > 0: chunks of N encoder frames (streaming models)
num_decoding_left_chunks=-1  # with decoding_chunk_size: left chunks seen, -1 all
simulate_streaming=false     # encode chunk by chunk with caches (one utterance per batch)
gpu=-1                  # stage 5: GPU index for recognition, -1 CPU
nbest=1                 # > 1: also write $dir/<set>/<mode>/nbest (JSON lines) and its oracle WER
                        # ($dir/<set>/<mode>/oracle, tools/nbest_oracle.py)
timestamps=false        # true: also write $dir/<set>/<mode>/ctm (word times, CTC alignment)
context_list_path=      # hotwords: one phrase per line, biased in the searches
context_score=3.0       # hotwords: bonus per matched unit
lm_order=0              # > 0: stage 2 also trains a word N-gram LM (tools/train_ngram.py) on the
                        # training text and lm_extra_text, and stage 5 decodes with it
lm_extra_text=          # more LM training text: one sentence per line, normalised like the transcripts
lm_broad_text=false     # true: the LM also learns the broad corpus's 168 k sentences (wordnet-base,
                        # fortunes: tools/install.sh installs them; local/synth_broad/lm_text.py)
lm_path=                # stage 5: a word ARPA LM fused into the CTC prefix beam search (so also
                        # attention rescoring); empty: stage 2's with lm_order > 0, else none
lm_weight=0.5           # stage 5 with an LM: weight of its log-probability (chosen on speechocean762 dev)
word_bonus=2.0          # stage 5 with an LM: score per word, against the LM's cost per word
export_onnx=false       # true: stage 6 also writes \$dir/onnx (fp32 and int8 ONNX files for the torch-free
                        # runtime, docs/onnx_format.md); streaming models also get encoder_chunk.onnx
onnx_chunk_size=16      # export_onnx: output frames per chunk of encoder_chunk.onnx (streaming models)
onnx_left_chunks=4      # export_onnx: left chunks in encoder_chunk.onnx's fixed-size attention cache
export_sherpa=false     # true: stage 6 also writes \$dir/sherpa-onnx (fp32 and int8 files sherpa-onnx loads,
                        # docs/deploy.md), streaming files with onnx_chunk_size/onnx_left_chunks

help_message="Usage: $0 [options]
Runs stages \$stage..\$stop_stage of the recipe (default 0..6 on the built-in corpus).
  --stage N / --stop_stage M   first and last stage, 0..6, N <= M (0 data, 1 cmvn, 2 bpe,
                               3 lists, 4 train, 5 average+decode+score, 6 export)
  --corpus NAME                synth (default) | synth_broad | speechocean762 | swbd | custom
  --corpus custom --data_root DIR
                               your own corpus: Kaldi data dirs, TSV/CSV/JSON-lines manifests,
                               Common Voice, audiofolder, NeMo, LibriSpeech trees or lhotse
                               manifests in DIR, set by set (docs/own_data.md)
  --train_set A --dev_set B --test_sets \"C D\"
                               the sets' names (default train, dev, test); custom without a
                               dev set: whole speakers held out of train (--dev_share 0.1,
                               drawn with --seed)
  --text_norm MODE             custom: upper (default: upper-case, punctuation removed) |
                               lower | none (as written)
  --token_type bpe|char        units: BPE (--nbpe N --bpemode M) or one per character (no
                               BPE model); stage 5 scores characters when the references
                               have no spaces
  --hours H --simulation SPEC  synth_broad: training hours; simulation kinds and shares
  --styles SPEC                synth_broad: children, Mandarin accent, read-aloud style and
                               natural voices, each with a share (local/synth_broad/style.py)
  --data_root DIR              corpus location
  --download true              fetch what the corpus lacks (speechocean762: the release;
                               swbd: the MS98 transcriptions)
  --train_config FILE          model/training yaml (default per corpus)
  --train_overrides \"K V; ...\" change config entries for this run, e.g.
                               \"max_epoch 10; model_conf.big_blank_durations [2, 4]\"
  --dir DIR                    experiment directory
  --train_seed N               training seed (default 777): weights, dropout, augmentation, order
  --num_nodes N --node_rank R  multi-node training (shared init file on a shared disk)
  --num_cpu_workers N          CPU training processes when no GPU is visible
  --num_workers N              data-loader workers per training process (see docs/training.md, GPUs)
  --ddp_timeout S              seconds a training process waits for its peers (default 600):
                               how late another node may start, how long the others wait
                               while rank 0 writes a checkpoint, and how soon a dead peer
                               on another machine stops the job
  --use_amp MODE               none | bf16 | fp16 | auto
  --data_type TYPE             shard | raw
  --checkpoint FILE            resume training
  --init_checkpoint FILE       start training from another experiment's weights, e.g.
                               exp/synth_train_zipformer/avg_2.pt or its exported
                               final.zip (output layers and
                               CMVN excepted: --init_exclude REGEX); refused when the
                               train.yaml beside it builds another function (another
                               activation, causal...) unless --init_allow_mismatch true
  --replay_data LIST --replay_ratio R
                               every training epoch also reads R x (train list lines)
                               lines of LIST (walking through it without repeats), e.g.
                               the pretraining corpus's raw_wav/train/data.list
  --units_from DIR             stage 2 takes DIR/units.txt and DIR/bpe.model (the pretrained
                               model's, as stage 6 leaves them; no bpe.model: characters)
                               instead of training new units;
                               with --init_checkpoint every layer but the CMVN is then copied
  --decode_modes \"...\"         recognition modes for stage 5
  --beam_size N --ctc_weight W --reverse_weight W --decoding_chunk_size N
  --num_decoding_left_chunks N --simulate_streaming true --gpu ID
                               stage 5 search and encoder settings (defaults above)
  --nbest N --timestamps true  stage 5 also writes <mode>/nbest and <mode>/ctm
  --context_list_path FILE --context_score S   hotword biasing in stage 5
  --decode_ensemble \"A.pt B.pt\" stage 5 decodes with these models too (from other runs with
                               the same units), their posteriors averaged with this run's
  --use_model_avg true         decode the running weight average kept during training
                               (\$dir/model_avg.pt) instead of averaging epoch checkpoints
  --export_onnx true           stage 6 also writes \$dir/onnx: ONNX files (fp32 and int8) with
                               units.txt and bpe.model (--onnx_chunk_size N --onnx_left_chunks N
                               for a streaming model's encoder_chunk.onnx)
  --export_sherpa true         stage 6 also writes \$dir/sherpa-onnx: the files sherpa-onnx's
                               recognizers load (phones, boards, browsers; docs/deploy.md)
  --config FILE                name=value lines (# comments, '...' or \"...\" quotes), read
                               before the command-line options; never run as shell
Every variable at the top of run.sh is an option: --name value or --name=value.
Values are checked before anything runs; a bad one stops run.sh naming the option."
# What each option takes (tools/parse_options.sh checks them as they are set).
option_types=(
  stage=0..6 stop_stage=0..6 corpus='synth|synth_broad|speechocean762|swbd|custom' download=bool seed=uint
  text_norm='upper|lower|none' dev_share=float token_type='bpe|char'
  hours=float simulation=nonempty styles=nonempty
  nj=posint num_nodes=posint node_rank=uint num_cpu_workers=posint num_workers=uint ddp_timeout=posint
  use_amp='none|bf16|fp16|auto' feat_dir=nonempty data_type='shard|raw'
  num_utts_per_shard=posint prefetch=posint nbpe=uint bpemode='unigram|bpe|char|word'
  train_set=nonempty dev_set=nonempty cmvn=bool average_checkpoint=bool
  use_model_avg=bool average_num=uint decode_modes=nonempty
  beam_size=posint ctc_weight=float reverse_weight=float decoding_chunk_size=int
  num_decoding_left_chunks=int simulate_streaming=bool gpu=int nbest=posint timestamps=bool
  context_score=float lm_order=uint train_seed=uint replay_ratio=float lm_broad_text=bool init_allow_mismatch=bool lm_weight=float word_bonus=float
  export_onnx=bool export_sherpa=bool onnx_chunk_size=posint onnx_left_chunks=posint
)
# Parsed before the cd (parse_options.sh reads this script to learn its options) and
# before path.sh, so --help and bad values never wait for the virtualenv's installation.
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/tools/parse_options.sh"
cd "$(dirname "${BASH_SOURCE[0]}")"

die() { echo "$0: $*" >&2; exit 1; }
run_stage() { [ "${stage}" -le "$1" ] && [ "${stop_stage}" -ge "$1" ]; }
[ "${stage}" -le "${stop_stage}" ] \
  || die "--stage ${stage} is after --stop_stage ${stop_stage}: nothing would run (stages 0..6, --stage <= --stop_stage)"
[ "${node_rank}" -lt "${num_nodes}" ] \
  || die "--node_rank takes 0..$((num_nodes - 1)) with --num_nodes ${num_nodes}, not '${node_rank}'"
{ [ "${decoding_chunk_size}" -eq -1 ] || [ "${decoding_chunk_size}" -gt 0 ]; } \
  || die "--decoding_chunk_size takes -1 (full context) or a positive integer, not '${decoding_chunk_size}'"
[ "${gpu}" -ge -1 ] || die "--gpu takes -1 (CPU) or a GPU index, not '${gpu}'"

case "${corpus}" in
  synth)
    : "${data_root:=corpus/synth}"; [ "${nbpe}" -gt 0 ] || nbpe=128
    : "${test_sets:=test}"; : "${train_config:=conf/train_zipformer.yaml}"
    [ "${average_num}" -gt 0 ] || average_num=2 ;;
  synth_broad)
    : "${data_root:=corpus/synth_broad}"; [ "${nbpe}" -gt 0 ] || nbpe=500
    : "${test_sets:=test}"; : "${train_config:=conf/train_conformer_synth_broad.yaml}" ;;
  speechocean762)
    : "${data_root:=../shared/corpora/speechocean762}"; [ "${nbpe}" -gt 0 ] || nbpe=256
    : "${test_sets:=dev}"; : "${train_config:=conf/train_conformer_speechocean762.yaml}" ;;
  swbd)
    [ "${nbpe}" -gt 0 ] || nbpe=2000; train_set=train_nodup; dev_set=train_dev
    : "${test_sets:=eval2000}"; : "${train_config:=conf/train_conformer_swbd.yaml}" ;;
  custom)
    [ -n "${data_root}" ] || die "--corpus custom needs --data_root DIR (the corpus: docs/own_data.md)"
    [ "${nbpe}" -gt 0 ] || nbpe=500
    : "${test_sets:=test}"; : "${train_config:=conf/train_conformer.yaml}" ;;
esac
awk -v r="${dev_share}" 'BEGIN { exit !(r > 0 && r < 1) }' \
  || die "--dev_share takes a number between 0 and 1, not '${dev_share}'"
[ "${average_num}" -gt 0 ] || average_num=5
: "${dir:=exp/${corpus}_$(basename "${train_config}" .yaml)}"
# bpemodel: the BPE model's path without .model; empty with character units (no BPE model)
if [ -n "${units_from}" ]; then
  dict=data/lang_char/${train_set}_inherited_units.txt
  bpemodel=data/lang_char/${train_set}_inherited
  # a model dir without bpe.model has character units (e.g. trained with --token_type char)
  [ -f "${units_from}/bpe.model" ] || { token_type=char; bpemodel=; }
  : "${init_exclude:=^encoder\.global_cmvn\.}"
else
  if [ "${token_type}" = char ]; then
    dict=data/lang_char/${train_set}_char_units.txt
    bpemodel=
  else
    dict=data/lang_char/${train_set}_${bpemode}${nbpe}_units.txt
    bpemodel=data/lang_char/${train_set}_${bpemode}${nbpe}
  fi
  : "${init_exclude:=^(encoder\.global_cmvn\.|ctc\.ctc_lo\.|decoder\.(.*\.)?(embed|output_layer)\.)}"
fi
bpe_opts=()  # the options naming the BPE model, for every tool that reads the units
[ -z "${bpemodel}" ] || bpe_opts=(--bpe_model "${bpemodel}.model")
# Inputs no stage writes (paths relative to the repository root, like every path here).
if run_stage 1 || run_stage 4; then
  [ -f "${train_config}" ] || die "--train_config takes a yaml file; no such file '${train_config}'"
fi
if run_stage 2 && [ -n "${units_from}" ]; then
  [ -f "${units_from}/units.txt" ] \
    || die "--units_from takes a model dir holding units.txt (and bpe.model, unless its units are characters); no such file '${units_from}/units.txt'"
fi
[ -n "${lm_path}" ] || [ "${lm_order}" -eq 0 ] || lm_path=data/lm/${train_set}_${lm_order}gram.arpa
if run_stage 2 && [ "${lm_order}" -gt 0 ] && [ -n "${lm_extra_text}" ]; then
  [ -f "${lm_extra_text}" ] || die "--lm_extra_text takes a text file; no such file '${lm_extra_text}'"
fi
if run_stage 5 && [ -n "${lm_path}" ] && ! { run_stage 2 && [ "${lm_order}" -gt 0 ]; }; then
  [ -f "${lm_path}" ] || die "--lm_path takes an ARPA file; no such file '${lm_path}'"
fi
read -r -a ensemble_ckpts <<< "${decode_ensemble}"
if run_stage 5; then
  for f in ${ensemble_ckpts[@]+"${ensemble_ckpts[@]}"}; do
    [ -f "${f}" ] || die "--decode_ensemble takes checkpoint files; no such file '${f}'"
    [ -f "$(dirname "${f}")/train.yaml" ] || die "--decode_ensemble: no train.yaml beside '${f}'"
  done
fi
if run_stage 5 && [ -n "${context_list_path}" ]; then
  [ -f "${context_list_path}" ] || die "--context_list_path takes a phrase file; no such file '${context_list_path}'"
fi
if run_stage 4; then
  for opt in checkpoint init_checkpoint; do
    [ -z "${!opt}" ] || [ -f "${!opt}" ] || die "--${opt} takes a checkpoint file; no such file '${!opt}'"
  done
  [ -z "${replay_data}" ] || [ -f "${replay_data}" ] \
    || die "--replay_data takes a data.list; no such file '${replay_data}'"
  for x in "${train_set}" "${dev_set}"; do  # stages 1 and 3 rewrite these dirs
    [ -n "${replay_data}" ] || break
    case "$(realpath -m "${replay_data}")/" in "$(realpath -m "${feat_dir}/${x}")"/*)
      die "--replay_data '${replay_data}' lies in ${feat_dir}/${x}, which this corpus's stages 1 and 3 rewrite: keep the pretraining corpus's list and shards elsewhere (give this run another --feat_dir, or copy them out)" ;;
    esac
  done
  awk -v r="${replay_ratio}" 'BEGIN { exit !(r > 0) }' \
    || die "--replay_ratio takes a number > 0, not '${replay_ratio}'"
fi

# shellcheck disable=SC1091
. ./path.sh

run_start=$(date +%s)
stage_start=${run_start}
banner() {
  stage_start=$(date +%s)
  echo "================ stage $1: $2 ($(date '+%F %T')) ================"
}
# Stages 5 and 6 average the average_num best epochs, or every epoch there is when training
# kept fewer (a short run, e.g. --train_overrides "max_epoch 1"), and say so.
clamp_average_num() {
  local kept
  [ -d "${dir}" ] || return 0
  kept=$(find "${dir}" -maxdepth 1 -regextype posix-extended -regex '.*/[0-9]+\.pt' | wc -l)
  if [ "${kept}" -gt 0 ] && [ "${kept}" -lt "${average_num}" ]; then
    echo "run.sh: ${dir} holds ${kept} epoch checkpoint(s): averaging ${kept}, not --average_num ${average_num}" >&2
    average_num=${kept}
  fi
}
stage_done() {
  local now; now=$(date +%s)
  echo "---------------- stage $1 done in $((now - stage_start)) s (total $((now - run_start)) s)"
}

if run_stage 0; then
  banner 0 "data preparation (${corpus})"
  case "${corpus}" in
    synth)
      local/synth_data_prep.sh --nj "${nj}" --seed "${seed}" "${data_root}" data ;;
    synth_broad)
      local/synth_broad_data_prep.sh --nj "${nj}" --seed "${seed}" ${hours:+--hours "${hours}"} \
        --simulation "${simulation}" --styles "${styles}" "${data_root}" data ;;
    speechocean762)
      local/speechocean762_data_prep.sh --download "${download}" "${data_root}" data ;;
    swbd)
      local/swbd_stage0.sh --download "${download}" "${swbd1_dir}" "${eval2000_dir}" data ;;
    custom)
      local/custom_data_prep.sh --train_set "${train_set}" --dev_set "${dev_set}" \
        --test_sets "${test_sets}" --text_norm "${text_norm}" --dev_share "${dev_share}" \
        --seed "${seed}" --train_config "${train_config}" "${data_root}" data ;;
  esac
  stage_done 0
fi

if run_stage 1; then
  banner 1 "global CMVN"
  mkdir -p "${feat_dir}"
  for x in "${train_set}" "${dev_set}" ${test_sets}; do
    rm -rf "${feat_dir:?}/${x}"
    cp -r "data/${x}" "${feat_dir}/${x}"
  done
  python tools/compute_cmvn_stats.py --nj "${nj}" --train_config "${train_config}" \
    --in_scp "data/${train_set}/wav.scp" --out_cmvn "${feat_dir}/${train_set}/global_cmvn"
  stage_done 1
fi

if run_stage 2 && [ -n "${units_from}" ]; then
  banner 2 "BPE model and units (from ${units_from})"
  mkdir -p data/lang_char
  cut -f 2- -d" " "data/${train_set}/text" > "data/lang_char/input_${train_set}.txt"
  cp "${units_from}/units.txt" "${dict}"
  # pieces of this corpus's text the inherited units lack become <unk>: say how many
  if [ -n "${bpemodel}" ]; then
    cp "${units_from}/bpe.model" "${bpemodel}.model"
    tools/spm_encode --model="${bpemodel}.model" --output_format=piece \
      < "data/lang_char/input_${train_set}.txt"
  else
    echo "units: ${units_from} has no bpe.model: its units are characters" >&2
    python tools/char_units.py --pieces "data/lang_char/input_${train_set}.txt"
  fi | tr ' ' '\n' | sed '/^$/d' \
    | awk -v dict="${dict}" 'BEGIN { while ((getline l < dict) > 0) { split(l, f, " "); u[f[1]] = 1 } }
        { n++; if (!($0 in u)) { m++; miss[$0]++ } }
        END { printf "units: %d of %d training-text pieces are not in %s (read as <unk>)", m, n, dict
              k = 0; for (p in miss) if (k++ < 10) printf "%s %s", (k == 1 ? ":" : ","), p; print "" }'
  echo "units: $(wc -l < "${dict}") entries in ${dict}"
  stage_done 2
elif run_stage 2 && [ "${token_type}" = char ]; then
  banner 2 "character units"
  mkdir -p data/lang_char
  cut -f 2- -d" " "data/${train_set}/text" > "data/lang_char/input_${train_set}.txt"
  python tools/char_units.py "data/lang_char/input_${train_set}.txt" "${dict}"
  echo "units: $(wc -l < "${dict}") entries in ${dict}"
  stage_done 2
elif run_stage 2; then
  banner 2 "BPE model and units (${bpemode}, ${nbpe})"
  mkdir -p data/lang_char
  cut -f 2- -d" " "data/${train_set}/text" > "data/lang_char/input_${train_set}.txt"
  extra=()
  [ "${corpus}" = swbd ] && extra=(--user_defined_symbols="[LAUGHTER],[NOISE],[VOCALIZED-NOISE]")
  tools/spm_train --input="data/lang_char/input_${train_set}.txt" --vocab_size="${nbpe}" \
    --model_type="${bpemode}" --model_prefix="${bpemodel}" --input_sentence_size=100000000 \
    --character_coverage=1.0 "${extra[@]}"
  tools/make_units.sh "${bpemodel}.model" "data/lang_char/input_${train_set}.txt" "${dict}"
  echo "units: $(wc -l < "${dict}") entries in ${dict}"
  stage_done 2
fi

if run_stage 2 && [ "${lm_order}" -gt 0 ]; then
  banner 2 "word ${lm_order}-gram LM"
  lm_texts=(--text "data/lang_char/input_${train_set}.txt")
  [ -z "${lm_extra_text}" ] || lm_texts+=(--text "${lm_extra_text}")
  if "${lm_broad_text}"; then
    python -m local.synth_broad.lm_text data/lm/broad_sentences.txt
    lm_texts+=(--text data/lm/broad_sentences.txt)
  fi
  python tools/train_ngram.py --order "${lm_order}" --out "${lm_path}" "${lm_texts[@]}"
  stage_done 2
fi

if run_stage 3; then
  banner 3 "data lists (${data_type})"
  for x in "${dev_set}" ${test_sets} "${train_set}"; do
    seg=()
    [ -f "${feat_dir}/${x}/segments" ] && seg=(--segments "${feat_dir}/${x}/segments")
    if [ "${data_type}" = shard ]; then
      python tools/make_shard_list.py --num_utts_per_shard "${num_utts_per_shard}" \
        --nj "${nj}" "${seg[@]}" "${feat_dir}/${x}/wav.scp" "${feat_dir}/${x}/text" \
        "$(realpath -m "${feat_dir}/${x}/shards")" "${feat_dir}/${x}/data.list"
    else
      python tools/make_raw_list.py "${seg[@]}" "${feat_dir}/${x}/wav.scp" \
        "${feat_dir}/${x}/text" "${feat_dir}/${x}/data.list"
    fi
  done
  stage_done 3
fi

if run_stage 4; then
  banner 4 "training (${train_config} -> ${dir})"
  cmvn_opts=()
  "${cmvn}" && cmvn_opts=(--cmvn "${feat_dir}/${train_set}/global_cmvn")
  init_opts=()
  [ -z "${init_checkpoint}" ] \
    || init_opts=(--init_checkpoint "${init_checkpoint}" --init_exclude "${init_exclude}")
  "${init_allow_mismatch}" && init_opts+=(--init_allow_mismatch)
  override_opts=()
  IFS=';' read -r -a overrides <<< "${train_overrides}"
  for o in "${overrides[@]}"; do  # train.py ignores the spaces around each item
    if [[ "${o}" =~ [^[:space:]] ]]; then override_opts+=(--override_config "${o}"); fi
  done
  tools/launch_train.sh --num_nodes "${num_nodes}" --node_rank "${node_rank}" \
    --num_cpu_workers "${num_cpu_workers}" --init_method "${init_method}" -- \
    --config "${train_config}" --data_type "${data_type}" --dict "${dict}" \
    "${bpe_opts[@]}" --prefetch "${prefetch}" \
    --train_data "${feat_dir}/${train_set}/data.list" --cv_data "${feat_dir}/${dev_set}/data.list" \
    ${replay_data:+--replay_data "${replay_data}" --replay_ratio "${replay_ratio}"} \
    ${checkpoint:+--checkpoint "${checkpoint}"} --model_dir "${dir}" \
    "${init_opts[@]}" \
    --tensorboard_dir "${dir}/tensorboard" --num_workers "${num_workers}" --use_amp "${use_amp}" "${cmvn_opts[@]}" \
    --ddp_timeout "${ddp_timeout}" --seed "${train_seed}" "${override_opts[@]}"
  stage_done 4
fi

if run_stage 5; then
  banner 5 "average, recognise (${decode_modes}), score"
  if [ -z "${decode_checkpoint}" ] && "${use_model_avg}"; then
    decode_checkpoint="${dir}/model_avg.pt"  # running average of the newest epoch
    python wenet/bin/average_model.py --dst_model "${decode_checkpoint}" \
      --src_path "${dir}" --use_model_avg
  elif [ -z "${decode_checkpoint}" ]; then
    clamp_average_num
    decode_checkpoint="${dir}/avg_${average_num}.pt"
    if "${average_checkpoint}"; then
      python wenet/bin/average_model.py --dst_model "${decode_checkpoint}" \
        --src_path "${dir}" --num "${average_num}" --val_best
    fi
  fi
  decode_opts=(--beam_size "${beam_size}" --ctc_weight "${ctc_weight}"
    --reverse_weight "${reverse_weight}" --decoding_chunk_size "${decoding_chunk_size}"
    --num_decoding_left_chunks "${num_decoding_left_chunks}" --nbest "${nbest}"
    ${context_list_path:+--context_list_path "${context_list_path}" --context_score "${context_score}"}
    ${lm_path:+--lm_path "${lm_path}" --lm_weight "${lm_weight}" --word_bonus "${word_bonus}"})
  batch_size=16
  if "${simulate_streaming}"; then decode_opts+=(--simulate_streaming); batch_size=1; fi
  if "${timestamps}"; then decode_opts+=(--timestamps); fi
  if [ "${#ensemble_ckpts[@]}" -gt 0 ]; then decode_opts+=(--ensemble "${ensemble_ckpts[@]}"); fi
  cer_sets=()
  for x in ${test_sets}; do
    python wenet/bin/recognize.py --gpu "${gpu}" --modes "${decode_modes}" \
      --config "${dir}/train.yaml" --data_type "${data_type}" \
      --test_data "${feat_dir}/${x}/data.list" --checkpoint "${decode_checkpoint}" \
      --batch_size "${batch_size}" --penalty 0.0 --dict "${dict}" \
      "${bpe_opts[@]}" "${decode_opts[@]}" --result_dir "${dir}/${x}"
    # characters are scored when most reference transcripts have no space (Mandarin...)
    char=0
    [ ! -f "data/${x}/text" ] \
      || char=$(awk '{ n++; if (NF <= 2) c++ } END { print (n > 0 && 2 * c > n) ? 1 : 0 }' "data/${x}/text")
    [ "${char}" = 0 ] || { echo "stage 5: data/${x}/text has no spaces: scoring characters (CER)"
                           cer_sets+=("${x}"); }
    for mode in ${decode_modes}; do
      python tools/compute-wer.py --char="${char}" --v=1 "data/${x}/text" \
        "${dir}/${x}/${mode}/text" > "${dir}/${x}/${mode}/wer"
      if [ "${nbest}" -gt 1 ]; then  # how much rescoring the lists could still gain
        python tools/nbest_oracle.py "data/${x}/text" "${dir}/${x}/${mode}/nbest" \
          --depths 1 "${nbest}" > "${dir}/${x}/${mode}/oracle"
      fi
    done
  done
  # loss plot (when the dir holds epoch yamls) and $dir/RESULTS.md; prints WER + RTF per mode
  plot=loss.png
  if compgen -G "${dir}/[0-9]*.yaml" > /dev/null; then
    python tools/plot_losses.py --exp_dir "${dir}" --out "${dir}/${plot}"
  else
    plot=
  fi
  python tools/summarize_results.py --exp_dir "${dir}" --test_set "${test_sets}" \
    --modes "${decode_modes}" --config_name "${train_config}" \
    --checkpoint "${decode_checkpoint}" --plot "${plot}" --cer_sets "${cer_sets[*]}"
  echo "results: ${dir}/RESULTS.md"
  stage_done 5
fi

if run_stage 6; then
  if "${export_onnx}"; then banner 6 "TorchScript and ONNX export"; else banner 6 "TorchScript export"; fi
  if [ -z "${decode_checkpoint}" ]; then
    if "${use_model_avg}"; then decode_checkpoint="${dir}/model_avg.pt"
    else clamp_average_num; decode_checkpoint="${dir}/avg_${average_num}.pt"; fi
  fi
  python wenet/bin/export_jit.py --config "${dir}/train.yaml" --checkpoint "${decode_checkpoint}" \
    --output_file "${dir}/final.zip" --output_quant_file "${dir}/final_quant.zip"
  # what transcribe.py / wenet.load_model read beside final.zip: a self-contained dir
  cp "${dict}" "${dir}/units.txt"
  if [ -n "${bpemodel}" ]; then cp "${bpemodel}.model" "${dir}/bpe.model"; else rm -f "${dir}/bpe.model"; fi
  if "${cmvn}"; then cp "${feat_dir}/${train_set}/global_cmvn" "${dir}/global_cmvn"; fi
  if "${export_onnx}"; then
    # the same checkpoint, units and BPE model as final.zip, as an ONNX model dir
    python wenet/bin/export_onnx.py --config "${dir}/train.yaml" --checkpoint "${decode_checkpoint}" \
      --output_dir "${dir}/onnx" --int8 --chunk_size "${onnx_chunk_size}" \
      --num_decoding_left_chunks "${onnx_left_chunks}" --units "${dict}" "${bpe_opts[@]}"
  fi
  if "${export_sherpa}"; then
    python wenet/bin/export_onnx.py --target sherpa-onnx --config "${dir}/train.yaml" \
      --checkpoint "${decode_checkpoint}" --output_dir "${dir}/sherpa-onnx" --int8 \
      --chunk_size "${onnx_chunk_size}" --num_decoding_left_chunks "${onnx_left_chunks}" \
      --units "${dict}" "${bpe_opts[@]}"
  fi
  stage_done 6
fi
echo "run.sh: stages ${stage}-${stop_stage} finished in $(( $(date +%s) - run_start )) s"
