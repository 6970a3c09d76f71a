"""One row of positions for the batch (train_step's `shared_positions`) against each row's own,
on this machine's CPU: configs/lm.py size=base, seq_len 512, batch 8, packed documents.

    python experiments/bench/shared_positions_cpu/ab.py [--encodings t5,alibi,kerple_log]
        [--visits 8] [--json experiments/bench/shared_positions_cpu/ab.json]

Both steps run in one process from copies of one state on one batch; a visit times 2 steps of
each, the order alternating between visits. Written: every visit's seconds per step and their
ratio (shared over per-row; above 1 = the shared step is slower). The platform gate that keeps
the CPU on each row's positions (posjax.train.steps.SHARED_POSITIONS_PLATFORMS) is lifted
here, so both are the real train step.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from posjax import fileio
from posjax.train.steps import step_options

# benchlib, the benchmarks' shared pieces, lives outside the package
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from benchlib.runs import describe, device, load
from benchlib.steps import Trainee
from posjax.train import steps


def visits(encoding: str, count: int) -> list[dict]:
    trainee = Trainee(encoding, 512, 8, size="base")
    batch = trainee.first_batches()
    options = step_options(trainee.experiment, trainee.model.graphdef, trainee.tx)
    assert options["shared_positions"], f"{encoding}: the config does not allow one row"
    states = {shared: jax.tree.map(jnp.copy, trainee.state) for shared in (True, False)}

    def run(shared: bool) -> None:
        states[shared], _ = steps.train_step(states[shared], trainee.rest, batch,
                                             **{**options, "shared_positions": shared})

    for shared in (True, False):
        run(shared)
        jax.block_until_ready(states[shared])
    out = []
    for visit in range(count):
        seconds = {}
        for shared in (True, False) if visit % 2 == 0 else (False, True):
            start = time.perf_counter()
            for _ in range(2):
                run(shared)
            jax.block_until_ready(states[shared])
            seconds["shared" if shared else "per_row"] = (time.perf_counter() - start) / 2
        out.append({**seconds, "ratio": seconds["shared"] / seconds["per_row"]})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--encodings", default="t5,alibi,kerple_log")
    p.add_argument("--visits", type=int, default=8)
    p.add_argument("--json", default="experiments/bench/shared_positions_cpu/ab.json")
    args = p.parse_args()
    steps.SHARED_POSITIONS_PLATFORMS = frozenset({jax.default_backend()})
    print(describe(), flush=True)
    result = {"device": device(), "load": load(), "seq_len": 512, "batch_size": 8, "size": "base",
              "packing": "documents", "rows": {}}
    for encoding in args.encodings.split(","):
        rows = visits(encoding, args.visits)
        result["rows"][encoding] = rows
        ratios = [v["ratio"] for v in rows]
        print(f"{encoding}: shared / per-row step time {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f}) over {len(rows)} visits", flush=True)
    fileio.write_json(args.json, result)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
