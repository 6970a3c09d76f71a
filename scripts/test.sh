#!/usr/bin/env bash
# Install posjax with its test extra into .venv and run the test suite.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
# Bytecode is cached (in the gitignored __pycache__ folders) even where the environment sets
# PYTHONDONTWRITEBYTECODE: otherwise pytest rewrites every test module's asserts and each of
# the suite's posjax processes compiles posjax anew on every run.
unset PYTHONDONTWRITEBYTECODE
python -m pytest -n 2 "$@"
