#!/usr/bin/env bash
# Install posjax with its test extra into .venv and run the test suite.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
# Bytecode is cached (in the gitignored __pycache__ folders) even where the environment sets
# PYTHONDONTWRITEBYTECODE: otherwise pytest rewrites every test module's asserts and each of
# the suite's posjax processes compiles posjax anew on every run.
unset PYTHONDONTWRITEBYTECODE
# Three workers on two cores: the end-to-end tests wait on the processes they start, and a
# third worker's tests run in those waits. Measured on this project's 2 cores (2026-12-02,
# the host's speed drifting between runs): two runs with 2 workers kept 1.79 and 1.84 cores
# busy on average (896 s, 943 s), two with 3 kept 1.93 (785 s, 795 s).
# Each test file runs whole on one worker (--dist loadfile): its module fixtures (a trained
# run, a sweep) and the programs its tests share are made once, not once per worker its tests
# were spread over. The same day, one run after the other with an empty compilation cache:
# 634 s and 1157 CPU seconds, against 660 s and 1232 spread; with the cache filled (two
# runs an hour apart): 568 s and 1068 CPU seconds, against 710 s and 1366.
# The files go out slowest first (tests/conftest.py's SLOWEST_FILES, --no-loadscope-reorder),
# not most tests first: on 2026-12-02 the workers then ended within 6 s of each other (527 s),
# where test_distributed had run alone for the last 45 s before (553 s).
python -m pytest -n 3 --dist loadfile --no-loadscope-reorder "$@"
