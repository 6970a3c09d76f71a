#!/usr/bin/env bash
# The benchmarks behind README.md's performance section and experiments/bench/README.md.
# Run on a quiet machine: every figure is a ratio measured in one process, but a second job
# on a 2-core machine still moves them. Each section rewrites only its own key of the JSON.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/_venv.sh
# attention kernels: 2 fresh processes x 3 rounds, idle machine (2026-11-23; the day's first
# run, before the prepared sites, is train_runs/attention_before_prepared.json)
python benchmarks/bench_attention.py --processes 2 --repeats 3 --json experiments/bench/attention.json
# input pipeline and host allocators: 2 fresh processes x 3 visits (2026-11-23; jemalloc is
# the distribution's libjemalloc2, measured only where it is installed)
python benchmarks/bench_train.py --sections pipeline,allocator --processes 2 --repeats 3 \
  --json experiments/bench/train.json
# compilation: 5 rounds over the cache settings, every command a fresh process (2026-11-23)
python benchmarks/bench_train.py --sections compile --processes 5 --json experiments/bench/train.json
# the speed table: 2 fresh processes x 3 visits (2026-11-23)
python benchmarks/bench_train.py --sections speed --processes 2 --repeats 3 \
  --json experiments/bench/train.json
# attention with the sites prepared once (2026-11-23)
python benchmarks/bench_attention.py --encodings none,rope,t5,kerple_log,fire,tupe,shaw,xl,deberta,rerope \
  --lengths 4096,8192 --dense_max 2048 --memory_lengths 1024 --long_length 4096 \
  --processes 2 --repeats 3 --json experiments/bench/attention_prepared.json
# against x-transformers (needs the bench extra: pip install -e '.[bench]'), RoPE apply,
# and 128k-token evaluation (2026-11-23)
python benchmarks/bench_peers.py --sections train,rope --processes 2 --repeats 3 \
  --json experiments/bench/peers.json
python benchmarks/bench_peers.py --sections long --json experiments/bench/peers.json
# where the time goes in the cases that miss a target: profiler traces (2026-11-24, idle)
python benchmarks/bench_profile.py --repeats 3 --calls 2 --processes 2 \
  --json experiments/bench/profile.json
# the main job's sweep (7 encodings x 3 seeds) with each encoding's seeds vmapped against the
# same sweep seed by seed: 3 repeats of each, alternated, each a fresh sweep (2026-11-26, idle)
python benchmarks/bench_train.py --sections vmap --repeats 3 --vmap_json experiments/bench/vmap_seeds.json
# the step alone: the main job's model stepped alone against 3 seeds vmapped, in one process
python benchmarks/bench_train.py --sections vmap_step --steps 20 --repeats 5 \
  --vmap_json experiments/bench/vmap_seeds.json
# how far rounding alone carries a run in 600 steps (2026-11-26): the main job's NoPE seed 1
# alone, vmapped with seeds 0 and 2, and alone with XLA:CPU's YNNPACK fusions off (other
# kernels, other rounding); the run files are in train_runs/vmap_rounding_none/
posjax train --config=configs/lm.py:study=main,encoding=none,seed=1 --workdir=R/alone \
  --noprogress --config.train.log_every_steps=1 --extrapolate
posjax train --config=configs/lm.py:study=main,encoding=none --workdir='R/v{seed}' \
  --seeds=0,1,2 --noprogress --config.train.log_every_steps=1 --extrapolate
XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type= posjax train \
  --config=configs/lm.py:study=main,encoding=none,seed=1 --workdir=R/alone_no_ynn \
  --noprogress --config.train.log_every_steps=1 --extrapolate
# The main_job commands below ran when run.sh trained 16 rows by default: to repeat them now,
# add --main_job_batch 16 (run.sh trains 8 since 2026-11-28; the 8-row timings are in
# experiments/main/commands.sh and its git history as experiments/main_600x8).
# the main job whole, per kind of CPU (2026-11-27, Intel Xeon family 6 model 207): one
# encoding per core (run.sh's default on 2 cores), one at a time on both cores, and one seed
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_p2 \
  --vmap_json experiments/bench/vmap_seeds.json
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_p1 --main_job_parallel 1 \
  --vmap_json experiments/bench/vmap_seeds.json
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_p2_s1 --main_job_seeds 1 \
  --vmap_json experiments/bench/vmap_seeds.json
