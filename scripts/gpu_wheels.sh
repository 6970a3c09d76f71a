#!/usr/bin/env bash
# Wheels for a GPU machine that reaches no package registry: what posjax, its tests and the
# x-transformers comparison need beyond a CUDA image that already has jax (with its CUDA
# plugin), flax, optax, orbax-checkpoint, numpy, matplotlib and torch. Run where a registry
# is reachable; carry the folder with the checkout and install with
#     POSJAX_WHEELS=wheels bash scripts/gpu_check.sh
# PYVER: the image's Python (default 3.12). Pure-Python packages and manylinux wheels only,
# except promise, which PyPI has as a source archive: its wheel is built here.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/wheels}"
PYVER="${PYVER:-3.12}"
mkdir -p "$OUT"
PIP="${PIP:-python3 -m pip}"
$PIP download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 -d "$OUT" \
  -r "$ROOT/scripts/gpu_wheels.txt"
$PIP wheel --quiet --no-deps -w "$OUT" promise==2.3
echo "$(ls "$OUT" | wc -l) wheels, $(du -sh "$OUT" | cut -f1), in $OUT"
