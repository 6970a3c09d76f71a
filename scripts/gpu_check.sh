#!/usr/bin/env bash
# The GPU check: on a machine with one NVIDIA GPU and this checkout.
#
#   bash scripts/gpu_check.sh                          # installs the CUDA jax from the registry
#   POSJAX_WHEELS=wheels bash scripts/gpu_check.sh     # offline, on a CUDA image with jax, flax,
#                                                      # optax and torch (scripts/gpu_wheels.sh)
#   STAGES=speed_b16,peers_b16 bash scripts/gpu_check.sh   # some stages, in this order
#
# Stages, each under its own time limit and the whole under DEADLINE_S
# (default 480 s: 8 min a call at most); a stage cut short is recorded as such, the ones
# after it still get their turn, and those past the deadline are recorded as skipped. All of them take over 20 minutes
# on an H200 (experiments/bench/nvidia-h200: tests about 2, main_job under 2, study about 4,
# flash over 3, the speed and peers stages about 5 together, long over 2; roformer not yet
# run there), so run them in several calls, each naming its stages, e.g.
# STAGES=tests,main_job,vmap_step, then STAGES=study,flash, and so on.
#   tests     the gpu-marked tests and the device-relevant test files
#   main_job  the README's main job with vmapped seeds (scripts/run.sh): wall time, its table
#   study     the main study at configs/lm.py size=gpu (10.8 M parameters, 256 tokens, scored
#             to 4096): 7 encodings x 3 vmapped seeds, all at once -> $OUT/study (results,
#             extrapolation.png/.md), collected into experiments/main_gpu by hand
#   flash     the Pallas kernel with the bias inside (attention=flash_bias): its bfloat16
#             tests on the GPU, then tokens/s at batch 64 beside cuDNN and RoPE
#   vmap_step 3 vmapped seeds against a lone step, per seed-step (target <= 0.4x)
#   speed_*   tokens/s and MFU (by the datasheet's dense bf16 peak; beside it, the fraction of
#             chained bf16 matmuls measured in the same process) of
#             none, rope, alibi, t5, kerple_log and fire, GPT-2 small's blocks at seq_len 1024,
#             batch 16 on packed documents (configs/lm.py's default) and batch 64 on rows cut
#             from a stream (as llm.c trains GPT-2; per example, FIRE's per-pair MLP would
#             hold 8.6 GB per layer at batch 64) (targets: rope at batch 64 >= 40 % MFU; each
#             bias >= 0.9x rope at batch 64, >= 0.8x at batch 16)
#   peers_*   the same model beside x-transformers (PyTorch, bf16 autocast, flash attention
#             where x-transformers carries the encoding: not T5's bias) for rope, alibi and t5
#             at batch 16 and rope at 64 (target: rope >= 1.5x); both on rows cut from a
#             stream (packing=stream: x-transformers has no document mask either)
#   long      rope, alibi, t5, kerple_log and fire at L 4096 (batch 8) and 8192 (batch 4) on
#             the kernels auto picks (cuDNN, the Pallas kernel for a tabulated bias, chunked),
#             and alibi and t5 on cuDNN with their bias built as [1, H, L, L],
#             GPT-2 small's blocks on stream rows: tokens/s and the compiled step's memory
#             (temp + argument + output bytes); an out-of-memory or failed compile is the
#             row's status (long.json): the baseline a position-bias kernel must beat
#   profile   where the step's time goes (benchmarks/bench_profile.py's train section, profiler
#             traces attributed to HLO ops) for rope, t5 and fire at batch 16; run after
#             speed_b16, whose compiled steps it loads from the persistent cache
#   roformer  RoFormer's six stages at configs/mlm.py size=gpu (d_model 512, 4 layers, lengths
#             64..768), then the long-text matching fine-tune at 256 and 512 tokens
#             (configs/finetune.py size=gpu), 3 vmapped seeds, for rope, learned and
#             sinusoidal -> $OUT/roformer/ENCODING (finetune.json/.md/.png, mlm_stages.json);
#             not yet run on a GPU
# Results: experiments/bench/<device kind>/ (gpu_check.json: each stage's exit code and
# seconds; the benchmarks' JSON; logs/).
set -uo pipefail
case "${1:-}" in  # the header above is the usage
  -h|--help) sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
  "") ;;
  *) echo "gpu_check: it takes no arguments (STAGES=... and DEADLINE_S=... are variables; --help shows them)" >&2; exit 2 ;;
esac
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
START=$(date +%s)
DEADLINE_S="${DEADLINE_S:-480}"
ALL_STAGES=tests,main_job,study,flash,vmap_step,speed_b16,speed_b64,long,peers_b16,peers_b64,profile,roformer
IFS=, read -ra ORDER <<< "${STAGES:-$ALL_STAGES}"  # in the order given
for name in "${ORDER[@]}"; do
  [[ ",$ALL_STAGES," == *",$name,"* ]] || { echo "gpu_check: unknown stage $name; the stages: $ALL_STAGES" >&2; exit 2; }