# the same kind, later that day: 250 steps per run (STEPS=250; experiments/main_250), three
# timed runs, then the study's 600 steps again, after vmapped programs came to compile once
for run in mj_s250 mj_s250b mj_s250c; do
  python benchmarks/bench_train.py --sections main_job --main_job_dir runs/$run \
    --main_job_parallel 2 --main_job_steps 250
done
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_p2b --main_job_parallel 2
# the same kind: the step alone (lone and 3 seeds vmapped; re-run on 2026-11-27 when each
# visit came to time the achievable matmul too), and x-transformers at the main job's model
python benchmarks/bench_train.py --sections vmap_step --steps 20 --repeats 5 \
  --vmap_json experiments/bench/vmap_seeds.json
python benchmarks/bench_peers.py --sections train --size main --seq_len 128 --batch_size 16 \
  --steps 10 --processes 2 --repeats 3 --json experiments/bench/peers_main.json
# where posjax's step of the main job's model goes on this kind: profiler traces
python benchmarks/bench_profile.py --sections train --size main --seq_len 128 --batch_size 16 \
  --train_encodings none,rope,alibi,t5 --repeats 3 --processes 2 \
  --json experiments/bench/profile_main.json
python benchmarks/bench_profile.py --sections peer --size main --seq_len 128 --batch_size 16 \
  --repeats 3 --processes 2 --json experiments/bench/profile_main.json
# the same kind (2026-11-27, second session): the main job's RoPE step under each XLA:CPU
# flag on one core, and XLA's defaults on one core and on both; a fresh pinned process per
# setting, 2 rounds alternating the settings, 3 visits of 5 steps each
python benchmarks/bench_train.py --sections cpu_flags --processes 2 --repeats 3 --steps 5 \
  --vmap_json experiments/bench/vmap_seeds.json
# the same kind: the main job's sweep vmapped against seed by seed with one run per core, as
# run.sh runs it (one sweep of each mode, alternated)
python benchmarks/bench_train.py --sections vmap --repeats 1 --vmap_parallel 2 \
  --vmap_json experiments/bench/vmap_seeds.json
# the AMD EPYC kind (family 25, model 17), 2026-11-28: the main job whole (one encoding per
# core), x-transformers at the main job's model, XLA:CPU's flags, the step alone
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_amd_p2 \
  --vmap_json experiments/bench/vmap_seeds.json
python benchmarks/bench_peers.py --sections train --size main --seq_len 128 --batch_size 16 \
  --steps 10 --processes 2 --repeats 3 --json experiments/bench/peers_main.json
python benchmarks/bench_train.py --sections cpu_flags --processes 2 --repeats 3 --steps 5 \
  --vmap_json experiments/bench/vmap_seeds.json
python benchmarks/bench_train.py --sections vmap_step --steps 20 --repeats 5 \
  --vmap_json experiments/bench/vmap_seeds.json
# the same kind: the projections multiplied as one matrix product against nnx.LinearGeneral's
# own product, each layout in its own process pinned to one core (as the main job trains each
# encoding), 3 rounds, at the main study's 16 rows; then the main job whole again with the one
# matrix product
POSJAX_CPUS=0 python benchmarks/bench_train.py --sections projections --processes 3 --steps 10 \
  --repeats 3 --main_batch 16 --vmap_json experiments/bench/vmap_seeds.json
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_amd_matrix \
  --vmap_json experiments/bench/vmap_seeds.json
# the same kind after the projections change: x-transformers at the main job's model and the
# step alone again (each replaces this kind's earlier section)
python benchmarks/bench_peers.py --sections train --size main --seq_len 128 --batch_size 16 \
  --steps 10 --processes 2 --repeats 3 --json experiments/bench/peers_main.json
