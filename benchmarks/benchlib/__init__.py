"""The benchmarks' shared pieces; benchmarks/bench_*.py are thin drivers over them (run them
by path: `python benchmarks/bench_train.py`, which puts benchmarks/ on the import path).

    flags      Parser: the flags every benchmark shares (--repeats, --processes, --json,
               --sections, --quick); a script adds only its own
    runs       the device, fresh processes (fresh_result, in_processes), the spread of
               repeats (spread, summarise, tagged) and per-device result files (record)
    steps      the models a benchmark steps: posjax's real train step (Trainee, Ours) and
               x-transformers' (Peer)
    peaks      MFU by the field's convention: the datasheet's dense peak per device kind, the
               model FLOPs of a step (MaxText's and PaLM's counts) and the matmul rate this
               device reaches (chains of products), the second figure beside MFU
    attention  causal attention cases: encodings by label, inputs, jitted forward and
               forward+backward
    sweeps     a whole `posjax sweep` timed in fresh processes: the main job with its seeds
               vmapped against seed by seed, the runs' results, the tables' agreement and
               the ratio of the medians (bench_train.py --sections vmap)

A benchmark times the posjax of the checkout it sits in: a benchmark script imports benchlib
first, which puts that checkout first on the import path, of this process and of the
processes it starts, so a second worktree is not timed with the posjax an editable install
points elsewhere. A process that imported posjax before (`posjax report` reading a study's
values.py) keeps its own.
"""

import os
import sys
from pathlib import Path

_CHECKOUT = str(Path(__file__).resolve().parents[2])
if "posjax" not in sys.modules:
    if _CHECKOUT not in sys.path:
        sys.path.insert(0, _CHECKOUT)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [_CHECKOUT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                       if p and p != _CHECKOUT])
