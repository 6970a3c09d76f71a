#!/usr/bin/env bash
# The main job: install posjax into .venv, then compare position encodings on the embedded
# corpus (a causal LM per encoding trained at 128 tokens, evaluated from 128 to 2048) and
# write runs/main/extrapolation.png and extrapolation.md. Each encoding runs with SEEDS seeds
# (default 3; the table shows the mean and the seeds' min-max), the seeds of an encoding
# trained together in one vmapped program (--vmap_seeds), 600 steps of BATCH=8 rows: half the
# main study's 16 (experiments/main_600x16), a budget that keeps its findings in about half
# its time (experiments/main). On a CPU, PARALLEL encodings train at a time
# (default: one per core), each on its own cores; on a GPU one at a time. STEPS=N trains N
# steps instead of 600 (STEPS=250 BATCH=16, experiments/main_250, and STEPS=1000 BATCH=4,
# experiments/main_1000x4, lose some findings); BATCH=0 or STEPS=0 takes the config file's own
# (16 rows, 600 steps: the main study's budget, twice the time). SEED_STEPS=in_turn steps an encoding's seeds
# one after another in their program, each bit for bit its lone run (docs/sweeps.md).
# Re-running resumes.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
OUT="${1:-runs/main}"
if [ "$DEVICE" = gpu ]; then PARALLEL="${PARALLEL:-1}"; else PARALLEL="${PARALLEL:-$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)}"; fi
posjax analyze decay --dim=128 --theta=100,1000,10000,100000 --max_distance=4096 \
  --output="$OUT/rope_decay"
posjax sweep --config=configs/lm.py:study=main,seeds="${SEEDS:-3}"${STEPS:+,steps=$STEPS},batch_size="${BATCH:-8}" \
  --workdir="$OUT" --vmap_seeds --seed_steps="${SEED_STEPS:-vmap}" \
  --parallel="$PARALLEL"
posjax plot "$OUT"
cat "$OUT/extrapolation.md"
