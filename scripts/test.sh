#!/usr/bin/env bash
# Install posjax with its test extra into .venv and run the test suite.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
python -m pytest -n 2 "$@"