python benchmarks/bench_train.py --sections vmap_step --steps 20 --repeats 5 \
  --vmap_json experiments/bench/vmap_seeds.json
# 2026-11-28, the AMD EPYC kind again: the main job's sweep vmapped against seed by seed, one
# run per core as run.sh runs it (1 sweep of each mode, nothing else running)
python benchmarks/bench_train.py --sections vmap --repeats 1 --vmap_parallel 2 \
  --vmap_json experiments/bench/vmap_seeds.json
# the same kind: posjax against x-transformers at the main job's model on one core each (the
# core and torch thread each run of the main job has), section train_one_core; its encodings
# include t5_shared, posjax's T5 with one table for all layers as x-transformers' T5 has
POSJAX_CPUS=0 python benchmarks/bench_peers.py --sections train --size main --seq_len 128 \
  --batch_size 16 --threads 1 --steps 10 --processes 2 --repeats 3 \
  --json experiments/bench/peers_main.json
# the same kind, the same day, after run.sh went to 8 rows: the same comparison at the main
# job's 128 x 8 (peers_main_b8.json)
POSJAX_CPUS=0 python benchmarks/bench_peers.py --sections train --size main --seq_len 128 \
  --batch_size 8 --threads 1 --steps 10 --processes 2 --repeats 3 \
  --encodings rope,alibi,t5,t5_shared --json experiments/bench/peers_main_b8.json
# and on both cores in one process (2 torch threads; section train of the same file)
python benchmarks/bench_peers.py --sections train --size main --seq_len 128 --batch_size 8 \
  --threads 2 --steps 10 --processes 2 --repeats 3 --encodings rope,alibi,t5,t5_shared \
  --json experiments/bench/peers_main_b8.json
# the same kind: token correctness as the first class at the maximum against jnp.argmax, each
# way in its own process pinned to one core, 3 rounds, at the main job's 8 rows (the first run,
# disturbed, is train_runs/correctness_disturbed.json)
POSJAX_CPUS=0 python benchmarks/bench_train.py --sections correctness --processes 3 --steps 10 \
  --repeats 3 --vmap_json experiments/bench/vmap_seeds.json
# the same kind, after token correctness stopped calling argmax: the main job whole, as
# run.sh runs by default (600 steps of 8 rows), three times in a row
for i in 1 2 3; do
  python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_b8_argmax$i \
    --main_job_parallel 2 --vmap_json experiments/bench/vmap_seeds.json
done
# 2026-11-29, the older AMD EPYC kind (family 25, model 1: Zen 3, no AVX-512), idle machine:
# the main job whole at run.sh's defaults, three times in a row
for i in 1 2 3; do
  python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_zen3_$i \
    --main_job_parallel 2 --vmap_json experiments/bench/vmap_seeds.json
done
# the same kind: posjax against x-transformers at the main job's 128 x 8, on one core each,
# then on both cores in one process (torch 2.13.0+cpu, x-transformers 2.31.10)
POSJAX_CPUS=0 python benchmarks/bench_peers.py --sections train --size main --seq_len 128 \
  --batch_size 8 --threads 1 --steps 10 --processes 2 --repeats 3 \
  --encodings rope,alibi,t5,t5_shared --json experiments/bench/peers_main_b8.json
python benchmarks/bench_peers.py --sections train --size main --seq_len 128 --batch_size 8 \
  --threads 2 --steps 10 --processes 2 --repeats 3 --encodings rope,alibi,t5,t5_shared \
  --json experiments/bench/peers_main_b8.json
# the older AMD EPYC kind (family 25, model 1), 2026-11-29: XLA:CPU's flags on the main job's
# RoPE step, one core each
python benchmarks/bench_train.py --sections cpu_flags --processes 2 --repeats 3 --steps 5 \
  --vmap_json experiments/bench/vmap_seeds.json
