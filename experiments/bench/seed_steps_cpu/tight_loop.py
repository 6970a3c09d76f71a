"""The step alone on both cores, no data pipeline: RoPE at the main job's shape, 3 seeds x 8
rows, stepped in turn (3 lone programs one after another), the same from 2 threads at once,
and vmapped; 3 visits of 20 steps each, the ways alternated. Run from the repository root:

    python experiments/bench/seed_steps_cpu/tight_loop.py

(tight_loop.log: its output, 2026-11-30, AMD EPYC family 25 model 1.)
"""

import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, "benchmarks")
import bench_train as bt  # noqa: E402  (benchmarks/ is not a package)

SEEDS, STEPS, VISITS = 3, 20, 3


def main() -> None:
    lone = [bt.Trainee("rope", 128, 8, size="main", seeds=1) for _ in range(SEEDS)]
    lone_batches = [model.first_batches() for model in lone]
    vmapped = bt.Trainee("rope", 128, 8, size="main", seeds=SEEDS)
    vmapped_batch = vmapped.first_batches()
    for model, batch in [*zip(lone, lone_batches, strict=True), (vmapped, vmapped_batch)]:
        bt._step_visit(model, batch, 3)  # compiled and warm
    pool = ThreadPoolExecutor(2)
    pairs = list(zip(lone, lone_batches, strict=True))

    def in_turn():
        for model, batch in pairs:
            model.step(batch)

    def threads2():
        list(pool.map(lambda pair: pair[0].step(pair[1]), pairs))

    def vmap():
        vmapped.step(vmapped_batch)

    for visit in range(VISITS):
        for name, step in (("in_turn", in_turn), ("threads2", threads2), ("vmap", vmap)):
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(STEPS):
                step()
            for model in [*lone, vmapped]:
                model.wait()
            wall = time.perf_counter() - wall
            print(name, visit, round(1e3 * wall / STEPS, 1), "ms/step",
                  round((time.process_time() - cpu) / wall, 2), "cores", flush=True)


if __name__ == "__main__":
    main()