done
POSJAX_DEVICE=gpu source scripts/_venv.sh || exit 2
set +e
# Several test processes share the GPU: allocate on demand, not 75 % each.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
KIND=$(python -c "import jax; d = jax.devices()[0]; print(d.device_kind.lower().replace(' ', '-') if d.platform == 'gpu' else '')")
if [ -z "$KIND" ]; then
  echo "gpu_check: jax sees no GPU ($(python -c 'import jax; print(jax.devices())')) on a machine that has one: check the NVIDIA driver (CUDA 13 needs 580 or newer; nvidia-smi) and, with POSJAX_WHEELS, that the image's jax is a CUDA build" >&2
  exit 2
fi
OUT="experiments/bench/$KIND"
mkdir -p "$OUT/logs"
RECORDS=()

stage() {  # stage NAME LIMIT_S COMMAND...: run it with what is left of the deadline
  local name=$1 limit=$2; shift 2
  local left=$(( DEADLINE_S - ($(date +%s) - START) ))
  (( left < limit )) && limit=$left
  if (( limit < 10 )); then
    RECORDS+=("\"$name\": {\"rc\": null, \"seconds\": 0, \"note\": \"no time left\"}")
    echo "== $name: skipped, no time left"; return
  fi
  echo "== $name (at most ${limit} s)"
  local begin=$(date +%s)
  timeout --signal=INT --kill-after=15 "$limit" "$@" > "$OUT/logs/$name.log" 2>&1
  local rc=$? seconds=$(( $(date +%s) - begin ))
  tail -n 15 "$OUT/logs/$name.log"
  RECORDS+=("\"$name\": {\"rc\": $rc, \"seconds\": $seconds, \"limit_s\": $limit}")
  echo "== $name: exit $rc in ${seconds} s"
}