# the same kind: the step alone, lone against 3 vmapped seeds, on both cores
python benchmarks/bench_train.py --sections vmap_step --steps 20 --repeats 5 \
  --vmap_json experiments/bench/vmap_seeds.json
# the same kind: the main study's sweep vmapped against seed by seed, one run per core
python benchmarks/bench_train.py --sections vmap --repeats 1 --vmap_parallel 2 \
  --vmap_json experiments/bench/vmap_seeds.json
# the same kind, a later session: the main job whole with one encoding at a time on both
# cores (run.sh's PARALLEL=1), against the three runs above with one per core
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_zen3_p1 \
  --main_job_parallel 1 --vmap_json experiments/bench/vmap_seeds.json
# the same kind, 2026-12-03 at commit 4ee8c2a (idle machine): the main job whole at run.sh's
# defaults, then with each encoding's seeds stepped in turn (SEED_STEPS=in_turn)
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mjz3_1 \
  --main_job_parallel 2 --vmap_json experiments/bench/vmap_seeds.json
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mjz3_2_in_turn \
  --main_job_parallel 2 --main_job_seed_steps in_turn --vmap_json experiments/bench/vmap_seeds.json
# the same kind, 2026-12-03 evening at commit 4078df1 (idle machine): the main job whole at
# run.sh's defaults once more
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mjz3_dec3_pm \
  --main_job_parallel 2 --vmap_json experiments/bench/vmap_seeds.json
# the same kind, 2026-12-04 at commit dbad5ea (idle machine): twice more in a row
for i in 1 2; do
  python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mjz3_dec4_$i \
    --main_job_parallel 2 --vmap_json experiments/bench/vmap_seeds.json
done
# 2026-11-30, the AMD EPYC kind of family 26, model 2 (Zen 5, AVX-512), idle machine: the main
# job whole at run.sh's defaults, three times in a row, then posjax against x-transformers at
# the main job's 128 x 8 on one core each and on both cores (torch 2.13.0+cpu,
# x-transformers 2.31.10)
for i in 1 2 3; do
  python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_zen5_$i \
    --main_job_parallel 2 --vmap_json experiments/bench/vmap_seeds.json
done
POSJAX_CPUS=0 python benchmarks/bench_peers.py --sections train --size main --seq_len 128 \
  --batch_size 8 --threads 1 --steps 10 --processes 2 --repeats 3 \
  --encodings rope,alibi,t5,t5_shared --json experiments/bench/peers_main_b8.json
python benchmarks/bench_peers.py --sections train --size main --seq_len 128 --batch_size 8 \
  --threads 2 --steps 10 --processes 2 --repeats 3 --encodings rope,alibi,t5,t5_shared \
  --json experiments/bench/peers_main_b8.json
# the same kind: the step alone (lone against 3 vmapped seeds, both cores), XLA:CPU's flags on
# the main job's RoPE step (one core each), the main study's sweep vmapped against seed by seed
python benchmarks/bench_train.py --sections vmap_step --steps 20 --repeats 5 \
  --vmap_json experiments/bench/vmap_seeds.json
python benchmarks/bench_train.py --sections cpu_flags --processes 2 --repeats 3 --steps 5 \
  --vmap_json experiments/bench/vmap_seeds.json
python benchmarks/bench_train.py --sections vmap --repeats 1 --vmap_parallel 2 \
  --vmap_json experiments/bench/vmap_seeds.json
# the same kind: the main job whole with each encoding's seeds stepped in turn (run.sh's
# SEED_STEPS=in_turn), twice, against the three vmapped runs above
for i in 1 2; do
  python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_zen5_in_turn$i \
    --main_job_parallel 2 --main_job_seed_steps in_turn --vmap_json experiments/bench/vmap_seeds.json
done
# the same kind: seeds stepped in turn against vmapped in posjax train's loop, on one core and
# on both (seed_steps_cpu/ab-AuthenticAMD-26-2.json, ab_two_cores-AuthenticAMD-26-2.json)
KIND=-AuthenticAMD-26-2 bash experiments/bench/seed_steps_cpu/ab.sh
# the same kind: the main job whole with one encoding at a time on both cores (PARALLEL=1)
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_zen5_p1 \
  --main_job_parallel 1 --vmap_json experiments/bench/vmap_seeds.json
