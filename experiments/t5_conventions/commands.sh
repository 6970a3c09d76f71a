#!/usr/bin/env bash
# The main study's T5 point again with x-transformers' T5RelativePositionBias convention: the
# bias times sqrt(head_dim) (scale=sqrt(32): the lm config's heads are 32 wide), its table
# drawn from N(0, 1) (nn.Embedding's default; init_std=1.0) and one table for both layers
# (model.share_position_params=true); beside it the same with posjax's table init
# (init_std=0.02), which keeps the scale and the shared table, and the scale alone (a table
# per layer at posjax's init: per_layer/). Everything else is the main
# study's (configs/lm.py's main size, model.init=posjax), 3 seeds per point trained in one
# vmapped program.
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/lm.py:encoding=t5,scale=5.656854249492381,share_position_params=true,seeds=3 \
    --grid=init_std=0.02,1.0 --workdir=runs/t5_conventions --vmap_seeds
python scripts/collect_results.py runs/t5_conventions experiments/t5_conventions
python experiments/t5_conventions/table_stats.py runs/t5_conventions \
    experiments/t5_conventions/table_stats.json
# the scale alone: a table per layer at posjax's init (per_layer/)
posjax sweep --config=configs/lm.py:encoding=t5,scale=5.656854249492381,init_std=0.02,seeds=3 \
    --workdir=runs/t5_per_layer --vmap_seeds
python scripts/collect_results.py runs/t5_per_layer experiments/t5_conventions/per_layer
python experiments/t5_conventions/table_stats.py runs/t5_per_layer \
    experiments/t5_conventions/per_layer/table_stats.json
# at the main job's 8 rows since 2026-11-28 (rows8/): the two shared-table points again
posjax sweep --config=configs/lm.py:encoding=t5,scale=5.656854249492381,share_position_params=true,batch_size=8,seeds=3 \
    --grid=init_std=0.02,1.0 --workdir=runs/t5_conventions_rows8 --vmap_seeds --parallel=2
python scripts/collect_results.py runs/t5_conventions_rows8 experiments/t5_conventions/rows8
python experiments/t5_conventions/table_stats.py runs/t5_conventions_rows8 \
    experiments/t5_conventions/rows8/table_stats.json
posjax report experiments/t5_conventions
# 2026-11-27: run with runs/ = /work/studies under `nice -n 10` from the checkout at commit
# 2376039 (+ the sweep's --grid, unchanged since), on 2 CPU cores shared with another study
# and a test suite. The init_std=1.0 point was trained first on its own,
#   posjax sweep --config=configs/lm.py:encoding=t5,scale=5.656854249492381,init_std=1.0,share_position_params=true,seeds=3 \
#       --workdir=/work/studies/t5_xt --vmap_seeds
# and its 3 run folders copied into runs/t5_conventions/runs/init_std=1.0,seed=N before the
# grid sweep, which took them as done (the same config). The per_layer sweep ran next, the
# same way (into /work/studies/t5_per_layer).
# rows8/: 2026-11-28 on the AMD EPYC kind (2 cores of a KVM guest) at commit 1332d40, the
# machine otherwise idle.
