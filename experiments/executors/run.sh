#!/usr/bin/env bash
# The 4-run smoke sweep on the local, Ray and SLURM (submitit local) executors; writes
# results.json, then prints the README's table. A few minutes on 2 CPU cores.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/_venv.sh"
SCRATCH="${SCRATCH:-$(mktemp -d)}"
python experiments/executors/measure.py "$SCRATCH"
