#!/usr/bin/env bash
# The README's main job, `bash scripts/run.sh`: 7 encodings (causal LM d_model 128, 2 layers,
# 4 heads of 32), 3 seeds each in one vmapped program, 600 steps of 8 x 128 bytes of the
# stdlib corpus (half the rows of the main study, experiments/main_600x16), evaluated at
# 128..2048, one encoding per CPU core, timed whole from an empty compilation cache (the
# main_job section of experiments/bench/vmap_seeds.json), then collected here.
set -euo pipefail
cd "$(dirname "$0")/../.."
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/main_job_default8 \
  --main_job_parallel 2
python scripts/collect_results.py runs/main_job_default8 experiments/main
posjax report experiments/main
# 2026-11-28: run on the AMD EPYC kind (family 25, model 17), 2 cores of a KVM guest, at
# commit 6e65bb8. The same budget ran twice before as `BATCH=8 bash scripts/run.sh`
# (--main_job_batch 8; runs/mj_b8s600, then runs/mj_b8s600_t), with the same perplexities.
# rerun_zen5/: the same command on the AMD EPYC kind of family 26, model 2 (Zen 5), 2 cores of
# a KVM guest, 2026-12-01 at commit b82c67e; values.py compares it with results/.
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/main_job_zen5_rerun \
  --main_job_parallel 2
python scripts/collect_results.py runs/main_job_zen5_rerun experiments/main/rerun_zen5
posjax report experiments/main
