"""The tables of README.md, from the raw files `scripts/gpu_check.sh` wrote:

    .venv/bin/python experiments/bench/nvidia-h200/summary.py          # the first session's
    .venv/bin/python experiments/bench/nvidia-h200/summary.py call4_end   # one call's folder

Every figure is the median over the repeats in the raw file, with (min-max) beside it; a
ratio between encodings or against x-transformers is taken visit by visit (the same repeat,
the same process) before the median. A target is met only where the median meets it.
MFU and the ratios to RoPE are benchmarks/benchlib/gpu_figures.py's, which also gives the
numbers the pages quote (experiments/bench/values.py, `h200@CALL:...`), over the H200's
datasheet dense bfloat16 peak (benchmarks/benchlib/peaks.py). The matmul that older files
timed in the same process is shown only as "of the measured matmul", never as MFU.
"""

import json
import re
import statistics
import sys
from pathlib import Path

import jax.numpy as jnp

# benchlib, the benchmarks' shared pieces, lives outside the package
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from benchlib.gpu_figures import long_figures, speed_figures
from benchlib.peaks import datasheet_peak
from posjax import encoders
from posjax.attention.dispatch import auto_impl
from posjax.models import ModelConfig

HERE = Path(__file__).resolve().parent
FOLDER = HERE / (sys.argv[1] if len(sys.argv) > 1 else ".")
PEAK, PEAK_SOURCE = datasheet_peak("NVIDIA H200", "bfloat16")
MFU_TARGET, PEERS_TARGET = 0.40, 1.5
# Each bias encoding's tokens/s over RoPE's, by batch: 64 on stream rows, 16 on packed documents.
BIAS_TARGETS = {16: 0.8, 64: 0.9}


def spread(values, fmt="{:.2f}") -> str:
    values = list(values)
    if len(values) == 1:
        return fmt.format(values[0])
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}-{fmt.format(max(values))})")


def percent(fractions) -> str:
    return f"{spread([100 * f for f in fractions], '{:.1f}')} %"


def load(name: str) -> dict | None:
    path = FOLDER / name
    return json.loads(path.read_text()) if path.exists() else None


def measured_matmul(section: dict) -> tuple[str, bool]:
    """The matmul the file timed beside the steps, described, and whether a fraction of it
    means anything (a 2048^2 product on this GPU times its launch, not the multiply)."""
    if "achievable" in section:
        a = section["achievable"]
        return f"{a['flops_per_s'] / 1e12:.0f} TFLOP/s ({a['method']})", True
    peak = section["matmul_peak"]
    valid = peak["size"] >= 8192
    return (f"{peak['flops_per_s'] / 1e12:.0f} TFLOP/s ({peak['size']}^2, each product timed "
            "alone)" + ("" if valid else ", launch-bound"), valid)


def of_matmul(visit: dict) -> float:
    """A visit's model FLOPs per second over the matmul measured in its process."""
    return visit["of_achievable"] if "of_achievable" in visit else visit["mfu"]


