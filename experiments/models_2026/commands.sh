#!/usr/bin/env bash
# What the models of 2025-26 use around and instead of positions, in the budget of
# experiments/encodings_2025 (causal LM d_model 128, 2 layers, 4 heads of 32, 600 steps of
# 16 x 128 bytes of the stdlib corpus, scored at 128..2048, i.e. to 16x): NoPE and RoPE, RoPE
# with Qiu et al.'s output gate (headwise, elementwise), with GPT-OSS's sink logit, with
# QK-norm; PoPE, RoPE++ and FoPE; a Gated DeltaNet hybrid (1:1 with a NoPE softmax layer: the
# budget has 2 layers); DroPE (RoPE, then NoPE for the last 60 steps); local/global layers:
# SWAN-GPT-style (RoPE with a window of 32, then NoPE) and Gemma-3-style (theta 1e4 with a
# window of 32, then theta 1e6); RNoPE (RoPE, then NoPE) with and without Llama 4's NoPE-layer
# query temperature (iRoPE). 3 seeds each, vmapped.
# 2026-11-27: run into /work/studies/ (runs/ below) from the main branch of that day: the
# first 10 points by the command below, the 3 added later (drope, the two window schedules)
# by the same command with --only='*drope*', '*window=32)+none*' and '*rope(theta=1e6)*';
# the gdn+none point hung at step 11 (jaxlib's CPU LAPACK triangular solve deadlocked XLA's
# 2-thread pool; the chunked rule now inverts by matmuls) and was re-run by the same command
# with --only='*gdn*'. Passkey for the hybrid: trained on the task in experiments/retrieval's
# budget (its passkey runs are the all-softmax baselines, the same config), into passkey/.
# MQAR in the same budget for NoPE, RoPE (mqar/) and the hybrid (mqar_hybrid/). DroPE with its
# own recalibration schedule (drope_restart=True) was added later: the first command with
# --only='*drope_restart*'.
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/lm.py:study=models_2026,seeds=3 --workdir=runs/models_2026 --vmap_seeds
posjax sweep --config=configs/retrieval.py:task=passkey,size=study,max_factor=8,seeds=3,encoding=none \
  --grid=layer_pattern=gdn+none --workdir=runs/models_2026_passkey --vmap_seeds
posjax sweep --config=configs/retrieval.py:task=mqar,size=study,max_factor=8,seeds=3,encodings=none+rope \
  --workdir=runs/models_2026_mqar_softmax --vmap_seeds
posjax sweep --config=configs/retrieval.py:task=mqar,size=study,max_factor=8,seeds=3,encoding=none \
  --grid=layer_pattern=gdn+none --workdir=runs/models_2026_mqar_hybrid --vmap_seeds
# 2026-12-03: the DroPE points re-run (every stage its own data order, commit 0a3ec3a) by the
# first command with --only='*drope*'; the Gemma-3-style point re-run (commit 63b13f2) by it
# with --only="$G*", then scored with RoPE scaling on both layers and on the global one alone:
G='encoding=rope,layer_pattern=rope(theta=1e4,window=32)+rope(theta=1e6)'
for k in 0 1 2; do
  for method in linear linear+global_only yarn yarn+global_only; do
    posjax extrapolate --workdir="runs/models_2026/runs/$G,seed=$k" --rope_scaling=$method
  done
done
# 2026-12-03: the two RNoPE points (without and with Llama 4's NoPE-layer temperature) added
# at commit c4e9c8a from a worktree into /work/studies/models_2026, by the first command with
# --only='*layer_pattern=rope+none,*' and then --only='*temperature_floor*'
python scripts/collect_results.py runs/models_2026 experiments/models_2026
# irope/: Llama 4's 3:1 RoPE/NoPE schedule, without and with its NoPE layer's query
# temperature, 3 seeds, 2026-12-03 from a worktree at commit b4e1c3d into
# /work/studies/irope_3to1:
posjax sweep --config=configs/lm.py:encoding=rope,num_layers=4,seeds=3 \
  "--grid=layer_pattern=rope*3+none,rope*3+rope(p=0,temperature_floor=128)" \
  --workdir=runs/irope_3to1 --vmap_seeds
python scripts/collect_results.py runs/irope_3to1 experiments/models_2026/irope
# irope_chunked/: the same two schedules with Llama 4's chunked attention on the RoPE layers
# (chunks of 32), 3 seeds, 2026-12-03 from a worktree at commit 61162c5 into
# /tmp/studies/irope_chunked, on an AMD EPYC of family 25, model 1 (2 cores):
posjax sweep --config=configs/lm.py:encoding=rope,num_layers=4,seeds=3 \
  "--grid=layer_pattern=rope(attention_chunk=32)*3+none,rope(attention_chunk=32)*3+rope(p=0,temperature_floor=128)" \
  --workdir=runs/irope_chunked --vmap_seeds --parallel=2
python scripts/collect_results.py runs/irope_chunked experiments/models_2026/irope_chunked
python scripts/collect_results.py runs/models_2026_passkey experiments/models_2026/passkey
python scripts/collect_results.py runs/models_2026_mqar_softmax experiments/models_2026/mqar
python scripts/collect_results.py runs/models_2026_mqar_hybrid experiments/models_2026/mqar_hybrid
# the three MQAR models in one picture, outside mqar/ (which report draws from its own runs)
posjax plot experiments/models_2026/mqar/results experiments/models_2026/mqar_hybrid/results \
  --output=experiments/models_2026/mqar_all
posjax report experiments/models_2026
# gemma3/: Gemma 3's own schedule and blocks (arch=gemma3, window 32), 3 seeds, 2026-12-03 from
# a worktree at commit 553e612 into /work/studies/gemma3_scaling, scored with each scaling:
# (arch=gemma3 has normed each sublayer's output since; post_norm=false in the arg rebuilds
# these blocks at a later commit)
posjax sweep --config=configs/lm.py:arch=gemma3,window=32,encoding=rope,seeds=3 \
  --workdir=runs/gemma3_scaling --vmap_seeds
for k in 0 1 2; do
  for method in linear linear+global_only yarn yarn+global_only; do
    posjax extrapolate --workdir="runs/gemma3_scaling/runs/encoding=rope,seed=$k" --rope_scaling=$method
  done
done
python scripts/collect_results.py runs/gemma3_scaling experiments/models_2026/gemma3
