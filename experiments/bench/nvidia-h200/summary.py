"""The tables of README.md, from the raw files `scripts/gpu_check.sh` wrote:

    python experiments/bench/nvidia-h200/summary.py            # the first session's (here)
    python experiments/bench/nvidia-h200/summary.py call3_start   # one call's folder

Every figure is the median over the repeats in the raw file, with (min-max) beside it; a
ratio between encodings or against x-transformers is taken visit by visit (the same repeat,
the same process) before the median. A target is met only where the median meets it.
"""

import json
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FOLDER = HERE / (sys.argv[1] if len(sys.argv) > 1 else ".")
BIAS_TARGET, MFU_TARGET, PEERS_TARGET = 0.8, 0.40, 1.5


def spread(values, fmt="{:.2f}") -> str:
    values = list(values)
    if len(values) == 1:
        return fmt.format(values[0])
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}-{fmt.format(max(values))})")


def load(name: str) -> dict | None:
    path = FOLDER / name
    return json.loads(path.read_text()) if path.exists() else None


def speed(batch: int) -> None:
    result = load(f"speed_b{batch}.json")
    if result is None:
        print(f"speed_b{batch}.json: not measured\n")
        return
    section = result["speed"]
    peak = section["matmul_peak"]
    rows = {row["encoding"]: row for row in section["rows"]}
    # A 2048^2 product on this GPU times its launch, not the multiply: no MFU from it.
    peak_valid = peak["size"] >= 8192
    print(f"batch {batch}, seq_len 1024, GPT-2 small's blocks, packing "
          f"{section['config']['packing']}; the bf16 matmul measured in the same process, "
          f"{peak['size']}^2: {peak['flops_per_s'] / 1e12:.0f} TFLOP/s"
          + ("" if peak_valid else " (launch-bound: no MFU is computed from it)"))
    print()
    print("| encoding | tokens/s (k) | MFU | over rope's tokens/s | target, on the median |")
    print("|---|---|---|---|---|")
    rope = rows.get("rope")
    for name, row in rows.items():
        tokens = [v["tokens_per_s"] / 1e3 for v in row["visits"]]
        mfu = [100 * v["mfu"] for v in row["visits"]]
        over = ([v["tokens_per_s"] / r["tokens_per_s"]
                 for v, r in zip(row["visits"], rope["visits"], strict=True)] if rope else [])
        if name == "rope" and not peak_valid:
            target = f"MFU >= {MFU_TARGET:.0%}: not measured"
        elif name == "rope":
            met = statistics.median(mfu) / 100 >= MFU_TARGET
            target = f"MFU >= {MFU_TARGET:.0%}: {'met' if met else 'not met'}"
        elif name == "none" or not over:
            target = ""
        else:
            met = statistics.median(over) >= BIAS_TARGET
            target = f">= {BIAS_TARGET}x rope: {'met' if met else 'not met'}"
        mfu_cell = f"{spread(mfu, '{:.1f}')} %" if peak_valid else "-"
        print(f"| {name} | {spread(tokens, '{:.0f}')} | {mfu_cell} | "
              f"{spread(over) if over else '-'} | {target} |")
    print()


def peers(batch: int) -> None:
    result = load(f"peers_b{batch}.json")
    if result is None:
        print(f"peers_b{batch}.json: not measured\n")
        return
    (device, section), = result.items()
    packing = section["train"].get("packing", "documents")
    print(f"batch {batch}: posjax's training step against x-transformers' ({device}); "
          f"posjax's rows: packing {packing}")
    print()
    print("| encoding | posjax tokens/s (k) | x-transformers tokens/s (k) | ratio | target |")
    print("|---|---|---|---|---|")
    for name, row in section["train"]["rows"].items():
        visits = row["visits"]
        ours = [v["tokens_per_s"]["posjax"] / 1e3 for v in visits]
        theirs = [v["tokens_per_s"]["x-transformers"] / 1e3 for v in visits]
        ratio = [v["ratio"] for v in visits]
        met = statistics.median(ratio) >= PEERS_TARGET
        target = f">= {PEERS_TARGET}x: {'met' if met else 'not met'}" if name == "rope" else ""
        print(f"| {name} | {spread(ours, '{:.0f}')} | {spread(theirs, '{:.0f}')} | "
              f"{spread(ratio)} | {target} |")
    print()


def vmap_table(source: str, ratios: dict[str, list[float]]) -> None:
    print(f"3 seeds vmapped against a lone step, per seed-step ({source}, the main job's model)")
    print()
    print("| encoding | per seed-step over the lone step |")
    print("|---|---|")
    for encoding, values in ratios.items():
        print(f"| {encoding} | {spread(values)} |")
    print()


def vmap_step_from_log(name: str) -> None:
    """The vmap_step stage's lines in a check's log (the first check's JSON stayed on the
    machine; its log came back)."""
    found: dict[str, list[float]] = {}
    for match in re.finditer(r"^  (\w+) +\d: lone .* per seed-step ([\d.]+)x the lone step$",
                             (FOLDER / name).read_text(), flags=re.M):
        found.setdefault(match[1], []).append(float(match[2]))
    vmap_table(name, found)


def vmap_step() -> None:
    result = load("vmap_seeds.json")
    if result is None:
        if (FOLDER / "gpu_check_1_start.log").exists():
            vmap_step_from_log("gpu_check_1_start.log")
        return
    (device, section), = result.items()
    vmap_table(device, {row["encoding"]: [v["per_seed_ratio"] for v in row["visits"]]
                        for row in section["vmap_step"]["rows"]})


def profile() -> None:
    """Where the step's time went (scripts/bench_profile.py's train section): per encoding,
    the wall time of a call, the ops' time by what they compute, and the top source lines."""
    result = load("profile.json")
    if result is None:
        return
    (device, section), = result.items()
    train = section["train"]
    print(f"where the step's time goes ({device}; {train['size']}, seq_len {train['seq_len']}, "
          f"batch {train['batch_size']}; ms per call, the first visit)")
    print()
    for name, visits in train["visits"].items():
        visit = visits[0]
        categories = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in visit["by_category"].items())
        print(f"- {name}: wall {visit['wall_s'] * 1e3:.1f} ms; ops {visit['op_s'] * 1e3:.1f} ms "
              f"({categories})")
        for line in visit["by_source"][:5]:
            print(f"  - {line['seconds'] * 1e3:.1f} ms {line['source']}")
    print()


speed(16)
speed(64)
peers(16)
peers(64)
vmap_step()
profile()
