# Sourced by run.sh and test.sh: create .venv beside the repo and install posjax into it.
#   POSJAX_DEVICE=gpu    install the CUDA 13 build of jax too (extra `gpu`, constraints-gpu.txt)
#   POSJAX_WHEELS=DIR    offline: install from the wheels in DIR only (scripts/gpu_wheels.sh
#                        makes them), into a venv that sees the system's packages, for a GPU
#                        image that already has jax with CUDA, flax and optax
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
DEVICE="${POSJAX_DEVICE:-cpu}"
WHEELS="${POSJAX_WHEELS:-}"
case "$DEVICE" in
  cpu) TARGETS=(-e ".[test]"); PINS=(-c constraints.txt) ;;
  gpu) TARGETS=(-e ".[test,gpu]"); PINS=(-c constraints.txt -c constraints-gpu.txt) ;;
  *) echo "POSJAX_DEVICE=$DEVICE: use cpu (default) or gpu" >&2; exit 2 ;;
esac
# The GPU build only where there is a GPU: installing gigabytes of CUDA wheels, then failing,
# would be the first thing a CPU machine saw.
if [ "$DEVICE" = gpu ] && ! ls /dev/nvidia[0-9]* >/dev/null 2>&1 \
    && ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  NO_GPU="this machine has no NVIDIA GPU (no /dev/nvidia0, nvidia-smi lists none), so nothing was installed"
  if [ "$(basename "$0")" = gpu_check.sh ]; then
    echo "scripts/gpu_check.sh checks the GPU path, and $NO_GPU: on a CPU, bash scripts/test.sh runs the tests" >&2
  else
    echo "POSJAX_DEVICE=gpu: $NO_GPU: on a CPU run bash scripts/run.sh or scripts/test.sh without POSJAX_DEVICE" >&2
  fi
  exit 2
fi
if [ -n "$WHEELS" ]; then
  [ -d "$WHEELS" ] || { echo "POSJAX_WHEELS=$WHEELS is not a folder: make it with scripts/gpu_wheels.sh" >&2; exit 2; }
  compgen -G "$WHEELS/*.whl" >/dev/null || { echo "POSJAX_WHEELS=$WHEELS holds no wheels (*.whl): make them with scripts/gpu_wheels.sh" >&2; exit 2; }
  WHEELS="$(cd "$WHEELS" && pwd)"
  # The image's own jax, flax, optax and torch are used as they are: no pins, no index; the
  # test tools without the Ray and SLURM extras (the GPU check runs no scale-out test), and
  # x-transformers, the peer benchmarks/bench_peers.py measures against.
  TARGETS=(-e . pytest hypothesis pytest-xdist x-transformers)
  PINS=(--no-index --find-links "$WHEELS")
  VENV_FLAGS=(--system-site-packages)
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv "${VENV_FLAGS[@]+"${VENV_FLAGS[@]}"}" .venv
  [ -n "$WHEELS" ] || .venv/bin/pip install --quiet --upgrade pip
  if [ -n "$WHEELS" ]; then
    # --system-site-packages sees the base interpreter's packages only; where the image's
    # python is itself a venv (its jax lives there), a .pth file adds that venv's site-packages.
    "$PY" -c "import site; print('\n'.join(site.getsitepackages()))" \
      > "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_image_site.pth"
  fi
fi
# Re-install only when pyproject.toml, the constraints or the device changed since the last
# install. constraints.txt pins every dependency to the versions the tests passed with, so a
# new release cannot break a fresh clone (README, "Two commands", says how to refresh it).
STAMP=.venv/.posjax-installed-$DEVICE${WHEELS:+-wheels}
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ] || [ constraints.txt -nt "$STAMP" ] \
    || [ constraints-gpu.txt -nt "$STAMP" ]; then
  # Explicit, not left to set -e: a caller's `source _venv.sh || exit 2` turns set -e off
  # here, and a failed install must not leave the stamp that skips it next time.
  if ! .venv/bin/pip install --quiet "${PINS[@]}" "${TARGETS[@]}"; then
    echo "pip could not install posjax into .venv (above: why); nothing is marked installed, so the next run tries again" >&2
    rm -f .venv/.posjax-installed*
    exit 2
  fi
  rm -f .venv/.posjax-installed*
  touch "$STAMP"
fi
export PATH="$ROOT/.venv/bin:$PATH"
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-$ROOT/.venv/jax-cache}"
# The posjax command re-executes itself once to run with glibc's huge-page malloc
# (posjax/launch/hostenv.py); set here, the tests' own process has it too, and the commands
# that the tests and run.sh start skip that second start-up.
TUNABLES="$(.venv/bin/python -c 'import os; from posjax.launch import hostenv
print((hostenv.with_huge_pages(os.environ) or {}).get("GLIBC_TUNABLES", ""))')"
[ -z "$TUNABLES" ] || export GLIBC_TUNABLES="$TUNABLES"
