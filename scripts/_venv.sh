# Sourced by run.sh and test.sh: create .venv beside the repo and install posjax into it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/pip install --quiet --upgrade pip
fi
# Re-install only when pyproject.toml changed since the last install.
STAMP=.venv/.posjax-installed
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
  .venv/bin/pip install --quiet -e ".[test]"
  touch "$STAMP"
fi
export PATH="$ROOT/.venv/bin:$PATH"
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-$ROOT/.venv/jax-cache}"
