#!/usr/bin/env bash
# RoFormer's Table 5 set-up at CPU size: pretrain an MLM encoder with the six-stage length
# schedule (configs/mlm.py, lengths / 8) for RoPE, a learned absolute table (BERT's) and
# sinusoidal; fine-tune each on doc_match at 64 and 128 tokens (RoFormer's 512 and 1024 / 8),
# 3 seeds vmapped; the same classifier with no pretraining as the baseline.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=runs/roformer_ft
for e in rope learned sinusoidal; do
  posjax train --config=configs/mlm.py:encoding=$e --workdir=$R/mlm_$e --noprogress
  posjax sweep --config=configs/finetune.py:pretrained=$R/mlm_$e,seeds=3 --workdir=$R/ft_$e \
    --vmap_seeds
done
posjax sweep --config=configs/finetune.py:seeds=3 --workdir=$R/ft_scratch --vmap_seeds
python experiments/roformer_finetune/collect.py $R experiments/roformer_finetune
posjax report experiments/roformer_finetune
# 2026-11-27: run into /work/studies/roformer_ft (scripts as above, niced, beside other work) from commit 244b624 on; collected by collect.py.
# schedule/: RoPE pretrained with the six-stage schedule and at one length (schedule=single:
# 64 tokens, the same tokens), each fine-tuned as above; 2026-12-01 on the AMD EPYC kind of
# family 26, model 2, from commit 90dfcb5 on (each run's config.json names its commit; the
# README lists them), nothing else of the study re-run.
S=runs/roformer_ft_schedule
for s in roformer single; do
  posjax train --config=configs/mlm.py:encoding=rope,schedule=$s --workdir=$S/mlm_$s --noprogress
  posjax sweep --config=configs/finetune.py:pretrained=$S/mlm_$s,seeds=3 --workdir=$S/ft_$s \
    --vmap_seeds
done
# two more pretraining seeds per arm (the same day, commits 7496bca and f3fd441, which
# changes only a printed line of the train header)
for seed in 1 2; do
  for s in roformer single; do
    posjax train --config=configs/mlm.py:encoding=rope,schedule=$s,seed=$seed \
      --workdir=$S/mlm_${s}_seed$seed --noprogress
    posjax sweep --config=configs/finetune.py:pretrained=$S/mlm_${s}_seed$seed,seeds=3 \
      --workdir=$S/ft_${s}_seed$seed --vmap_seeds
  done
done
python experiments/roformer_finetune/collect.py $S experiments/roformer_finetune/schedule
posjax report experiments/roformer_finetune
# 2026-12-03: every pretraining with the schedule re-run, with its fine-tunes, from a worktree at
# commit 0a3ec3a (every stage of every seed its own data order) into /work/studies/roformer_ft
# and /work/studies/roformer_ft_schedule (R and S above): mlm_rope, mlm_learned, mlm_sinusoidal
# and mlm_roformer (seeds 0, 1, 2) with their ft_ sweeps, by the commands above; the runs of one
# stage (ft_scratch, mlm_single*, ft_single*) kept as they were, collected by collect.py.