# 2026-12-02, an Intel Xeon reporting family 6, model 167 (AVX-512, AMX), idle machine: the
# main job whole at run.sh's defaults, three times in a row; posjax against x-transformers at
# the main job's 128 x 8 on one core each and on both cores (torch 2.13.0+cpu,
# x-transformers 2.31.10); the step alone; XLA:CPU's flags; the main study's sweep vmapped
# against seed by seed, one run per core
for i in 1 2 3; do
  python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_xeon167_$i \
    --main_job_parallel 2 --vmap_json experiments/bench/vmap_seeds.json
done
POSJAX_CPUS=0 python benchmarks/bench_peers.py --sections train --size main --seq_len 128 \
  --batch_size 8 --threads 1 --steps 10 --processes 2 --repeats 3 \
  --encodings rope,alibi,t5,t5_shared --json experiments/bench/peers_main_b8.json
python benchmarks/bench_peers.py --sections train --size main --seq_len 128 --batch_size 8 \
  --threads 2 --steps 10 --processes 2 --repeats 3 --encodings rope,alibi,t5,t5_shared \
  --json experiments/bench/peers_main_b8.json
python benchmarks/bench_train.py --sections vmap_step --steps 20 --repeats 5 \
  --vmap_json experiments/bench/vmap_seeds.json
python benchmarks/bench_train.py --sections cpu_flags --processes 2 --repeats 3 --steps 5 \
  --vmap_json experiments/bench/vmap_seeds.json
python benchmarks/bench_train.py --sections vmap --repeats 1 --vmap_parallel 2 \
  --vmap_json experiments/bench/vmap_seeds.json
# the same kind: the main job whole with each encoding's seeds stepped in turn (run.sh's
# SEED_STEPS=in_turn), twice, against the three vmapped runs above
for i in 1 2; do
  python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_xeon167_in_turn$i \
    --main_job_parallel 2 --main_job_seed_steps in_turn --vmap_json experiments/bench/vmap_seeds.json
done
# the same kind, a later session (2026-12-02, at 67a4b18): a third run of it
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_xeon167_in_turn3 \
  --main_job_parallel 2 --main_job_seed_steps in_turn --vmap_json experiments/bench/vmap_seeds.json
# then the two ways alternated, twice (the VM ran slower by then; blocks of one way after the
# other had let its drift decide the comparison)
for i in 1 2; do
  for way in vmap in_turn; do
    python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_xeon167_alt${i}_$way \
      --main_job_parallel 2 --main_job_seed_steps $way --vmap_json experiments/bench/vmap_seeds.json
  done
done
# the same kind: seeds stepped in turn against vmapped in posjax train's loop, on one core and
# on both (seed_steps_cpu/ab-GenuineIntel-6-167.json, ab_two_cores-GenuineIntel-6-167.json)
KIND=-GenuineIntel-6-167 bash experiments/bench/seed_steps_cpu/ab.sh
# 2026-12-03, the Intel Xeon of family 6, model 167: the MLP's gelu recomputed in the backward
# pass (posjax.models.layers.gelu) against jax.nn.gelu with its arrays saved, each way in its
# own process pinned to one core, 3 rounds, at the main job's 8 rows
POSJAX_CPUS=0 python benchmarks/bench_train.py --sections activation --processes 3 --steps 10 \
  --repeats 3 --vmap_json experiments/bench/vmap_seeds.json
