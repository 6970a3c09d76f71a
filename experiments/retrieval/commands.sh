#!/usr/bin/env bash
# Passkey retrieval (Mohtashami & Jaggi's format without the task line; posjax.data.retrieval)
# trained from scratch at 128..256 bytes, scored per (length, depth) cell at 256..2048 (8x),
# 5 depths x 10 trials, the true key against 4 distractors: 11 encodings x 3 seeds, each
# encoding's seeds in one vmapped program (configs/retrieval.py size=study: 2 layers of
# width 64, 600 steps of 16 rows). Then RoPE's runs with PI (linear), NTK, YaRN and ReRoPE at
# evaluation, no retraining. Then flip-flop (Liu et al.'s FFL(0.8)) for NoPE, RoPE and ALiBi,
# the same size, budget and lengths.
# 2026-11-26: run into /work/studies/ (runs/ below) from the main branch of that day.
set -euo pipefail
cd "$(dirname "$0")/../.."
ENCODINGS=rope+alibi+none+fox+t5+sinusoidal+learned+xpos+fire+path+cope
posjax sweep --config=configs/retrieval.py:task=passkey,size=study,max_factor=8,seeds=3,encodings=$ENCODINGS \
  --workdir=runs/retrieval_passkey --vmap_seeds
for method in linear ntk yarn rerope; do
  for seed in 0 1 2; do
    posjax extrapolate --workdir="runs/retrieval_passkey/runs/encoding=rope,seed=$seed" --rope_scaling=$method
  done
done
python scripts/collect_results.py runs/retrieval_passkey experiments/retrieval/passkey
posjax sweep --config=configs/retrieval.py:task=flipflop,size=study,max_factor=8,seeds=3,encodings=none+rope+alibi \
  --workdir=runs/retrieval_flipflop --vmap_seeds
python scripts/collect_results.py runs/retrieval_flipflop experiments/retrieval/flipflop
posjax report experiments/retrieval
