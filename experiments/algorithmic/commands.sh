#!/usr/bin/env bash
# Length generalisation on the copy task: a causal LM (d_model 128, 4 layers, 4 heads of 32)
# trained on copies of 1..20 symbols (alphabet of 256) for 1500 steps of 32 rows, scored at
# sizes 1..40; with positions 0..T-1 and with randomized positions (M = 256, Ruoss et al.);
# 3 seeds per point.
set -euo pipefail
cd "$(dirname "$0")/../.."
ARG=task=copy,steps=1500,seeds=3,encodings=none+t5+alibi+rope+sinusoidal
for k in 0 1 2; do  # seed by seed, so a partial run already has every point
  posjax sweep --config=configs/algorithmic.py:$ARG --workdir=runs/algorithmic --parallel=2 \
    --only="*seed=$k"
done
python scripts/collect_results.py runs/algorithmic experiments/algorithmic
# The probe at twice the budget, for the encodings that had not learned the training sizes
# (2026-11-23, same worktree, into /work/studies/algorithmic_3000; seeds 0 and 1 in that
# session, seed 2 in the next).
ARG=task=copy,steps=3000,seeds=3,encodings=none+t5+sinusoidal
for k in 0 1; do
  posjax sweep --config=configs/algorithmic.py:$ARG --workdir=runs/algorithmic_3000 \
    --parallel=2 --only="*randomize_positions=0,seed=$k"
done
# seed 2 of the probe: a session later, from the worktree at commit bb30fee
posjax sweep --config=configs/algorithmic.py:$ARG --workdir=runs/algorithmic_3000 \
  --parallel=2 --only="*randomize_positions=0,seed=2"
python scripts/collect_results.py runs/algorithmic_3000 experiments/algorithmic/probe_3000
# KERPLE and FIRE with the main study's setup, plain positions (2026-11-23, a later session,
# from a worktree at commit bb30fee, into /work/studies/algorithmic_more): NoPE, T5 and
# sinusoidal stayed below the 90 % bar, so a third encoding that learns the task was needed.
ARG=task=copy,steps=1500,seeds=3,encodings=kerple_log+fire
for k in 0 1 2; do
  posjax sweep --config=configs/algorithmic.py:$ARG --workdir=runs/algorithmic_more \
    --parallel=2 --only="*randomize_positions=0,seed=$k"
done
python scripts/collect_results.py runs/algorithmic_more experiments/algorithmic/kerple_fire
posjax report experiments/algorithmic
# 2026-11-23: run into /work/studies/algorithmic (the paths in results/sweep.json) from a
# worktree at commit 9d46351. Before it, probes on this machine (not kept): RoPE with 64
# symbols stayed at 0 exact match past n = 10 after 2000 steps; with 256 symbols it reached
# 0.88 exact match at n = 20 after 1500 steps. So the alphabet went from 64 to 256.