# the same kind: the main job's RoPE and T5 runs (3 seeds vmapped, 600 steps of 8 rows, scored)
# trained with gelu saved (a worktree of 9f6fc28 at /tmp/old, on core 0) beside gelu
# recomputed (this commit, on core 1), their metrics.jsonl and extrapolation.json kept in
# train_runs/gelu_rounding/{saved,recomputed}/
for enc in rope t5; do
  (cd /tmp/old && PYTHONPATH=/tmp/old POSJAX_CPUS=0 python -m posjax train \
    --config=configs/lm.py:encoding=$enc,batch_size=8 --seeds=0,1,2 \
    --workdir="/tmp/cmp/old/$enc,seed={seed}" --extrapolate) &
  POSJAX_CPUS=1 python -m posjax train --config=configs/lm.py:encoding=$enc,batch_size=8 \
    --seeds=0,1,2 --workdir="/tmp/cmp/new/$enc,seed={seed}" --extrapolate
  wait
done
# 2026-12-03: one more timed main job on the Intel Xeon of family 6, model 167 (commit 748d64b),
# checking the main job's table after that day's changes:
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj167_s20_1 \
  --main_job_parallel 2 --main_job_seed_steps vmap --vmap_json experiments/bench/vmap_seeds.json
# 2026-12-04, an AMD EPYC reporting family 23, model 49 (Zen 2, AVX2, no AVX-512), idle
# machine, at 7ed7c9b: the main job whole at run.sh's defaults and with each encoding's seeds
# stepped in turn, alternated (vmap, in_turn, vmap, in_turn); then posjax against
# x-transformers at the main job's 128 x 8 on one core each (torch 2.13.0+cpu,
# x-transformers 2.31.10)
for i in 1 2; do
  for way in vmap in_turn; do
    python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj2349_${i}_$way \
      --main_job_parallel 2 --main_job_seed_steps $way --vmap_json experiments/bench/vmap_seeds.json
  done
done
POSJAX_CPUS=0 python benchmarks/bench_peers.py --sections train --size main --seq_len 128 \
  --batch_size 8 --threads 1 --steps 10 --processes 2 --repeats 3 \
  --encodings rope,alibi,t5,t5_shared --json experiments/bench/peers_main_b8.json
# the same kind, the same day, the machine idle: XLA:CPU's flags on the main job's RoPE step
python benchmarks/bench_train.py --sections cpu_flags --processes 2 --repeats 3 --steps 5 \
  --vmap_json experiments/bench/vmap_seeds.json
# 2026-12-04 evening, the AMD EPYC of family 23, model 49 (Zen 2), at ad632a9, idle otherwise:
# seeds in turn against vmapped in the trainer's loop, one core and two
KIND=-AuthenticAMD-23-49 bash experiments/bench/seed_steps_cpu/ab.sh
# 2026-12-05, an Intel Xeon reporting family 6, model 207 (AVX-512, AMX), idle machine, at
# f4371a8: the main job whole at run.sh's defaults and with each encoding's seeds stepped in
# turn, alternated, three rounds; then posjax against x-transformers at the main job's 128 x 8
# on one core each and on both cores (torch 2.13.0+cpu, x-transformers 2.31.10)
for i in 1 2 3; do
  for way in vmap in_turn; do
    python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj207_${i}_$way \
      --main_job_parallel 2 --main_job_seed_steps $way --vmap_json experiments/bench/vmap_seeds.json
  done
done
POSJAX_CPUS=0 python benchmarks/bench_peers.py --sections train --size main --seq_len 128 \
  --batch_size 8 --threads 1 --steps 10 --processes 2 --repeats 3 \
  --encodings rope,alibi,t5,t5_shared --json experiments/bench/peers_main_b8.json
python benchmarks/bench_peers.py --sections train --size main --seq_len 128 --batch_size 8 \
  --threads 2 --steps 10 --processes 2 --repeats 3 --encodings rope,alibi,t5,t5_shared \
  --json experiments/bench/peers_main_b8.json
# the same kind, at once after: the two-core command again with torch's OpenMP threads
# sleeping while they wait (recorded as train_omp_passive)
OMP_WAIT_POLICY=passive python benchmarks/bench_peers.py --sections train --size main \
  --seq_len 128 --batch_size 8 --threads 2 --steps 10 --processes 2 --repeats 3 \
  --encodings rope,alibi,t5,t5_shared --json experiments/bench/peers_main_b8.json
