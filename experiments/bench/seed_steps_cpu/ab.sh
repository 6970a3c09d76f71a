#!/usr/bin/env bash
# Seeds vmapped against stepped in turn, in posjax train's own loop: RoPE at the main job's
# shape (configs/lm.py size=main, 3 seeds x 8 rows x 128 tokens), 300 steps, on one core
# (POSJAX_CPUS=0, as run.sh gives each encoding), the two ways alternated 3 times, the other
# core idle. Then ab.json: each run's stages.json "seconds" (collect.py). KIND=-NAME names
# another kind of CPU's files (ab-NAME.json, ab_two_cores-NAME.json).
set -e
cd "$(dirname "$0")/../../.."
source scripts/_venv.sh
OUT=${OUT:-/tmp/seed_steps_ab}
for i in 1 2 3; do
  for way in vmap in_turn; do
    rm -rf "$OUT/${way}_$i"_*
    POSJAX_CPUS=0 posjax train --config=configs/lm.py:encoding=rope,batch_size=8,steps=300 \
      --seeds=0,1,2 --seed_steps=$way --workdir="$OUT/${way}_${i}_{seed}"
  done
done
python experiments/bench/seed_steps_cpu/collect.py ab "$OUT" "experiments/bench/seed_steps_cpu/ab${KIND:-}.json"
# The same on both cores (no POSJAX_CPUS), twice each, after in turn came to step the seeds
# from one thread per core: ab_two_cores.json.
for i in 1 2; do
  for way in vmap in_turn; do
    rm -rf "$OUT/two/${way}_$i"_*
    posjax train --config=configs/lm.py:encoding=rope,batch_size=8,steps=300 --noprogress \
      --seeds=0,1,2 --seed_steps=$way --workdir="$OUT/two/${way}_${i}_{seed}"
  done
done
python experiments/bench/seed_steps_cpu/collect.py ab "$OUT/two" \
  "experiments/bench/seed_steps_cpu/ab_two_cores${KIND:-}.json"
