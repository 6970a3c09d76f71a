"""The benchmark page's tables and quoted numbers, from train.json, attention.json and the
other raw files here (the GPU's in nvidia-h200/).

    posjax report experiments/bench           # rewrites the tables and numbers of both READMEs
    posjax report experiments/bench --check   # what tests/test_report.py runs

Every figure keeps all its repeats in the raw files. A figure here is the median over them,
with `:lo` / `:hi` the min and max; a target is met only if the median meets it.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
from pathlib import Path

# benchlib, the benchmarks' shared pieces, lives outside the package
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from benchlib import sweeps
from benchlib.gpu_figures import long_figures, speed_figures
from benchlib.peaks import datasheet_peak
from posjax.results.values import add_spread

GIB, MIB = 2**30, 2**20
# encoding -> bound on the training step's ratio to `none` (the attention groups' targets).
TRAINING_TARGETS = {"rope": 1.1, "xpos": 1.1, "alibi": 1.3, "t5": 1.3, "kerple_log": 1.3,
                    "fire": 1.3, "shaw": 2.0, "xl": 2.0, "deberta": 2.0}
MFU_TARGET = ("rope", 0.40)
# benchmarks/bench_peers.py: posjax's tokens/s over x-transformers', RoPE apply over a copy.
PEERS_TARGET, ROPE_TARGET = 1.5, 0.8
# The attention table's columns: (length, what the column is called).
ATTENTION_COLUMNS = ((1024, "L=1024 dense"), (4096, "L=4096 chunked"),
                     (8192, "L=8192 chunked"))
# Short names of the allocator rows: (name, how the row's label starts).
ALLOCATORS = (("glibc", "glibc default"), ("hugetlb", "glibc hugetlb=1"),
              ("jemalloc", "jemalloc"))
# The targets are about the chunked regime (4096-8192): at 1024 one-off costs dominate.
TARGET_LENGTHS = (4096, 8192)


@functools.cache
def _parsed(path: Path, version: tuple[int, int]) -> dict:
    return json.loads(path.read_text())


def _read_json(path: Path) -> dict:
    """`path` parsed once per version of the file (its mtime and size): the tables and values
    read the same files many times (vmap_seeds.json, 1.5 MB, over a hundred times a report).
    Nothing here changes what it reads."""
    stat = path.stat()
    return _parsed(path, (stat.st_mtime_ns, stat.st_size))


def _load(study: Path, name: str) -> dict:
    return _read_json(study / name)


def _spread(values: list[float], fmt) -> str:
    """The median, with (min-max) when there is more than one repeat."""
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}-{fmt(max(values))})"


def _of_matmul(visit: dict) -> float:
    """A visit's model FLOP/s over a bfloat16 or float32 matmul measured beside it: the CPU
    figure (no datasheet peak there). Files written before the datasheet MFU call it "mfu"."""
    return visit["of_achievable"] if "of_achievable" in visit else visit["mfu"]


def _verdict(met: bool) -> str:
    return "met" if met else "**not met**"


def training_table(study: Path) -> str:
    """tokens/s, ratio to `none` and the fraction of a measured matmul per encoding: median
    (min-max) over every visit."""
    lines = ["| encoding | tokens/s | ratio to none | of the measured matmul | "
             "target, on the median |",
             "|---|---|---|---|---|"]
    for row in _load(study, "train.json")["speed"]["rows"]:
        visits, encoding = row["visits"], row["encoding"]
        notes = []
        if encoding == MFU_TARGET[0]:
            met = statistics.median(_of_matmul(v) for v in visits) >= MFU_TARGET[1]
            notes.append(f"of the measured matmul >= {MFU_TARGET[1]:.0%}: {_verdict(met)}")
        if encoding in TRAINING_TARGETS:
            bound = TRAINING_TARGETS[encoding]
            met = statistics.median(v["ratio_to_none"] for v in visits) <= bound
            notes.append(f"<= {bound}x: {_verdict(met)}")
        lines.append(
            f"| {encoding} | {_spread([v['tokens_per_s'] for v in visits], '{:.0f}'.format)} "
            f"| {_spread([v['ratio_to_none'] for v in visits], '{:.2f}'.format)} "
            f"| {_spread([100 * _of_matmul(v) for v in visits], '{:.1f}%'.format)} "
            f"| {'; '.join(notes)} |")
    return "\n".join(lines)


def _attention_rows(study: Path, name: str = "attention.json") -> dict[str, dict[int, dict]]:
    """encoding -> length -> the timing row (every round kept in row["rounds"])."""
    rows: dict[str, dict[int, dict]] = {}
    for row in _load(study, name)["timing"]:
        # A file from before rounds were kept holds one median per case: one round.
        rows.setdefault(row["encoding"], {})[row["length"]] = {"rounds": [row], **row}
    return rows


def _attention_verdict(by_length: dict[int, dict]) -> str:
    row = by_length[TARGET_LENGTHS[0]]
    missed = [f"{key.removesuffix('_ratio').replace('_', '+')} at {n}"
              for n in TARGET_LENGTHS for key in ("fwd_ratio", "fwd_bwd_ratio")
              if statistics.median(r[key] for r in by_length[n]["rounds"]) > row["target"]]
    return f"<= {row['target']}x: " + ("met" if not missed else
                                       "**not met** (" + ", ".join(missed) + ")")


def attention_table(study: Path) -> str:
    """Forward / forward+backward time over plain attention, median (min-max) over rounds."""
    lines = ["| encoding | " + " | ".join(c for _, c in ATTENTION_COLUMNS)
             + " | target, on the median |", "|---" * (len(ATTENTION_COLUMNS) + 2) + "|"]
    for encoding, by_length in _attention_rows(study).items():
        if encoding == "none":
            continue
        cells = []
        for length, _ in ATTENTION_COLUMNS:
            rounds = by_length[length]["rounds"]
            cells.append(" / ".join(_spread([r[key] for r in rounds], "{:.2f}".format)
                                    for key in ("fwd_ratio", "fwd_bwd_ratio")))
        lines.append(f"| {encoding} | " + " | ".join(cells)
                     + f" | {_attention_verdict(by_length)} |")
    return "\n".join(lines)


# Issue 19's bounds on chunked attention at 4096-8192 with the sites prepared once, against
# plain attention: encoding -> (bound, the ratio it applies to).
PREPARED_TARGETS = {"xl": (1.5, "fwd_bwd"), "deberta": (1.5, "fwd_bwd"),
                    "tupe": (1.5, "fwd_bwd"), "rerope": (1.5, "fwd_bwd"),
                    "fire": (2.0, "fwd_bwd")}
PREPARED_FILE = "attention_prepared.json"


def prepared_table(study: Path) -> str:
    """attention_prepared.json: fwd / fwd+bwd over plain attention at 4096 and 8192 (chunked),
    median (min-max) over every round, with issue 19's bounds."""
    if not (study / PREPARED_FILE).exists():
        return "(not measured yet)"
    rows = _attention_rows(study, PREPARED_FILE)
    lines = ["| encoding | " + " | ".join(f"L={n} chunked" for n in TARGET_LENGTHS)
             + " | bound, on the median of both lengths |", "|---|---|---|---|"]
    for encoding, by_length in rows.items():
        if encoding == "none":
            continue
        cells = [" / ".join(_spread([r[key] for r in by_length[n]["rounds"]], "{:.2f}".format)
                            for key in ("fwd_ratio", "fwd_bwd_ratio")) for n in TARGET_LENGTHS]
        verdict = ""
        if encoding in PREPARED_TARGETS:
            bound, key = PREPARED_TARGETS[encoding]
            met = all(statistics.median(r[f"{key}_ratio"] for r in by_length[n]["rounds"])
                      <= bound for n in TARGET_LENGTHS)
            verdict = f"fwd+bwd <= {bound}x: {_verdict(met)}"
        lines.append(f"| {encoding} | " + " | ".join(cells) + f" | {verdict} |")
    return "\n".join(lines)


def _allocator_visits(study: Path) -> dict[str, list[dict]]:
    """allocator label -> every visit of every process under it (step_s, cpu_s, page_faults,
    the fraction of the measured matmul), in the order measured."""
    visits: dict[str, list[dict]] = {}
    for row in _load(study, "train.json")["allocator"]["rows"]:
        visits.setdefault(row["allocator"], []).extend(row["visits"])
    return visits


def allocator_table(study: Path) -> str:
    """Per allocator, median (min-max) over every visit: step ms, CPU s, page faults, the
    fraction of the measured matmul."""
    lines = ["| host allocator | step ms | CPU s/step | page faults/step | "
             "of the measured matmul |",
             "|---|---|---|---|---|"]
    for name, visits in _allocator_visits(study).items():
        lines.append(f"| {name} | " + " | ".join(
            _spread([v[key] for v in visits], fmt) for key, fmt in (
                ("step_s", lambda v: f"{1e3 * v:.0f}"), ("cpu_s", "{:.2f}".format),
                ("page_faults", "{:,.0f}".format))) + " | "
                     + _spread([_of_matmul(v) for v in visits], "{:.1%}".format) + " |")
    return "\n".join(lines)


def _pipeline_blocks(study: Path) -> dict[str, list[float]]:
    """feed -> ms per step of every block of every process."""
    pipeline = _load(study, "train.json")["pipeline"]
    steps = pipeline["steps_per_block"]
    return {feed: [1e3 * block / steps for run in pipeline["processes"]
                   for block in run["block_wall_s"][feed]]
            for feed in ("in_memory", "pipeline")}


