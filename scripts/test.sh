#!/usr/bin/env bash
# Install posjax with its test extra into .venv and run the test suite.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
# loadgroup: tests marked with one xdist_group share a worker (and its module fixtures).
python -m pytest -n 2 --dist loadgroup "$@"