def speed(batch: int, stage: str = "speed") -> None:
    """A speed table: the speed stage's (speed_bB.json) or the flash stage's (flash_bB.json,
    printed only where it ran), whose labels ENCODING@flash_bias run the Pallas kernel."""
    result = load(f"{stage}_b{batch}.json")
    if result is None:
        if stage == "speed":
            print(f"speed_b{batch}.json: not measured\n")
        return
    section = result["speed"]
    flops = section["flops"]
    palm = flops["dense_flops"] + flops["attention_flops_full"]
    matmul, matmul_valid = measured_matmul(section)
    bias_target = BIAS_TARGETS[batch]
    print(f"batch {batch}, seq_len 1024, GPT-2 small's blocks, packing "
          f"{section['config']['packing']}; {flops['flops'] / 1e12:.2f} TFLOP per step "
          f"(PaLM's count {palm / 1e12:.2f}); MFU over the datasheet's "
          f"{PEAK / 1e12:.0f} TFLOP/s ({PEAK_SOURCE}); the matmul measured beside the steps: "
          f"{matmul}")
    print()
    measured = "of the achievable" if "achievable" in section else "of the measured matmul"
    print(f"| encoding | tokens/s (k) | step ms | MFU | MFU, PaLM's count | {measured} "
          "| over rope's tokens/s | target, on the median |")
    print("|---|---|---|---|---|---|---|---|")
    visits = {row["encoding"]: row["visits"] for row in section["rows"]}
    for name, figures in speed_figures(section, PEAK).items():
        over = figures.get("over_rope", [])
        if name == "rope":
            met = statistics.median(figures["mfu"]) >= MFU_TARGET
            target = f"MFU >= {MFU_TARGET:.0%}: {'met' if met else 'not met'}"
        elif name == "none" or not over:
            target = ""
        else:
            met = statistics.median(over) >= bias_target
            target = f">= {bias_target}x rope: {'met' if met else 'not met'}"
        of = [100 * of_matmul(v) for v in visits[name]]
        of_cell = f"{spread(of, '{:.1f}')} %" if matmul_valid else "-"
        print(f"| {name} | {spread(figures['tokens_k'], '{:.0f}')} | "
              f"{spread(figures['step_ms'], '{:.0f}')} | {percent(figures['mfu'])} | "
              f"{percent(figures['mfu_palm'])} | {of_cell} | "
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
    """Where the step's time went (benchmarks/bench_profile.py's train section): per encoding,
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


def offline_profile() -> None:
    """A kept trace re-parsed here (benchmarks/bench_profile.py --parse_trace): the share of the
    device span attributed to named ops, and the top ops."""
    result = load("profile_rope_offline.json")
    if result is None:
        return
    print(f"where the RoPE step's time goes (a kept trace, batch 16; per call): "
          f"{result['attributed_share']:.1%} of {result['wall_s'] * 1e3:.1f} ms "
          f"({result['wall_from']}) attributed to named ops")
    print()
    print("| share | ms | op | category | source |\n|---|---|---|---|---|")
    for op in result["top_ops"][:10]:
        print(f"| {op['share']:.1%} | {op['seconds'] * 1e3:.2f} | {op['op']} | "
              f"{op['category']} | {op['source']} |")
    print()


def long_kernel(label: str, length: int) -> str:
    """The kernel a label ran on: the one it names (`t5@fused`), else the one `auto` runs for
    this encoding at this length in bfloat16 on a GPU, at the model's default dense_max_len
    (dispatch.auto_impl): above it, cuDNN for an encoding with no bias, the Pallas kernel for
    a tabulated bias, chunked for the rest."""
    name, _, named = label.partition("@")
    dense_max_len = ModelConfig.__dataclass_fields__["dense_max_len"].default
    return named or auto_impl(encoders.get(name), length, dense_max_len, "gpu", jnp.bfloat16)


LONG_COMPILE_ROW = re.compile(r"^  (\S+) +L +(\d+) x +(\d+): not timed, +([\d.]+) MiB", re.M)
COMPILE_ROW = re.compile(r"^\| (?!none |encoding )(\S+) \| (\d+) \| (\d+) \| ([\d.]+) \| "
                         r"([\d.]+)% \|", re.M)


def compile_pass(batch: int) -> None:
    """The speed stage's compile pass (logs/speed_bBATCH_compile.log): one timed step of each
    encoding, each in its own process beside `none`, several processes sharing the GPU at once.
    Single steps under contention: an indication, never a figure against a target."""
    path = FOLDER / "logs" / f"speed_b{batch}_compile.log"
    if not path.exists() or load(f"speed_b{batch}.json") or load(f"flash_b{batch}.json"):
        return
    print(f"batch {batch}, compile pass only (one step each, processes sharing the GPU; the "
          "timed visits did not finish):")
    print()
    print("| encoding | tokens/s (k) | step ms | step over none's (same process) | MFU |")
    print("|---|---|---|---|---|")
    for name, tokens, step_ms, ratio, mfu in COMPILE_ROW.findall(path.read_text()):
        print(f"| {name} | {int(tokens) / 1e3:.0f} | {step_ms} | {ratio} | {mfu} % |")
    print()


def long() -> None:
    """The long stage (long.json): each encoding's steps at 4096 and 8192 tokens, GPT-2
    small's blocks on stream rows, with the kernel each ran (long_kernel), and the compiled
    step's memory; where the stage was cut, the compile pass's memory
    (logs/long_compile.log) for the shapes it reached."""
    result = load("long.json")
    if result is None:
        return
    section = result["long"]
    timed = long_figures(section)
    print("long: GPT-2 small's blocks on stream rows, bfloat16 "
          f"({'cut short; ' if section.get('interrupted') else ''}memory: temp + arguments + "
          "outputs of the compiled step)")
    print()
    print("| encoding | L x batch | kernel | tokens/s (k) | over rope's | step ms "
          "(3 steps) | memory GiB |")
    print("|---|---|---|---|---|---|---|")
    for (name, length), row in timed.items():
        over = row["over_rope"]
        print(f"| {name} | {length} x {row['batch_size']} | {long_kernel(name, length)} "
              f"| {row['tokens_k']:.0f} | {f'{over:.2f}' if over else '-'} "
              f"| {spread(row['step_ms'], '{:.0f}')} | {row['memory_gib']:.1f} |")
    compiled = FOLDER / "logs" / "long_compile.log"
    if compiled.exists():
        for name, length, batch, mib in LONG_COMPILE_ROW.findall(compiled.read_text()):
            if (name, int(length)) not in timed:
                print(f"| {name} | {length} x {batch} | {long_kernel(name, int(length))} "
                      f"| not timed | - | - | {float(mib) / 1024:.1f} |")
    print()


def stages() -> None:
    """Each stage of the call (gpu_check.json): exit code and seconds; the flash stage's
    kernel tests (pytest's progress line in logs/flash_tests.log) where it ran."""
    check = load("gpu_check.json")
    if check is None:
        return
    for name, stage in check["stages"].items():
        print(f"- {name}: exit {stage['rc']} in {stage['seconds']} s "
              f"(limit {stage.get('limit_s', '-')} s)")
    flash_tests = FOLDER / "logs" / "flash_tests.log"
    if flash_tests.exists():
        progress = next(line for line in flash_tests.read_text().splitlines()
                        if line.endswith("[100%]"))
        marks = progress.split()[0]
        print(f"- the flash kernel's tests compiled by Triton: {marks.count('.')} passed, "
              f"{marks.count('F')} failed, {marks.count('E')} errors ({marks})")
    print()


def main_job() -> None:
    """The main job's table (main/extrapolation.md, scripts/run.sh on the GPU) and the
    compute dtype its runs recorded."""
    table = FOLDER / "main" / "extrapolation.md"
    if not table.exists():
        return
    dtypes = {json.loads(path.read_text())["provenance"]["dtypes"]["compute"]
              for path in (FOLDER / "main" / "runs").glob("*/config.json")}
    print(f"the main job (compute dtype {', '.join(sorted(dtypes))}):")
    print()
    print(table.read_text().strip())
    print()


speed(16)
speed(64)
speed(64, "flash")
peers(16)
peers(64)
vmap_step()
profile()
offline_profile()
long()
stages()
main_job()
compile_pass(64)