def pipeline_table(study: Path) -> str:
    """ms per step of each feed: median (min-max) over every block of every process."""
    lines = ["| feed | ms/step | blocks |", "|---|---|---|"]
    for feed, per_step in _pipeline_blocks(study).items():
        lines.append(f"| {feed.replace('_', '-')} | {_spread(per_step, '{:.0f}'.format)} | "
                     f"{len(per_step)} |")
    return "\n".join(lines)


def _compile_setting(row: dict) -> str:
    """The short name of a compile row's setting: none, default_cold, every_warm, ..."""
    if row["cache"] == "-":
        return "none"
    return ("default" if "default" in row["setting"] else "every") + "_" + row["cache"]


def _compile_rounds(study: Path) -> dict[str, list[dict]]:
    """short setting name -> its row of every round."""
    rounds: dict[str, list[dict]] = {}
    for row in _load(study, "train.json")["compile"]["rows"]:
        rounds.setdefault(_compile_setting(row), []).append(row)
    return rounds


def _eval_programs(row: dict) -> int:
    """How many programs of the evaluation step `posjax extrapolate` compiled in `row`."""
    return row["extrapolate"]["per_function"].get("jit(eval_token_losses)", 0)


def compile_table(study: Path) -> str:
    """Compile and wall seconds of `posjax train` and `posjax extrapolate` per setting:
    median (min-max) over the rounds, and the median cache hits of the compiles."""
    lines = ["| persistent cache | train: compile s | train: wall s | train: hits "
             "| extrapolate: compile s | extrapolate: wall s | extrapolate: hits |",
             "|---|---|---|---|---|---|---|"]
    for rows in _compile_rounds(study).values():
        cells = []
        for command in ("train", "extrapolate"):
            runs = [row[command] for row in rows]
            cells += [_spread([r["backend_compile_s"] for r in runs], "{:.1f}".format),
                      _spread([r["wall_s"] for r in runs], "{:.1f}".format),
                      f"{statistics.median(r['cache_hits'] for r in runs):.0f} of "
                      f"{runs[0]['compiles']}"]
        setting = rows[0]["setting"] + ("" if rows[0]["cache"] == "-"
                                        else f", {rows[0]['cache']} cache")
        lines.append(f"| {setting} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cpu_section(study: Path, name: str) -> dict:
    """The CPU section of a per-device JSON file (benchmarks/bench_peers.py, bench_profile.py);
    {} before it was run."""
    path = study / name
    return _read_json(path).get("cpu", {}) if path.exists() else {}


def _peers(study: Path) -> dict:
    return _cpu_section(study, "peers.json")


# bench_peers.py's train section at size base (peers.json) and at the main job's model
# (--size main --seq_len 128: peers_main.json at the main study's batch of 16, peers_main_b8
# at the main job's 8), on every core (train) and on one core, as each run of the main job
# trains (train_one_core), and on every core with torch's OpenMP threads sleeping while they
# wait (train_omp_passive: OMP_WAIT_POLICY=passive).
PEERS_TRAIN_FILES = ("peers.json", "peers_main.json", "peers_main_b8.json")
PEERS_TRAIN_SECTIONS = {"train": "", "train_one_core": ":one_core",
                        "train_omp_passive": ":omp_passive"}


def _peers_train_sections(study: Path) -> list[tuple[str, str, dict]]:
    """(CPU kind, section key, section) of every train section of the peers files."""
    return [(kind, key, mine[key]) for name in PEERS_TRAIN_FILES
            for kind, mine in _cpu_kind_sections(study, name).items()
            for key in PEERS_TRAIN_SECTIONS if key in mine]


def _cpu_kind_sections(study: Path, name: str) -> dict[str, dict]:
    """CPU kind -> its section of a per-device JSON file: "cpu" (recorded before CPU kinds
    were told apart) and cpu@VENDOR-FAMILY-MODEL (benchlib.runs.cpu_key)."""
    path = study / name
    kinds = _read_json(path) if path.exists() else {}
    return {kind: mine for kind, mine in kinds.items() if kind.startswith("cpu")}


def peers_table(study: Path) -> str:
    """posjax's train step against x-transformers', per CPU kind and model size: tokens/s of
    each, and their ratio, as the median (min-max) over every visit."""
    sections = _peers_train_sections(study)
    if not sections:
        return "(not measured yet)"
    lines = ["| CPU | model (configs/lm.py size), seq_len x batch | cores (torch threads) "
             "| encoding | posjax tokens/s "
             f"| x-transformers tokens/s | ratio | >= {PEERS_TARGET}x on the median "
             "| >= 1x on the median |", "|---|---|---|---|---|---|---|---|---|"]
    for kind, _, train in sections:
        shape = f"{train.get('size', 'base')}, {train['seq_len']} x {train['batch_size']}"
        cores = f"{train.get('cores', 'all')} ({train['threads']})" + (
            f", OMP_WAIT_POLICY={train['omp_wait_policy']}" if "omp_wait_policy" in train
            else "")
        for name, row in train["rows"].items():
            visits = row["visits"]
            ratio = [v["ratio"] for v in visits]
            lines.append(
                f"| {kind} | {shape} | {cores} | {name} | "
                + " | ".join(_spread([v["tokens_per_s"][s] for v in visits], "{:.0f}".format)
                             for s in ("posjax", "x-transformers"))
                + f" | {_spread(ratio, '{:.2f}x'.format)} "
                f"| {_verdict(statistics.median(ratio) >= PEERS_TARGET)} "
                f"| {_verdict(statistics.median(ratio) >= 1)} |")
    return "\n".join(lines)


def rope_apply_table(study: Path) -> str:
    rope = _peers(study).get("rope")
    if not rope:
        return "(not measured yet)"
    lines = ["| case | apply us | copy us | fraction of copy "
             f"| >= {ROPE_TARGET} on the median |", "|---|---|---|---|---|"]
    for case, label in (("one_call", "one rotate of q and k (tables included)"),
                        ("four_layers", "4 layers' q and k, one positions array")):
        visits = [v[case] for v in rope["visits"]]
        fraction = [v["fraction_of_copy"] for v in visits]
        lines.append(
            f"| {label} | {_spread([1e6 * v['apply_s'] for v in visits], '{:.0f}'.format)} "
            f"| {_spread([1e6 * v['copy_s'] for v in visits], '{:.0f}'.format)} "
            f"| {_spread(fraction, '{:.2f}'.format)} "
            f"| {_verdict(statistics.median(fraction) >= ROPE_TARGET)} |")
    return "\n".join(lines)


def _fused_encodings(fused: dict) -> list[str]:
    """The encodings of the fused section (a visit also holds its process index)."""
    return [k for k, v in fused["visits"][0].items() if isinstance(v, dict)]


def fused_table(study: Path) -> str:
    """attention=fused over attention=dense, forward+backward at the train step's shapes."""
    fused = _peers(study).get("fused")
    if not fused:
        return "(not measured yet)"
    lines = ["| encoding | dense ms | fused ms | fused / dense |", "|---|---|---|---|"]
    for name in _fused_encodings(fused):
        visits = [v[name] for v in fused["visits"]]
        lines.append(
            f"| {name} | {_spread([1e3 * v['dense_s'] for v in visits], '{:.0f}'.format)} "
            f"| {_spread([1e3 * v['fused_s'] for v in visits], '{:.0f}'.format)} "
            f"| {_spread([v['fused_over_dense'] for v in visits], '{:.2f}'.format)} |")
    return "\n".join(lines)


def long_eval_table(study: Path) -> str:
    long = _peers(study).get("long")
    if not long:
        return "(not measured yet)"
    lengths = long["lengths"]
    lines = ["| encoding | " + " | ".join(f"compiled at {n // 1024}k" for n in lengths)
             + " | peak RSS of a run | run seconds | < 4 GiB |",
             "|---" * (len(lengths) + 4) + "|"]
    for name, row in long["rows"].items():
        run = row.get("run")
        lines.append(
            f"| {name} | " + " | ".join(f"{row['compiled'][str(n)]['total'] / GIB:.2f} GiB"
                                        for n in lengths)
            + (f" | {run['peak_rss'] / GIB:.2f} GiB at {run['length'] // 1024}k "
               f"| {run['seconds']:.0f} |" if run else " | - | - |")
            + f" {_verdict(row['met'])} |")
    return "\n".join(lines)


def _profile(study: Path) -> dict:
    return _cpu_section(study, "profile.json")


def _short_source(source: str) -> str:
    """`posjax/encoders/relative.py:255 (TransformerXL.rel_prepare)` -> `encoders/relative.py:255
    TransformerXL.rel_prepare`; `dot f32[A] x f32[B] -> f32[C]` -> `dot [A]·[B]`."""
    if source.startswith("dot "):
        lhs, rhs = source.removeprefix("dot ").split(" -> ")[0].split(" x ")
        return f"dot {lhs.removeprefix('f32')}·{rhs.removeprefix('f32')}"
    path, _, function = source.partition(" (")
    short = "/".join(path.split("/")[-2:])
    return f"{short} {function.rstrip(')').split('.<locals>.')[-1]}"


def _category_ms(visits: list[dict], names: tuple[str, ...]) -> list[float]:
    return [1e3 * sum(v["by_category"].get(n, 0.0) for n in names) for v in visits]


def _added_sources(visits: list[dict], plain: list[dict], top: int = 3) -> list[tuple]:
    """The sources whose op time grows most over the plain program, visit by visit:
    [(source, [ms added in each visit])], largest median first."""
    added: dict[str, list[float]] = {}
    for visit, base in zip(visits, plain, strict=True):
        before = {s["source"]: s["seconds"] for s in base["by_source"]}
        for row in visit["by_source"]:
            added.setdefault(row["source"], []).append(
                1e3 * (row["seconds"] - before.get(row["source"], 0.0)))
    ranked = sorted(added.items(), key=lambda kv: -statistics.median(kv[1]))
    return ranked[:top]


# What torch.profiler's classes count as the peer's matmuls (its fused attention included).
PEER_MATMUL = ("matmul", "attention kernel")
PROFILE_GROUPS = (("matmul", ("matmul",)), ("elementwise", ("elementwise",)),
                  ("transcendental", ("transcendental",)),
                  ("gather/scatter", ("gather/scatter",)),
                  ("rest", ("reduction", "copy/layout", "control")))


def profile_table(study: Path, section: str, plain: str = "none") -> str:
    """One profile section: wall and op ms per call by class of op, median (min-max) over
    the visits, and the source lines that add the most op time over `plain`."""
    data = _profile(study).get(section)
    if not data:
        return "(not measured yet)"
    groups = " | ".join(f"{label} ms" for label, _ in PROFILE_GROUPS)
    lines = [f"| case | wall ms | {groups} | largest additions over {plain}, ms |",
             "|---|---|" + "---|" * len(PROFILE_GROUPS) + "---|"]
    ms = "{:.0f}".format
    for name, visits in data["visits"].items():
        cells = [_spread([1e3 * v["wall_s"] for v in visits], ms)]
        cells += [_spread(_category_ms(visits, names), ms) for _, names in PROFILE_GROUPS]
        added = "" if name == plain else "; ".join(
            f"{_short_source(source)} {statistics.median(values):.0f}"
            for source, values in _added_sources(visits, data["visits"][plain]))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {added} |")
    return "\n".join(lines)


def peer_profile_table(study: Path) -> str:
    """x-transformers' RoPE train step by class of aten op, beside posjax's (train profile)."""
    profile = _profile(study)
    if "peer" not in profile or "train" not in profile:
        return "(not measured yet)"
    systems = (("posjax", profile["train"]["visits"]["rope"], ("matmul",)),
               ("x-transformers", profile["peer"]["visits"], PEER_MATMUL))
    ms = "{:.0f}".format
    lines = ["| system | wall ms per step | matmul ms | everything else ms |", "|---|---|---|---|"]
    for name, visits, matmul in systems:
        matmul_ms = _category_ms(visits, matmul)
        rest = [1e3 * v["op_s"] - m for v, m in zip(visits, matmul_ms, strict=True)]
        lines.append(f"| {name} | {_spread([1e3 * v['wall_s'] for v in visits], ms)} | "
                     f"{_spread(matmul_ms, ms)} | {_spread(rest, ms)} |")
    return "\n".join(lines)


VMAP_FILE = "vmap_seeds.json"
VMAP_COMMAND = "python benchmarks/bench_train.py --sections vmap --repeats 3"


def _vmap_sections(study: Path) -> dict[str, dict]:
    """device kind -> its vmap section of vmap_seeds.json, for those with a repeat of each
    mode (benchmarks/bench_train.py --sections vmap)."""
    path = study / VMAP_FILE
    kinds = _read_json(path) if path.exists() else {}
    return {kind: mine["vmap"] for kind, mine in kinds.items() if "vmap" in mine
            and {r["mode"] for r in mine["vmap"]["repeats"]} == set(sweeps.MODES)}


def _vmap_agreement(section: dict) -> tuple[int, float]:
    """(perplexities beyond the section's rtol, the largest relative difference) of every
    repeat against the first seed-by-seed repeat, recomputed from the runs' perplexities."""
    repeats = section["repeats"]
    reference = next(r["runs"] for r in repeats if r["mode"] == "seed_by_seed")
    checks = [sweeps.disagreements(reference, r["runs"], section["rtol"]) for r in repeats]
    return sum(len(problems) for problems, _ in checks), max(largest for _, largest in checks)


def _vmap_table_shift(section: dict) -> float:
    """The most a table cell of any repeat moved from the first seed-by-seed repeat's, as a
    fraction of that cell's seed range (sweeps.table_shift)."""
    repeats = section["repeats"]
    reference = next(r["runs"] for r in repeats if r["mode"] == "seed_by_seed")
    return max(sweeps.table_shift(reference, r["runs"]) for r in repeats)


def _vmap_runs(section: dict, mode: str, key: str) -> list[float]:
    """`key` of every run of every repeat of `mode` (those that recorded it)."""
    return [value for r in section["repeats"] if r["mode"] == mode
            for value in sweeps.per_run(r["runs"], key)]


def _parallel(section: dict) -> str:
    """A vmap section's runs at a time, where it ran more than one (` --parallel=2`)."""
    parallel = section.get("parallel", 1)
    return f", `--parallel={parallel}`" if parallel > 1 else ""


def vmap_table(study: Path) -> str:
    """Per device: the sweep's wall seconds in each mode and the ratio of the medians
    (range: each repeat's pair), the target's verdict, and whether the tables agree."""
    sections = _vmap_sections(study)
    if not sections:
        return f"(not measured yet: `{VMAP_COMMAND}`, as in experiments/bench/commands.sh)"
    lines = ["| device | sweep | repeats | load (1 min) | seed by seed, s | vmapped, s "
             "| vmapped / seed by seed | target, on the median "
             "| runs' perplexities agree | table's cells moved, of their seeds' range |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for section in sections.values():
        s = sweeps.summary(section["repeats"], section["target"])
        beyond, largest = _vmap_agreement(section)
        walls = {mode: [r["wall_s"] for r in section["repeats"] if r["mode"] == mode]
                 for mode in sweeps.MODES}
        agree = (f"yes, within {largest:.1e} (rtol {section['rtol']:g})" if not beyond
                 else f"**no**: {beyond} beyond rtol {section['rtol']:g}, up to {largest:.1e}")
        lines.append(
            f"| {section['device_line'].split(';')[0].removeprefix('device: ')} "
            f"| `{section['arg']}`{_parallel(section)} "
            f"| {min(len(w) for w in walls.values())} of each, alternated "
            f"| {_spread([r['load_before']['1min'] for r in section['repeats']], '{:.1f}'.format)} "
            f"| {_spread(walls['seed_by_seed'], '{:.0f}'.format)} "
            f"| {_spread(walls['vmapped'], '{:.0f}'.format)} "
            f"| {s['ratio']:.2f} ({s['ratio_min']:.2f}-{s['ratio_max']:.2f}) "
            f"| <= {section['target']}x: {_verdict(s['met'])} | {agree} "
            f"| at most {_vmap_table_shift(section):.1%} |")
    return "\n".join(lines)


def vmap_runs_table(study: Path) -> str:
    """Per device and mode, median (min-max) over every run of every repeat: the first
    step's seconds (compilation included), tokens/s per seed and sweep.json's seconds."""
    sections = _vmap_sections(study)
    if not sections:
        return f"(not measured yet: `{VMAP_COMMAND}`, as in experiments/bench/commands.sh)"
    lines = ["| device | mode | first step s (compilation included) | tokens/s per seed "
             "| seconds per run |", "|---|---|---|---|---|"]
    for kind, section in sections.items():
        for mode in sweeps.MODES:
            lines.append(f"| {kind} | {mode.replace('_', ' ')} | " + " | ".join(
                _spread(_vmap_runs(section, mode, key), fmt) for key, fmt in (
                    ("first_step_s", "{:.1f}".format), ("tokens_per_s", "{:.0f}".format),
                    ("seconds", "{:.0f}".format))) + " |")
    return "\n".join(lines)


MAIN_JOB_COMMAND = "python benchmarks/bench_train.py --sections main_job --main_job_dir DIR"
# The study's steps and rows per batch (configs/lm.py size=main), which every main job
# trained before run.sh took STEPS and BATCH.
MAIN_STEPS, MAIN_BATCH = 600, 16


def _main_jobs(study: Path) -> dict[str, list[dict]]:
    """CPU kind -> its timed runs of `bash scripts/run.sh` (vmap_seeds.json's main_job
    sections); the record from before they were kept as repeats is one repeat at PARALLEL=1
    (there was no PARALLEL then), and a repeat without SEEDS, STEPS or BATCH had run.sh's
    defaults, 3 seeds of the study's 600 steps of 16 rows, vmapped (SEED_STEPS)."""
    jobs = {}
    for kind, mine in _cpu_kind_sections(study, VMAP_FILE).items():
        if "main_job" in mine:
            job = mine["main_job"]
            repeats = job.get("repeats") or [{**job, "parallel": 1}]
            jobs[kind] = [{"seeds": 3, "steps": MAIN_STEPS, "batch_size": MAIN_BATCH,
                           "seed_steps": "vmap", **r} for r in repeats]
    return jobs


def _settings(repeats: list[dict]) -> dict[tuple[int, int, int, int, str], list[dict]]:
    """(PARALLEL, SEEDS, STEPS, BATCH, SEED_STEPS) -> the timed runs of the main job with
    those settings."""
    out: dict[tuple[int, int, int, int, str], list[dict]] = {}
    for r in repeats:
        key = (r["parallel"], r["seeds"], r["steps"], r["batch_size"], r["seed_steps"])
        out.setdefault(key, []).append(r)
    return dict(sorted(out.items()))


# (steps, batch) -> the study that records the main job at that budget: run.sh's 8 rows
# since 2026-11-28, the main study's 16 before.
MAIN_RECORDS = {(MAIN_STEPS, 8): "main", (MAIN_STEPS, MAIN_BATCH): "main_600x16"}
# The folders beside this study that its values read (posjax.results.values' READS).
READS = tuple(f"../{name}/results" for name in MAIN_RECORDS.values())


def _recorded_runs(study: Path) -> dict[tuple[int, int], dict[str, dict]]:
    """(steps, batch) -> the runs of MAIN_RECORDS' study at that budget as run_results gives
    a sweep's: run name -> {"ppl": {length: perplexity}}."""
    out = {}
    for budget, name in MAIN_RECORDS.items():
        results = study.parent / name / "results"
        out[budget] = {path.parent.name: {"ppl": sweeps.perplexities(path.parent)}
                       for path in sorted(results.glob("*/extrapolation.json"))}
    return out


def _programs(repeat: dict) -> list[list[dict]]:
    """A timed main job's runs by program: one per encoding, its seeds' runs (a run's name
    less its seed=K)."""
    programs: dict[str, list[dict]] = {}
    for name, run in repeat["runs"].items():
        point = ",".join(p for p in name.split(",") if not p.startswith("seed="))
        programs.setdefault(point, []).append(run)
    return list(programs.values())


def _program_phases(runs: list[dict]) -> dict[str, float]:
    """A program's seconds by phase (stages.json's seconds: setup, first_steps, steps,
    heldout_eval, checkpoints, score): a vmapped program's phases are shared by its seeds,
    its scoring is each seed's own."""
    phases = {phase: seconds for phase, seconds in (runs[0].get("phases") or {}).items()
              if phase != "score"}
    scores = [run["phases"]["score"] for run in runs if "score" in (run.get("phases") or {})]
    return {**phases, "score": sum(scores)} if scores else phases


def _phase_seconds(repeat: dict) -> dict[str, float]:
    """A timed main job's seconds by phase of its runs, summed over its programs."""
    totals: dict[str, float] = {}
    for runs in _programs(repeat):
        for phase, seconds in _program_phases(runs).items():
            totals[phase] = totals.get(phase, 0.0) + seconds
    return totals


def _core_use(repeat: dict) -> dict[str, float] | None:
    """How a timed main job's sweep used its cores: idle_share, the share of its
    PARALLEL x sweep seconds that no run's process held (on 2 cores the 7th encoding trains
    alone); packed_min, the job's minutes had no core idled (its wall time less the idle
    share of the sweep's, a bound: the runs are whole jobs); and startup_s, a program's
    median seconds outside its phases (the process's start-up before setup, and its exit);
    None for a record without the sweep's times."""
    if "runs" not in repeat or "sweep" not in repeat.get("phases_s", {}):
        return None
    programs = _programs(repeat)
    held = [sum(run["seconds"] for run in runs) for runs in programs]
    startup = [seconds - sum(_program_phases(runs).values())
               for seconds, runs in zip(held, programs, strict=True)]
    sweep = repeat["phases_s"]["sweep"]
    idle = (repeat["parallel"] * sweep - sum(held)) / (repeat["parallel"] * sweep)
    return {"idle_share": idle, "packed_min": (repeat["wall_s"] - idle * sweep) / 60,
            "startup_s": statistics.median(startup)}


def main_job_table(study: Path) -> str:
    """Per CPU kind and (PARALLEL, SEEDS, STEPS, BATCH, SEED_STEPS) setting: the main job's
    wall minutes, median (min-max) over its timed runs, and the load before each."""
    jobs = _main_jobs(study)
    if not jobs:
        return f"(not measured yet: `{MAIN_JOB_COMMAND}`)"
    lines = ["| CPU | encodings at a time (PARALLEL) | seeds (SEEDS) | steps (STEPS) "
             "| rows per batch (BATCH) | seeds stepped (SEED_STEPS) | timed runs | minutes "
             "| load (1 min) before | dates |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for kind, repeats in jobs.items():
        for (parallel, seeds, steps, batch, seed_steps), mine in _settings(repeats).items():
            # benchlib.runs.describe: "..., 2 CPUs (NAME, cpu@VENDOR-FAMILY-MODEL); jax ..."
            cpu = (mine[0]["device_line"].split("CPUs (", 1)[1].split("); jax", 1)[0]
                   if kind != "cpu" else "not recorded (before CPU kinds were told apart)")
            dates = sorted({r["started_at"].split()[0] for r in mine})
            lines.append(
                f"| {cpu} | {parallel} | {seeds} | {steps} | {batch} | {seed_steps} "
                f"| {len(mine)} "
                f"| {_spread([r['wall_s'] / 60 for r in mine], '{:.1f}'.format)} "
                f"| {_spread([r['load_before']['1min'] for r in mine], '{:.2f}'.format)} "
                f"| {', '.join(dates)} |")
    return "\n".join(lines)


VMAP_STEP_COMMAND = ("python benchmarks/bench_train.py --sections vmap_step --steps 20 "
                     "--repeats 5")


def _vmap_step_sections(study: Path) -> dict[str, dict]:
    """device kind -> its vmap_step section of vmap_seeds.json (the step alone, in-process)."""
    path = study / VMAP_FILE
    kinds = _read_json(path) if path.exists() else {}
    return {kind: mine["vmap_step"] for kind, mine in kinds.items() if "vmap_step" in mine}


def _step_visits(row: dict, mode: str, key: str) -> list[float]:
    return [v[mode][key] for v in row["visits"]]


def vmap_step_table(study: Path) -> str:
    """Per device and encoding, median (min-max) over the visits: the lone step's and the
    vmapped program's ms per step and cores busy, the vmapped ms per seed-step over the lone
    step's, and the vmapped program's model FLOPs per second over the achievable matmul's
    (- where the visits did not time it)."""
    sections = _vmap_step_sections(study)
    if not sections:
        return f"(not measured yet: `{VMAP_STEP_COMMAND}`, as in experiments/bench/commands.sh)"
    lines = ["| device | encoding | visits | lone step, ms | cores busy | seeds vmapped, ms "
             "| cores busy | vmapped per seed-step / lone step | vmapped, of the achievable |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind, section in sections.items():
        for row in section["rows"]:
            cells = [_spread(_step_visits(row, mode, key), fmt)
                     for mode in ("lone", "vmapped")
                     for key, fmt in (("ms_per_step", "{:.1f}".format),
                                      ("cores_busy", "{:.2f}".format))]
            ratio = _spread([v["per_seed_ratio"] for v in row["visits"]], "{:.2f}".format)
            fractions = _of_achievable(row, section, "vmapped")
            share = _spread(fractions, "{:.2f}".format) if fractions else "-"
            lines.append(f"| {kind} | {row['encoding']} | {len(row['visits'])} x "
                         f"{section['steps']} steps | {cells[0]} | {cells[1]} "
                         f"| {section['seeds']}: {cells[2]} | {cells[3]} | {ratio} | {share} |")
    return "\n".join(lines)


CPU_FLAGS_COMMAND = ("python benchmarks/bench_train.py --sections cpu_flags --processes 2 "
                     "--repeats 3 --steps 5")


def _cpu_flags_visits(section: dict) -> dict[str, tuple[str, list[dict]]]:
    """setting name -> (its label, every visit of every process under it), in the order
    measured: XLA's defaults on all cores and on one, then each flag on one core."""
    labels = {"default_all": f"XLA's defaults, {section['cores']} cores",
              "default_1": "XLA's defaults, 1 core",
              **{name: f"{label} (`{flags}`), 1 core"
                 for name, (label, flags) in section["flags"].items()}}
    out: dict[str, tuple[str, list[dict]]] = {}
    for row in section["rows"]:
        out.setdefault(row["setting"], (labels[row["setting"]], []))[1].extend(row["visits"])
    return out


def _measured_sections(study: Path, key: str) -> dict[str, dict]:
    """CPU kind -> its `key` section of vmap_seeds.json, where measured."""
    return {kind: mine[key] for kind, mine in _cpu_kind_sections(study, VMAP_FILE).items()
            if key in mine}


def _step_ms(visits: list[dict]) -> list[float]:
    return [1e3 * v["step_s"] for v in visits]


def cpu_flags_table(study: Path) -> str:
    """Per kind of CPU and setting, median (min-max) over every visit: the main job's RoPE
    step in ms, CPU seconds per step, and the medians' ratio to XLA's defaults on one core."""
    sections = _measured_sections(study, "cpu_flags")
    if not sections:
        return f"(not measured yet: `{CPU_FLAGS_COMMAND}`, as in experiments/bench/commands.sh)"
    lines = ["| CPU | setting | visits | step ms | CPU s/step | step / defaults on 1 core |",
             "|---|---|---|---|---|---|"]
    for kind, section in sections.items():
        settings = _cpu_flags_visits(section)
        default = statistics.median(_step_ms(settings["default_1"][1]))
        for label, visits in settings.values():
            lines.append(
                f"| {kind.removeprefix('cpu@')} | {label} | {len(visits)} "
                f"| {_spread(_step_ms(visits), '{:.0f}'.format)} "
                f"| {_spread([v['cpu_s'] for v in visits], '{:.3f}'.format)} "
                f"| {statistics.median(_step_ms(visits)) / default:.2f} |")
    return "\n".join(lines)


def _cpu_flags_values(study: Path) -> dict[str, float]:
    """cpu_flags@VENDOR-FAMILY-MODEL:NAME:step_ms (median, :lo, :hi over every visit) and
    :over_default (its median over that of XLA's defaults on one core) per setting; :visits,
    :processes (per setting), :spread_default (the default's max over min step) and
    :one_per_core_gain (steps per second of one one-core process per core over one process
    on all cores, on the medians, each timed alone: an upper bound, as processes side by side
    may slow each other)."""
    out: dict[str, float] = {}
    for kind, section in _measured_sections(study, "cpu_flags").items():
        prefix = f"cpu_flags@{kind.removeprefix('cpu@')}"
        settings = _cpu_flags_visits(section)
        default = _step_ms(settings["default_1"][1])
        for name, (_, visits) in settings.items():
            add_spread(out, f"{prefix}:{name}:step_ms", _step_ms(visits))
            out[f"{prefix}:{name}:over_default"] = (out[f"{prefix}:{name}:step_ms"]
                                                   / statistics.median(default))
        out[f"{prefix}:visits"] = len(settings["default_1"][1])
        out[f"{prefix}:processes"] = sum(r["setting"] == "default_1" for r in section["rows"])
        out[f"{prefix}:spread_default"] = max(default) / min(default)
        out[f"{prefix}:one_per_core_gain"] = (  # 2 one-core processes against 1 on all cores
            section["cores"] * out[f"{prefix}:default_all:step_ms"]
            / out[f"{prefix}:default_1:step_ms"])
    return out


# A section timing the main job's step two ways, each in its own process (bench_train.py's
# STEP_VARIANTS): section -> (its command, the column title of each way). Which way is posjax's
# comes from the record (`ways`: posjax's first).
STEP_VARIANT_SECTIONS = {
    "projections": ("POSJAX_CPUS=0 python benchmarks/bench_train.py --sections projections "
                    "--processes 3 --steps 10 --repeats 3 --main_batch 16",
                    {"matrix": "one matrix product", "general": "flax's product"}),
    "correctness": ("POSJAX_CPUS=0 python benchmarks/bench_train.py --sections correctness "
                    "--processes 3 --steps 10 --repeats 3",
                    {"compare": "first class at the max", "argmax": "jnp.argmax"}),
    "activation": ("POSJAX_CPUS=0 python benchmarks/bench_train.py --sections activation "
                   "--processes 3 --steps 10 --repeats 3",
                   {"recomputed": "gelu recomputed", "saved": "gelu saved"}),
}


def _variant_ms(section: dict) -> dict[tuple[str, str, str], list[list[float]]]:
    """(encoding, mode, way) -> per process of that way (in round order), its visits' ms per
    step."""
    out: dict[tuple[str, str, str], list[list[float]]] = {}
    for process in section["processes"]:
        for row in process["rows"]:
            for mode in ("lone", "vmapped"):
                out.setdefault((row["encoding"], mode, process["variant"]), []).append(
                    [v[mode]["ms_per_step"] for v in row["visits"]])
    return out


def _variant_cells(section: dict):
    """(encoding, mode, every visit of the other way, of posjax's, per-round ratios: the
    median of posjax's process over that of the other way's)."""
    ms, (mine, other) = _variant_ms(section), section["ways"]
    for encoding, mode in dict.fromkeys((e, m) for e, m, _ in ms):
        ratios = [statistics.median(a) / statistics.median(b) for a, b in zip(
            ms[encoding, mode, mine], ms[encoding, mode, other], strict=True)]
        yield (encoding, mode, sum(ms[encoding, mode, other], []),
               sum(ms[encoding, mode, mine], []), ratios)


def step_variant_table(study: Path, name: str) -> str:
    """Per kind of CPU, encoding and program (lone step, seeds vmapped): ms per step the other
    way and posjax's way, median (min-max) over every visit of every process, and posjax's
    over the other (medians of the processes of a round; median and min-max over the
    rounds)."""
    command, titles = STEP_VARIANT_SECTIONS[name]
    sections = _measured_sections(study, name)
    if not sections:
        return f"(not measured yet: `{command}`, as in experiments/bench/commands.sh)"
    mine, other = next(iter(sections.values()))["ways"]
    lines = [f"| CPU | cores | rows | encoding | program | rounds x visits | {titles[other]}, "
             f"ms/step | {titles[mine]}, ms/step | ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind, section in sections.items():
        for encoding, mode, theirs, ours, ratios in _variant_cells(section):
            program = "lone step" if mode == "lone" else f"{section['seeds']} seeds vmapped"
            lines.append(f"| {kind.removeprefix('cpu@')} | {section['cores']} "
                         f"| {section['batch_size']} | {encoding} "
                         f"| {program} | {len(ratios)} x {section['repeats']} "
                         f"| {_spread(theirs, '{:.1f}'.format)} "
                         f"| {_spread(ours, '{:.1f}'.format)} "
                         f"| {_spread(ratios, '{:.2f}x'.format)} |")
    return "\n".join(lines)


def _step_variant_values(study: Path) -> dict[str, float]:
    """SECTION@VENDOR-FAMILY-MODEL:ENCODING:MODE:ratio (per round, posjax's way's median ms per
    step over the other's: median, :lo, :hi) and :WAY_ms (every visit), MODE lone or
    vmapped; SECTION@KIND:rounds, :visits (per process), :cores and :rows, for each section
    of STEP_VARIANT_SECTIONS."""
    out: dict[str, float] = {}
    for name in STEP_VARIANT_SECTIONS:
        for kind, section in _measured_sections(study, name).items():
            prefix = f"{name}@{kind.removeprefix('cpu@')}"
            mine, other = section["ways"]
            for encoding, mode, theirs, ours, ratios in _variant_cells(section):
                cell = f"{prefix}:{encoding}:{mode}"
                add_spread(out, f"{cell}:ratio", ratios)
                add_spread(out, f"{cell}:{other}_ms", theirs)
                add_spread(out, f"{cell}:{mine}_ms", ours)
            out[f"{prefix}:rounds"] = 1 + max(p["round"] for p in section["processes"])
            out[f"{prefix}:visits"] = section["repeats"]
            out[f"{prefix}:cores"] = section["cores"]
            out[f"{prefix}:rows"] = section["batch_size"]
    return out


def tables(study: Path) -> dict[str, str]:
    return {"training": training_table(study), "allocator": allocator_table(study),
            "pipeline": pipeline_table(study), "compile": compile_table(study),
            "attention": attention_table(study), "peers": peers_table(study),
            "prepared": prepared_table(study), "fused": fused_table(study),
            "rope_apply": rope_apply_table(study), "long_eval": long_eval_table(study),
            "profile_attention": profile_table(study, "attention"),
            "profile_train": profile_table(study, "train"),
            "profile_rope": profile_table(study, "rope", plain="copy"),
            "profile_peer": peer_profile_table(study), "vmap": vmap_table(study),
            "vmap_runs": vmap_runs_table(study), "vmap_step": vmap_step_table(study),
            "main_job": main_job_table(study), "cpu_flags": cpu_flags_table(study),
            **{name: step_variant_table(study, name) for name in STEP_VARIANT_SECTIONS}}


def _speed_values(study: Path) -> dict[str, float]:
    """speed:* (train.json's speed table, the matmul peak) and speed_after_tables:*."""
    out: dict[str, float] = {}
    train = _load(study, "train.json")
    speed = train["speed"]
    out["speed:visits"] = len(speed["rows"][0]["visits"])
    out["speed:processes"] = len(speed["processes"])
    flops = speed["flops"]["flops"]
    out["speed:gflop_per_step"] = flops / 1e9
    for row in speed["rows"]:
        add_spread(out, f"speed:{row['encoding']}:ratio", [v["ratio_to_none"]
                                                            for v in row["visits"]])
        add_spread(out, f"speed:{row['encoding']}:mfu", [_of_matmul(v) for v in row["visits"]])
    after = study / "train_runs" / "speed_after_tables.json"
    if after.exists():  # the bias encodings' training step after the bucket tables
        for row in _read_json(after)["speed"]["rows"]:
            add_spread(out, f"speed_after_tables:{row['encoding']}:ratio",
                       [v["ratio_to_none"] for v in row["visits"]])
    # Each visit's fraction is of its own measured matmul: matmul = model FLOP/s / fraction.
    add_spread(out, "speed:matmul_gflop_s", [flops / v["step_s"] / _of_matmul(v) / 1e9
                                             for v in speed["rows"][0]["visits"]])
    return out


def _allocator_values(study: Path) -> dict[str, float]:
    """allocator:NAME:step_ms | cpu_s | faults | mfu, and the visits and processes."""
    out: dict[str, float] = {}
    train = _load(study, "train.json")
    by_allocator = _allocator_visits(study)
    out["allocator:processes"] = len({row["round"] for row in train["allocator"]["rows"]})
    out["allocator:visits"] = min(len(visits) for visits in by_allocator.values())
    for label, visits in by_allocator.items():
        name = next(short for short, start in ALLOCATORS if label.startswith(start))
        add_spread(out, f"allocator:{name}:step_ms", [1e3 * v["step_s"] for v in visits])
        add_spread(out, f"allocator:{name}:cpu_s", [v["cpu_s"] for v in visits])
        add_spread(out, f"allocator:{name}:faults", [v["page_faults"] for v in visits])
        add_spread(out, f"allocator:{name}:mfu", [_of_matmul(v) for v in visits])
    return out


def _pipeline_values(study: Path) -> dict[str, float]:
    """pipeline:FEED:step_ms, the overhead, and the pipeline alone."""
    out: dict[str, float] = {}
    train = _load(study, "train.json")
    blocks = _pipeline_blocks(study)
    for feed, per_step in blocks.items():
        add_spread(out, f"pipeline:{feed}:step_ms", per_step)
    add_spread(out, "pipeline:overhead", [p / m - 1 for p, m in zip(
        blocks["pipeline"], blocks["in_memory"], strict=True)])
    runs = train["pipeline"]["processes"]
    out["pipeline:blocks"], out["pipeline:processes"] = len(blocks["pipeline"]), len(runs)
    add_spread(out, "pipeline:alone_ms", [1e3 * r["pipeline_alone"]["wall_s_per_batch"]
                                          for r in runs])
    add_spread(out, "pipeline:alone_cpu_ms", [1e3 * r["pipeline_alone"]["cpu_s_per_batch"]
                                              for r in runs])
    return out


def _compile_values(study: Path) -> dict[str, float]:
    """compile:SETTING:COMMAND:compile_s | wall_s | hits | compiles, and the
    evaluation programs (also with eval.group_factor=1, train_runs/)."""
    out: dict[str, float] = {}
    train = _load(study, "train.json")
    out["compile:rounds"] = len({row["round"] for row in train["compile"]["rows"]})
    for setting, rows in _compile_rounds(study).items():
        for command in ("train", "extrapolate"):
            runs = [row[command] for row in rows]
            add_spread(out, f"compile:{setting}:{command}:compile_s",
                       [r["backend_compile_s"] for r in runs])
            add_spread(out, f"compile:{setting}:{command}:wall_s", [r["wall_s"] for r in runs])
            out[f"compile:{setting}:{command}:hits"] = statistics.median(
                r["cache_hits"] for r in runs)
            out[f"compile:{setting}:{command}:compiles"] = runs[0]["compiles"]
        out[f"compile:{setting}:eval_programs"] = _eval_programs(rows[0])
    group_1 = _load(study, "train_runs/compile_group_factor_1.json")["compile"]["rows"]
    add_spread(out, "compile:group_factor_1:extrapolate:compile_s",
               [row["extrapolate"]["backend_compile_s"] for row in group_1])
    out["compile:group_factor_1:eval_programs"] = _eval_programs(group_1[0])
    out["compile:group_factor_1:rounds"] = len(group_1)
    return out


def _attention_values(study: Path) -> dict[str, float]:
    """attention:ENCODING@LENGTH:*, rope_apply:*, memory:* and long:* of attention.json."""
    out: dict[str, float] = {}
    attention = _load(study, "attention.json")
    for encoding, by_length in _attention_rows(study).items():
        for length, row in by_length.items():
            for key in ("fwd_ratio", "fwd_bwd_ratio"):
                add_spread(out, f"attention:{encoding}@{length}:{key.removesuffix('_ratio')}",
                           [r[key] for r in row["rounds"]])
            add_spread(out, f"attention:{encoding}@{length}:fwd_ms",
                       [1e3 * r["fwd_s"] for r in row["rounds"]])
            for process in sorted({r.get("process", 0) for r in row["rounds"]}):
                out[f"attention:{encoding}@{length}:process{process + 1}_fwd_bwd_s"] = (
                    statistics.median(r["fwd_bwd_s"] for r in row["rounds"]
                                      if r.get("process", 0) == process))
    out["attention:rounds"] = len(attention["timing"][0].get("rounds", [None]))
    long = attention["long"] if isinstance(attention["long"], list) else [attention["long"]]
    out["attention:processes"] = len(long)
    rope = attention["rope_throughput"]
    add_spread(out, "rope_apply:fraction", [r["fraction_of_copy"]
                                            for r in rope.get("rounds", [rope])])
    add_spread(out, "rope_apply:tables_fraction", [r["tables_fraction_of_copy"]
                                                   for r in rope.get("rounds", [rope])])
    for row in attention["memory"]:
        for key, value in row.items():
            if key.endswith("_temp_bytes"):
                out[f"memory:{row['encoding']}@{row['length']}:"
                    f"{key.removesuffix('_temp_bytes')}_gib"] = value / GIB
                out[f"memory:{row['encoding']}@{row['length']}:"
                    f"{key.removesuffix('_temp_bytes')}_mib"] = value / MIB
    out["long:length"] = long[0]["length"]
    out["long:peak_rss_gib"] = max(run["process_peak_rss_bytes"] for run in long) / GIB
    out["long:fwd_temp_mib"] = long[0]["fwd_temp_bytes"] / MIB
    return out


def _prepared_values(study: Path) -> dict[str, float]:
    """prepared:*, prepared_before_tables:* and before_prepared:*: the attention
    files with the sites prepared once and (train_runs/) before."""
    out: dict[str, float] = {}
    # The prepared sites with the bucket tables, and (train_runs/) the prepared sites alone
    # and every kernel before them (the attention table of 2026-11-23's first run).
    for prefix, name in (("prepared", PREPARED_FILE),
                         ("prepared_before_tables",
                          "train_runs/attention_prepared_before_tables.json"),
                         ("before_prepared", "train_runs/attention_before_prepared.json")):
        if not (study / name).exists():
            continue
        for encoding, by_length in _attention_rows(study, name).items():
            for length, row in by_length.items():
                for key in ("fwd_ratio", "fwd_bwd_ratio"):
                    add_spread(out, f"{prefix}:{encoding}@{length}:"
                               f"{key.removesuffix('_ratio')}", [r[key] for r in row["rounds"]])
        rope = _load(study, name)["rope_throughput"]
        add_spread(out, f"{prefix}:rope_apply:fraction",
                   [r["fraction_of_copy"] for r in rope.get("rounds", [rope])])
        add_spread(out, f"{prefix}:rope_apply:tables_fraction",
                   [r["tables_fraction_of_copy"] for r in rope.get("rounds", [rope])])
    return out


def _peers_values(study: Path) -> dict[str, float]:
    """peers:*: against x-transformers, RoPE apply, fused attention and the long
    evaluation (peers.json's CPU section), for the sections measured."""
    out: dict[str, float] = {}
    for kind, key, train in _peers_train_sections(study):
        if kind != "cpu":
            size = train.get("size", "base")
            other_batch = size == "main" and train["batch_size"] != MAIN_BATCH  # as main_job's
            prefix = (f"peers@{kind.removeprefix('cpu@')}:{size}"
                      + (f":batch{train['batch_size']}" if other_batch else "")
                      + PEERS_TRAIN_SECTIONS[key])
            out[f"{prefix}:processes"] = train["processes"]
            for name, row in train["rows"].items():
                out[f"{prefix}:visits"] = len(row["visits"])
                add_spread(out, f"{prefix}:{name}:ratio", [v["ratio"] for v in row["visits"]])
                for system in ("posjax", "x-transformers"):
                    add_spread(out, f"{prefix}:{name}:{system}_tokens_s",
                               [v["tokens_per_s"][system] for v in row["visits"]])
    peers = _peers(study)
    if "train" in peers:
        rows = peers["train"]["rows"]
        out["peers:visits"] = len(next(iter(rows.values()))["visits"])
        out["peers:processes"] = peers["train"]["processes"]
        for name, row in rows.items():
            add_spread(out, f"peers:{name}:ratio", [v["ratio"] for v in row["visits"]])
            for system in ("posjax", "x-transformers"):
                add_spread(out, f"peers:{name}:{system}_tokens_s",
                           [v["tokens_per_s"][system] for v in row["visits"]])
    if "rope" in peers:
        for case in ("one_call", "four_layers"):
            add_spread(out, f"peers:rope_apply:{case}",
                       [v[case]["fraction_of_copy"] for v in peers["rope"]["visits"]])
    if "fused" in peers:
        for name in _fused_encodings(peers["fused"]):
            add_spread(out, f"peers:fused:{name}:ratio",
                       [v[name]["fused_over_dense"] for v in peers["fused"]["visits"]])
    if "long" in peers:
        for name, row in peers["long"]["rows"].items():
            for n, compiled in row["compiled"].items():
                out[f"peers:long:{name}@{n}:compiled_gib"] = compiled["total"] / GIB
            if "run" in row:
                out[f"peers:long:{name}:peak_rss_gib"] = row["run"]["peak_rss"] / GIB
                out[f"peers:long:{name}:run_s"] = row["run"]["seconds"]
    return out


def values(study: Path) -> dict[str, float]:
    """Every quoted number of the benchmark pages, section by section (VALUES)."""
    out: dict[str, float] = {}
    for section in VALUES.values():
        out.update(section(study))
    return out


def _profile_values(study: Path) -> dict[str, float]:
    """profile:SECTION:CASE:wall_ms | CATEGORY_ms | over_plain_ms | addedI_ms (the I-th
    largest addition over the section's plain case), and profile:peer:* for the peer."""
    out: dict[str, float] = {}
    profile = _profile(study)
    if "attention" in profile:
        out["profile:visits"] = len(profile["attention"]["visits"]["none"])
        out["profile:processes"] = profile["attention"]["processes"]
    for section, plain in (("attention", "none"), ("train", "none"), ("rope", "copy")):
        if section not in profile:
            continue
        cases = profile[section]["visits"]
        for name, visits in cases.items():
            key = f"profile:{section}:{name}"
            add_spread(out, f"{key}:wall_ms", [1e3 * v["wall_s"] for v in visits])
            add_spread(out, f"{key}:op_ms", [1e3 * v["op_s"] for v in visits])
            for label, names in PROFILE_GROUPS:
                add_spread(out, f"{key}:{label}_ms", _category_ms(visits, names))
            if name == plain:
                continue
            add_spread(out, f"{key}:over_plain_ms",
                       [1e3 * (v["wall_s"] - b["wall_s"])
                        for v, b in zip(visits, cases[plain], strict=True)])
            for i, (_, added) in enumerate(_added_sources(visits, cases[plain]), start=1):
                add_spread(out, f"{key}:added{i}_ms", added)
    if "peer" in profile:
        visits = profile["peer"]["visits"]
        add_spread(out, "profile:peer:wall_ms", [1e3 * v["wall_s"] for v in visits])
        add_spread(out, "profile:peer:matmul_ms", _category_ms(visits, PEER_MATMUL))
        add_spread(out, "profile:peer:other_ms", _category_ms(visits, ("other",)))
        # The posjax step that would be PEERS_TARGET times as fast as the peer's.
        add_spread(out, "profile:peer:target_step_ms",
                   [1e3 * v["wall_s"] / PEERS_TARGET for v in visits])
    return out


def _vmap_values(study: Path) -> dict[str, float]:
    """vmap:* (vmap_seeds.json's first CPU section) and vmap@VENDOR-FAMILY-MODEL:* (a kind
    of CPU told apart): each mode's wall_s, first_step_s and tokens_per_s, the ratio of the
    medians (:lo/:hi by repeat), max_rel_diff, table_shift, parallel (runs at a time); main_job:*
    (`bash scripts/run.sh` timed whole, the first record): wall_min, load_1min, runs and
    max_rel_diff of its perplexities from the first seed-by-seed repeat's."""
    out: dict[str, float] = {}
    sections = _vmap_sections(study)
    for kind, mine in sections.items():
        tag = "vmap" + ("" if kind == "cpu" else f"@{kind.removeprefix('cpu@')}")
        s = sweeps.summary(mine["repeats"], mine["target"])
        out[f"{tag}:ratio"], out[f"{tag}:ratio:lo"], out[f"{tag}:ratio:hi"] = (
            s["ratio"], s["ratio_min"], s["ratio_max"])
        out[f"{tag}:beyond_rtol"], out[f"{tag}:max_rel_diff"] = _vmap_agreement(mine)
        out[f"{tag}:table_shift"] = _vmap_table_shift(mine)
        out[f"{tag}:parallel"] = mine.get("parallel", 1)
        for mode in sweeps.MODES:
            out[f"{tag}:{mode}:repeats"] = s[mode]["n"]
            add_spread(out, f"{tag}:{mode}:wall_s", [r["wall_s"] for r in mine["repeats"]
                                                     if r["mode"] == mode])
            for key in ("first_step_s", "tokens_per_s"):
                add_spread(out, f"{tag}:{mode}:{key}", _vmap_runs(mine, mode, key))
    section = sections.get("cpu")
    job = _main_jobs(study).get("cpu")
    if job:  # the record made before CPU kinds were told apart: one repeat, one at a time
        job = job[0]
        out["main_job:wall_min"] = job["wall_s"] / 60
        out["main_job:load_1min"] = job["load_before"]["1min"]
        out["main_job:runs"] = len(job["runs"])
        if section:
            reference = next(r["runs"] for r in section["repeats"] if r["mode"] == "seed_by_seed")
            out["main_job:max_rel_diff"] = sweeps.disagreements(reference, job["runs"])[1]
    return out


def _main_job_values(study: Path) -> dict[str, float]:
    """main_job@VENDOR-FAMILY-MODEL:parallelP:seedsS:* per kind of CPU and setting (a run
    of other than the study's 600 steps of 16 rows tagged :stepsN and :batchB after seedsS,
    seeds stepped other than vmapped tagged :in_turn after those):
    repeats, wall_min, load_1min, repeatI:wall_min (the I-th timed run, in the order run),
    share:PHASE of the runs' time, max_rel_diff_main (3 seeds of a budget MAIN_RECORDS
    records: from that study's perplexities); main_job@KIND:seeds3:parallelP_gain (one
    encoding at a time over P at a time, medians; :stepsN and :batchB after seeds3 for
    another budget, as above); main_job@KIND:parallelP:seedsS[budget]:in_turn_over_vmap
    (seeds stepped in turn over vmapped, medians)."""
    out: dict[str, float] = {}
    recorded = _recorded_runs(study)
    for kind, repeats in _main_jobs(study).items():
        if kind == "cpu":
            continue
        tag = f"main_job@{kind.removeprefix('cpu@')}"
        settings = _settings(repeats)
        for (parallel, seeds, steps, batch, seed_steps), mine in settings.items():
            budget = (f":steps{steps}" if steps != MAIN_STEPS else "") + (
                f":batch{batch}" if batch != MAIN_BATCH else "")
            way = f":{seed_steps}" if seed_steps != "vmap" else ""
            name = f"{tag}:parallel{parallel}:seeds{seeds}{budget}{way}"
            out[f"{name}:repeats"] = len(mine)
            add_spread(out, f"{name}:wall_min", [r["wall_s"] / 60 for r in mine])
            for index, repeat in enumerate(mine, start=1):  # in the order they were run
                out[f"{name}:repeat{index}:wall_min"] = repeat["wall_s"] / 60
            add_spread(out, f"{name}:load_1min", [r["load_before"]["1min"] for r in mine])
            phased = [p for p in map(_phase_seconds, mine) if p]
            for phase in ("setup", "first_steps", "steps", "checkpoints", "score"):
                if phased:
                    add_spread(out, f"{name}:share:{phase}", [
                        p.get(phase, 0.0) / sum(p.values()) for p in phased])
            used = [u for u in map(_core_use, mine) if u]
            for key in ("idle_share", "packed_min", "startup_s"):
                if used:
                    add_spread(out, f"{name}:{key}", [u[key] for u in used])
            if seeds == 3 and recorded.get((steps, batch)):
                out[f"{name}:max_rel_diff_main"] = max(
                    sweeps.disagreements(recorded[steps, batch], r["runs"])[1] for r in mine)
            alone = (1, 3, steps, batch, seed_steps)
            if seeds == 3 and parallel > 1 and alone in settings:
                out[f"{tag}:seeds3{budget}{way}:parallel{parallel}_gain"] = (
                    statistics.median(r["wall_s"] for r in settings[alone])
                    / statistics.median(r["wall_s"] for r in mine))
            vmapped = (parallel, seeds, steps, batch, "vmap")
            if seed_steps == "in_turn" and vmapped in settings:
                out[f"{name.removesuffix(way)}:in_turn_over_vmap"] = (
                    statistics.median(r["wall_s"] for r in mine)
                    / statistics.median(r["wall_s"] for r in settings[vmapped]))
    return out


def _vmap_step_values(study: Path) -> dict[str, float]:
    """vmap_step:ENCODING:* (the first record, "cpu") and vmap_step@VENDOR-FAMILY-MODEL:
    ENCODING:* (a kind of CPU told apart): per_seed_ratio, each mode's ms_per_step and
    cores_busy; for a kind, lone_over_first: its lone step over the first record's. Where
    the visits timed the achievable matmul: each mode's of_achievable, achievable_gflops,
    main_job_tflops (the main job's training FLOPs), main_job_floor_min (those FLOPs at the
    median achievable rate) and ten_minutes_of_achievable (the rate's share ten minutes
    would need)."""
    out: dict[str, float] = {}
    sections = _vmap_step_sections(study)
    first = sections.get("cpu", {}).get("rows", [])
    for kind, section in sections.items():
        prefix = "vmap_step" + ("" if kind == "cpu" else f"@{kind.removeprefix('cpu@')}")
        for row in section.get("rows", []):
            name = f"{prefix}:{row['encoding']}"
            add_spread(out, f"{name}:per_seed_ratio",
                       [v["per_seed_ratio"] for v in row["visits"]])
            for mode in ("lone", "vmapped"):
                for key in ("ms_per_step", "cores_busy"):
                    add_spread(out, f"{name}:{mode}:{key}", _step_visits(row, mode, key))
            _add_of_achievable(out, name, row, section)
            ours = [r for r in first if r["encoding"] == row["encoding"]]
            if kind != "cpu" and ours:
                out[f"{name}:lone_over_first"] = (
                    statistics.median(_step_visits(row, "lone", "ms_per_step"))
                    / statistics.median(_step_visits(ours[0], "lone", "ms_per_step")))
        rates = [v["matmul"]["flops_per_s"] for r in section.get("rows", [])
                 for v in r["visits"] if "matmul" in v]
        if rates:
            add_spread(out, f"{prefix}:achievable_gflops", [r / 1e9 for r in rates])
            floor = section["main_job_flops"] / statistics.median(rates) / 60
            out.update({f"{prefix}:main_job_floor_min": floor,
                        f"{prefix}:ten_minutes_of_achievable": floor / 10,
                        f"{prefix}:main_job_tflops": section["main_job_flops"] / 1e12})
    return out


def _of_achievable(row: dict, section: dict, mode: str) -> list[float]:
    """Per visit that timed the achievable matmul: `mode`'s model FLOPs per second (lone:
    one seed's, vmapped: the section's seeds') over that visit's achievable rate."""
    flops = section.get("flops_per_seed_step", {}).get("flops")
    seeds = 1 if mode == "lone" else section["seeds"]
    return [seeds * flops / (v[mode]["ms_per_step"] / 1e3) / v["matmul"]["flops_per_s"]
            for v in row["visits"] if flops and "matmul" in v]


def _add_of_achievable(out: dict, name: str, row: dict, section: dict) -> None:
    """NAME:MODE:of_achievable (`_of_achievable`), in sections that time it."""
    for mode in ("lone", "vmapped"):
        fractions = _of_achievable(row, section, mode)
        if fractions:
            add_spread(out, f"{name}:{mode}:of_achievable", fractions)


def _profile_main_values(study: Path) -> dict[str, float]:
    """profile_main@VENDOR-FAMILY-MODEL:ENCODING:wall_ms | op_ms | GROUP_ms (PROFILE_GROUPS)
    and :visits: the train step of the main job's model profiled on a kind of CPU
    (profile_main.json: bench_profile.py --sections train,peer --size main); :peer:wall_ms |
    matmul_ms | other_ms for x-transformers' RoPE step of the same model."""
    out: dict[str, float] = {}
    for kind, mine in _cpu_kind_sections(study, "profile_main.json").items():
        if "train" in mine:
            out[f"profile_main@{kind.removeprefix('cpu@')}:processes"] = mine["train"]["processes"]
        for name, visits in mine.get("train", {}).get("visits", {}).items():
            key = f"profile_main@{kind.removeprefix('cpu@')}:{name}"
            out[f"{key}:visits"] = len(visits)
            add_spread(out, f"{key}:wall_ms", [1e3 * v["wall_s"] for v in visits])
            add_spread(out, f"{key}:op_ms", [1e3 * v["op_s"] for v in visits])
            for label, names in PROFILE_GROUPS:
                add_spread(out, f"{key}:{label}_ms", _category_ms(visits, names))
        if "peer" in mine:  # x-transformers' RoPE step of the same model, torch.profiler
            key, visits = f"profile_main@{kind.removeprefix('cpu@')}:peer", mine["peer"]["visits"]
            add_spread(out, f"{key}:wall_ms", [1e3 * v["wall_s"] for v in visits])
            add_spread(out, f"{key}:matmul_ms", _category_ms(visits, PEER_MATMUL))
            add_spread(out, f"{key}:other_ms", _category_ms(visits, ("other",)))
    return out


ROUNDING = "train_runs/vmap_rounding_none"
# Checkpoints of the rounding runs' losses (1-based steps).
ROUNDING_STEPS = (1, 100, 200, 300, 400, 500, 600)


def _rounding_values(study: Path) -> dict[str, float]:
    """rounding:{vmapped,alone_no_ynn}:loss_ppm@STEP and :ppl_rel_max: the main job's NoPE
    seed 1 trained vmapped (seeds 0-2) and alone with XLA:CPU's YNNPACK fusions off, each
    against the same seed alone: the training loss's relative difference at each of
    ROUNDING_STEPS (parts per million) and the largest relative difference of the
    perplexities."""
    def losses(name):
        return [json.loads(line)["loss"]
                for line in (study / ROUNDING / name / "metrics.jsonl").read_text().splitlines()]

    def ppl(name):
        return {r["length"]: r["ppl"]
                for r in _load(study, f"{ROUNDING}/{name}/extrapolation.json")["lengths"]}

    out: dict[str, float] = {}
    alone, alone_ppl = losses("alone"), ppl("alone")
    for name in ("vmapped", "alone_no_ynn"):
        theirs, their_ppl = losses(name), ppl(name)
        for step in ROUNDING_STEPS:
            out[f"rounding:{name}:loss_ppm@{step}"] = 1e6 * (
                abs(theirs[step - 1] - alone[step - 1]) / alone[step - 1])
        out[f"rounding:{name}:ppl_rel_max"] = max(abs(their_ppl[k] - v) / v
                                                  for k, v in alone_ppl.items())
    return out


GELU_ROUNDING = "train_runs/gelu_rounding"


def _gelu_rounding_values(study: Path) -> dict[str, float]:
    """gelu_rounding:ENCODING:loss_rel_max and :ppl_rel_max: the main job's runs of an
    encoding (its seeds vmapped, 600 steps of 8 rows, one core each) trained with the MLP's
    gelu recomputed in the backward pass against saved: the largest relative difference of
    any logged training loss and of any perplexity over the seeds; :runs, the runs
    compared."""
    out: dict[str, float] = {}
    folder = study / GELU_ROUNDING
    for run in sorted(p.name for p in (folder / "saved").iterdir()):
        encoding = run.split(",")[0]
        ways = {way: folder / way / run for way in ("saved", "recomputed")}
        loss = {way: [json.loads(line)["loss"] for line in
                      (path / "metrics.jsonl").read_text().splitlines()]
                for way, path in ways.items()}
        ppl = {way: [r["ppl"] for r in json.loads(
            (path / "extrapolation.json").read_text())["lengths"]] for way, path in ways.items()}
        for name, got in (("loss", loss), ("ppl", ppl)):
            key = f"gelu_rounding:{encoding}:{name}_rel_max"
            out[key] = max(out.get(key, 0.0), *(abs(a - b) / abs(b) for a, b in zip(
                got["recomputed"], got["saved"], strict=True)))
        out[f"gelu_rounding:{encoding}:runs"] = out.get(f"gelu_rounding:{encoding}:runs", 0) + 1
    return out


# seed_steps_cpu/ab.sh's files: one core, then both cores (names' prefix), of the first kind
# of CPU measured (AMD EPYC family 25, model 1: no tag) and of the others (ab.sh's KIND, the
# files' suffix: ab-KIND.json).
SEED_STEPS_AB = {"": "seed_steps_cpu/ab.json", "two_cores:": "seed_steps_cpu/ab_two_cores.json"}


def _seed_steps_kinds(study: Path) -> list[str]:
    """"" for the first kind, then "@KIND" for each other kind's ab-KIND.json, in name order."""
    return ["", *(f"@{p.stem.removeprefix('ab-')}"
                  for p in sorted((study / "seed_steps_cpu").glob("ab-*.json")))]


def _seed_steps_values(study: Path) -> dict[str, float]:
    """seed_steps_cpu[@KIND]:[two_cores:]WAY:steps_s (:lo/:hi by repeat): the training steps'
    seconds of seed_steps_cpu/ab.sh's runs, vmapped against stepped in turn, on one core and
    on both; seed_steps_cpu[@KIND]:[two_cores:]in_turn_over_vmap, the ratio of their
    medians."""
    out: dict[str, float] = {}
    for kind in _seed_steps_kinds(study):
        for prefix, name in SEED_STEPS_AB.items():
            if kind:
                name = name.replace(".json", f"-{kind.removeprefix('@')}.json")
            runs = _load(study, name)["runs"]
            tag = f"seed_steps_cpu{kind}:{prefix}"
            for way in sorted({r["way"] for r in runs}):
                add_spread(out, f"{tag}{way}:steps_s",
                           [r["seconds"]["steps"] for r in runs if r["way"] == way])
            out[f"{tag}in_turn_over_vmap"] = (out[f"{tag}in_turn:steps_s"]
                                              / out[f"{tag}vmap:steps_s"])
    return out


def _h200_values(study: Path) -> dict[str, float]:
    """h200@CALL:... of the H200's calls of scripts/gpu_check.sh (nvidia-h200/CALL/; CALL
    session1: the first session's files, in nvidia-h200/ itself):
    STAGE_bB:LABEL:tokens_k | step_ms | mfu | mfu_palm | over_rope (the speed and flash
    stages, median and :lo/:hi over the visits, MFU a fraction of the datasheet's dense
    bfloat16 peak); long:LABEL@L:tokens_k | over_rope | memory_gib | step_ms, and for a label naming
    its kernel (alibi@fused) over_auto | memory_over_auto against the kernel `auto` ran;
    stage:NAME:seconds."""
    out: dict[str, float] = {}
    peak, _ = datasheet_peak("NVIDIA H200", "bfloat16")
    record = study / "nvidia-h200"
    for call in [record, *sorted(record.glob("call*"))]:  # the first session's files: record/
        key = f"h200@{'session1' if call == record else call.name}"
        for path in sorted(call.glob("*_b*.json")):
            stage, raw = path.stem, _read_json(path)  # speed_b64, flash_b64, peers_b16
            if "speed" in raw:
                for label, figures in speed_figures(raw["speed"], peak).items():
                    for figure, per_visit in figures.items():
                        add_spread(out, f"{key}:{stage}:{label}:{figure}", per_visit)
            else:  # posjax's tokens/s over x-transformers', visit by visit
                (section,) = raw.values()
                for label, row in section["train"]["rows"].items():
                    add_spread(out, f"{key}:{stage}:{label}:ratio",
                               [v["ratio"] for v in row["visits"]])
        if (call / "long.json").exists():
            rows = long_figures(_read_json(call / "long.json")["long"])
            for (label, length), row in rows.items():
                name = f"{key}:long:{label}@{length}"
                out[f"{name}:tokens_k"], out[f"{name}:memory_gib"] = (row["tokens_k"],
                                                                      row["memory_gib"])
                if row["over_rope"] is not None:
                    out[f"{name}:over_rope"] = row["over_rope"]
                add_spread(out, f"{name}:step_ms", row["step_ms"])
                auto = rows.get((label.partition("@")[0], length))  # the kernel auto ran
                if "@" in label and auto:
                    out[f"{name}:over_auto"] = row["tokens_k"] / auto["tokens_k"]
                    out[f"{name}:memory_over_auto"] = row["memory_gib"] / auto["memory_gib"]
        if (call / "gpu_check.json").exists():
            for name, stage in _read_json(call / "gpu_check.json")["stages"].items():
                out[f"{key}:stage:{name}:seconds"] = stage["seconds"]
    return out


# Each part of the benchmark pages' numbers: name -> its function of the study folder.
VALUES = {"speed": _speed_values, "rounding": _rounding_values, "allocator": _allocator_values,
          "pipeline": _pipeline_values, "compile": _compile_values,
          "attention": _attention_values, "prepared": _prepared_values,
          "peers": _peers_values, "profile": _profile_values, "vmap": _vmap_values,
          "main_job": _main_job_values, "vmap_step": _vmap_step_values,
          "profile_main": _profile_main_values, "cpu_flags": _cpu_flags_values,
          "step_variants": _step_variant_values, "seed_steps": _seed_steps_values,
          "gelu_rounding": _gelu_rounding_values, "h200": _h200_values}
