# Sourced by run.sh and test.sh: create .venv beside the repo and install posjax into it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/pip install --quiet --upgrade pip
fi
# Re-install only when pyproject.toml or constraints.txt changed since the last install.
# constraints.txt pins every dependency to the versions the tests passed with, so a new
# release cannot break a fresh clone (README, "Two commands", says how to refresh it).
STAMP=.venv/.posjax-installed
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ] || [ constraints.txt -nt "$STAMP" ]; then
  .venv/bin/pip install --quiet -c constraints.txt -e ".[test]"
  touch "$STAMP"
fi
export PATH="$ROOT/.venv/bin:$PATH"
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-$ROOT/.venv/jax-cache}"