stage_tests() {
  stage tests 240 python -m pytest -n 14 -p no:cacheprovider tests/test_gpu.py \
    tests/test_gpu_path.py tests/test_attention.py tests/test_models.py tests/test_encoders_rotary.py \
    tests/test_latent_attention.py tests/test_moe.py tests/test_softcap.py tests/test_pretrained.py
}
stage_main_job() {
  rm -rf "$OUT/main"
  stage main_job 300 bash scripts/run.sh "$OUT/main"
}
# The main study on the GPU (configs/lm.py size=gpu): 7 encodings x 3 vmapped seeds, all 7
# programs at once on the one GPU (their compiles overlap), then only the small result files
# and the plot are kept in $OUT/study (scripts/collect_results.py; no checkpoints).
stage_study() {
  local sweep=/tmp/posjax_gpu_study
  stage study 270 posjax sweep \
    --config=configs/lm.py:study=main,size=gpu,seq_len=256,learning_rate=1e-3,seeds=3 \
    --workdir="$sweep" --vmap_seeds --parallel=7
  python scripts/collect_results.py "$sweep" "$OUT/study" > "$OUT/logs/study_collect.log" 2>&1
}
# The Pallas flash kernel with the bias inside (attention=flash_bias): its bfloat16 tests
# and the lengths and head dims off a power of two, compiled by Triton (not interpreted),
# then speed at batch 64 on stream rows beside cuDNN
# (the bias built once, [1, H, L, L]) and RoPE, in one process -> $OUT/flash_b64.json.
flash() {
  python -m pytest -o addopts="" -p no:cacheprovider -q -x tests/test_flash_bias.py \
    -k "(kernel_matches and bfloat16) or no_parameters or off_a_power_of_two" \
    > "$OUT/logs/flash_tests.log" 2>&1
  echo "flash kernel tests on the GPU: exit $? ($(tail -n 1 "$OUT/logs/flash_tests.log"))"
  BIASES=rope,t5,alibi,kerple_log,t5@flash_bias,alibi@flash_bias,kerple_log@flash_bias \
    speed 64 3 1 3 stream flash_b64
}
export -f flash
stage_flash() { stage flash 330 bash -c flash; }  # its timings ran past 180 s twice
stage_vmap_step() {
  stage vmap_step 60 python benchmarks/bench_train.py --sections vmap_step --repeats 3 \
    --vmap_json "$OUT/vmap_seeds.json"
}
BIASES=none,rope,alibi,t5,kerple_log,fire
speed() {  # speed BATCH STEPS WARMUP PARALLEL PACKING [NAME]: the speed section at GPT-2 small's
  # shape, into $OUT/NAME.json (default speed_bBATCH)
  local batch=$1 steps=$2 warmup=$3 parallel=$4 json="$OUT/${6:-speed_b$1}.json"
  local common=(--sections speed --size gpt2 --seq_len 1024 --batch_size "$batch"
                --packing "$5")
  # Compile every encoding at once, PARALLEL processes at a time, into the persistent cache
  # (a 12-layer step compiles for tens of seconds); the timed process then only loads them.
  tr , '\n' <<< "$BIASES" | xargs -P "$parallel" -I{} python benchmarks/bench_train.py \
    "${common[@]}" --encodings {} --steps 1 --warmup 0 --repeats 1 --json "/tmp/compile_{}.json" \
    > "$OUT/logs/speed_b${batch}_compile.log" 2>&1
  python benchmarks/bench_train.py "${common[@]}" --encodings "$BIASES" --steps "$steps" \
    --warmup "$warmup" --repeats 3 --json "$json"
}
export -f speed; export BIASES OUT  # `timeout` runs programs, so the stage runs it in bash
stage_speed_b16() { stage speed_b16 150 bash -c 'speed "$@"' speed 16 5 2 6 documents; }
# Two at a time at batch 64: T5's step there once took 80 GiB of scratch beside two others.
stage_speed_b64() { stage speed_b64 180 bash -c 'speed "$@"' speed 64 3 1 2 stream; }
# alibi@fused and t5@fused: cuDNN with the bias built once as [1, H, L, L] at those lengths,
# beside the Pallas kernel auto picks there (the switch at dense_max_len is chosen from both)
LONG_ENCODINGS=rope,alibi,t5,alibi@fused,t5@fused,kerple_log,fire
long() {  # compile every encoding's steps at once into the persistent cache, then time them
  local common=(--sections long --size gpt2 --packing stream --long_shapes 4096x8,8192x4)
  tr , '\n' <<< "$LONG_ENCODINGS" | xargs -P 7 -I{} python benchmarks/bench_train.py \
    "${common[@]}" --encodings {} --steps 0 --json "/tmp/long_compile_{}.json" \
    > "$OUT/logs/long_compile.log" 2>&1
  python benchmarks/bench_train.py "${common[@]}" --encodings "$LONG_ENCODINGS" --steps 3 \
    --warmup 1 --json "$OUT/long.json"
}
export -f long; export LONG_ENCODINGS
stage_long() { stage long 300 bash -c long; }  # 120 s timed 3 of its 10 rows (call 8)
stage_peers_b16() {
  stage peers_b16 75 python benchmarks/bench_peers.py --sections train --size gpt2 --seq_len 1024 \
    --batch_size 16 --packing stream --encodings rope,alibi,t5 --processes 1 --steps 5 \
    --warmup 2 --repeats 3 \
    --json "$OUT/peers_b16.json"
}
stage_peers_b64() {
  stage peers_b64 30 python benchmarks/bench_peers.py --sections train --size gpt2 --seq_len 1024 \
    --batch_size 64 --packing stream --encodings rope --processes 1 --steps 3 --warmup 1 \
    --repeats 3 \
    --json "$OUT/peers_b64.json"
}
stage_profile() {
  stage profile 90 python benchmarks/bench_profile.py --sections train --size gpt2 --seq_len 1024 \
    --batch_size 16 --train_encodings rope,t5,fire --processes 1 --repeats 1 --calls 2 \
    --json "$OUT/profile.json" --trace_dir "${PROFILE_TRACE_DIR:-}"
}
# RoFormer's schedule, then its Table 5 test at half its lengths (docs/finetune.md).
roformer() {
  local root=/tmp/posjax_gpu_roformer encoding
  for encoding in rope learned sinusoidal; do
    posjax train --config="configs/mlm.py:encoding=$encoding,size=gpu" \
      --workdir="$root/mlm_$encoding" --noprogress > "$OUT/logs/roformer_mlm_$encoding.log" 2>&1 \
      || return 1
    posjax sweep --config="configs/finetune.py:pretrained=$root/mlm_$encoding,size=gpu,seeds=3" \
      --workdir="$root/ft_$encoding" --vmap_seeds > "$OUT/logs/roformer_ft_$encoding.log" 2>&1 \
      || return 1
    mkdir -p "$OUT/roformer/$encoding"
    posjax plot "$root/ft_$encoding" --output="$OUT/roformer/$encoding" \
      >> "$OUT/logs/roformer_ft_$encoding.log" 2>&1 || return 1
    cp "$root/mlm_$encoding/stages.json" "$OUT/roformer/$encoding/mlm_stages.json"
  done
}
export -f roformer
stage_roformer() { stage roformer 420 bash -c roformer; }

for name in "${ORDER[@]}"; do "stage_$name"; done

{ echo "{\"device_kind\": \"$KIND\", \"seconds\": $(( $(date +%s) - START )), \"stages\": {"
  (IFS=,; echo "${RECORDS[*]}"); echo "}}"; } | python -c "import json, sys; json.dump(json.load(sys.stdin), open('$OUT/gpu_check.json', 'w'), indent=1)"
echo "gpu_check: $(( $(date +%s) - START )) s; results in $OUT"
