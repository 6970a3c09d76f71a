"""Benchmark posjax training: step speed and model FLOP utilisation, input pipeline, compiles.

    .venv/bin/python benchmarks/bench_train.py [--encodings none,rope,...] [--steps 3]
        [--repeats 3] [--processes 1] [--quick] [--sections speed,pipeline,compile,long]
        [--json experiments/bench/train.json]

The model is the default small causal LM (configs/lm.py size=base: d_model 256, 4 layers,
4 heads of 64, MLP 1024, byte vocabulary 260) at seq_len 512, batch 8, trained by the real
jitted `posjax.train.steps.train_step` (AdamW, donated state) exactly as the trainer calls it.
Sections (--sections, default speed; each printed and written, atomically, under its key of
the JSON file; keys of sections not run this time are kept from the file):

  speed     per encoding, on one batch already on the device: seconds per step
            (median of every timed step; warm-up steps excluded; each step waited for with
            block_until_ready), tokens/s, ratio to `none`, and model FLOP utilisation by the
            field's convention (PaLM, MaxText, llm.c; benchmarks/benchlib/peaks.py)
                MFU = model FLOPs per step / step seconds / datasheet dense peak,
                model FLOPs = 6 N B L + 12 layers B L^2 (H Dh) / 2
            N = weights used in matrix multiplies (every `kernel` of the `none` model: q, k,
            v, out, MLP and output head; embeddings are lookups), 6 = forward 2 + backward 4
            per weight and token; the attention term is QK^T and PV (2 L^2 H Dh FLOPs each
            forward, times 3 with the backward) halved because only the causal triangle is
            useful work (PaLM's count, printed beside it, does not halve it). Encoding-specific
            work (relative embeddings, biases) is overhead, not model FLOPs, so every encoding
            is held to the same count. The peak is the datasheet's for
            jax.devices()[0].device_kind in the model's compute dtype, one device's, against
            each device's share of the FLOPs (the step runs on every device); a device
            without one (a CPU) gets no MFU. Beside it, "of the achievable": that share over
            the matmul rate this device reaches, chains of 10 square products (--matmul_sizes)
            under one synchronisation, the best chain of each visit, interleaved with the
            steps (round-robin) so machine load hits both alike. Also per step: process CPU
            seconds (all threads), page faults, and the CPU-time figure (model FLOPs per CPU
            second over the matmul's FLOPs per CPU second), which other processes on a
            shared machine disturb much less than wall time. --memory: each step compiled
            ahead of time and its memory analysis recorded.
            A repeat is one visit (a round-robin pass of --steps steps per encoding): each
            row keeps every visit's median step, ratio to `none` (same visit), MFU and
            fraction of the achievable (that visit's matmul). With --processes N the section
            runs in N fresh processes one
            after another, and the rows give the median, min and max over all N x --repeats
            visits, so the spread between processes (compiles, memory layout) is in them.
  pipeline  the trainer's loop body (next batch from the grain train_iterator,
            device_put, train_step, accumulate) against the same loop on the in-memory batch,
            same step count, interleaved; with --processes N in N fresh processes, the
            overhead's median, min and max taken over every block of all of them.
  allocator the speed section for one encoding in child processes under each host allocator
            setting, alternated over --processes rounds (at least 2), each keeping its
            process's --repeats visits: glibc's default, glibc with transparent huge pages
            for its mappings (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, which the `posjax`
            command and this script run with: posjax/launch/hostenv.py), and jemalloc keeping freed
            pages (LD_PRELOAD, if installed). XLA:CPU allocates each step's scratch anew;
            how the allocator returns it to the kernel decides the page faults.
  long      per --long_shapes length x batch and encoding of --encodings (given as is), the
            step compiled ahead of time, its memory analysis (temp + argument + output
            bytes) and the median of --steps timed steps (0: compile only); an
            out-of-memory or a failed compile is the row's status, not a crash.
  compile   separate `posjax train` + `posjax extrapolate` processes of one run
            without a persistent compilation cache, then with an empty and a warm one, for
            the cache settings before (JAX's default: entries that took >= 1 s to compile)
            and after (every entry, as `posjax sweep` now sets); compile seconds from JAX's
            own monitoring events, per jitted function; --processes rounds over the settings.
  vmap      the README's main job (`posjax sweep --config=configs/lm.py:study=main,seeds=3`,
            --vmap_arg) with each encoding's seeds in one vmapped program (--vmap_seeds)
            against the same sweep seed by seed, --vmap_parallel runs at a time (1 unless
            given; run.sh runs one per core): --repeats of each, alternated (seed by seed,
            vmapped, seed by seed, ...), each a fresh sweep directory, fresh processes and a
            cold compilation cache (the sweep's own). Every repeat is written as it ends, into
            --vmap_json's section of this device kind: the sweep's wall seconds and, per run,
            its seconds, first step (compilation included), tokens/s and perplexities, checked
            against the first seed-by-seed repeat's (rtol --vmap_rtol). All 7 encodings run as
            one `posjax sweep`, as scripts/run.sh does; a subset (--vmap_encodings) as one per
            encoding. This process never touches the device (the device line comes from a
            fresh one), so it runs unchanged on a GPU.
  vmap_step the step alone, in this process: the main job's model (configs/lm.py size=main,
            seq_len 128, batch 16) stepped by the trainer's `train_step` against
            `train_steps` of --vmap_seeds seeds (`posjax train --seeds`'s program), per
            encoding of --vmap_step_encodings, alternated over --repeats visits of --steps
            steps each: wall ms per step, CPU cores busy (process CPU s / wall s) and the
            vmapped program's ms per seed-step over the lone step's ms. Where one lone step
            already keeps the device busy, that ratio is near 1 and a vmapped sweep saves
            only its processes' start and compilation; below 1 is the room vmap fills.
            Each visit ends with the achievable matmul (as the speed section's), so each
            step's model FLOPs per second is also a fraction of it; the section records the
            model FLOPs of one seed's step (of the first encoding's model, none by default:
            every encoding is held to the same count) and of the main job's training (its
            encodings x --vmap_seeds seeds x configs/lm.py size=main's steps), whose time
            at that rate is what no implementation of the same model and budget can go
            below.
            Written into --vmap_json's section of this device kind.
  projections the step alone with the model's projections multiplied as
            posjax multiplies them (posjax.models.layers.matrix_dot_general: one matrix
            product of [B*L, D] rows) against nnx.LinearGeneral's own lax.dot_general on the
            [B, L, D] inputs: the main job's model (size main, seq_len 128, --main_batch
            rows) per encoding of --vmap_step_encodings, the lone step and --vmap_seeds seeds
            vmapped. Each way runs in its own fresh process (the step_variant section: both
            programs, alternated over --repeats visits of --steps steps), the ways
            alternated over --processes rounds (at least 2). Run it with POSJAX_CPUS=0 for
            the main job's one core per encoding. Written into --vmap_json's section of this
            device kind.
  correctness the projections section's measurement with the step's token correctness
            computed as posjax computes it (posjax.train.steps.argmax_is: the first class at
            the maximum) against `jnp.argmax(logits, -1) == targets`; each process also times
            that function alone (row `alone`, ms per call) on random logits of the shape the
            last encoding's lone and vmapped steps score.
  activation the projections section's measurement with the MLP's gelu as posjax computes
            it (posjax.models.layers.gelu: recomputed in the backward pass from its input)
            against jax.nn.gelu as autodiff keeps it (its intermediate arrays saved).
  cpu_flags the speed section on the main job's model (size main, seq_len 128, batch 16) for
            --encoding, in a fresh process per setting, the settings alternated over
            --processes rounds (at least 2): XLA's defaults on all this process's cores and
            on one core (POSJAX_CPUS, as the main job trains each encoding), then on that core
            each XLA:CPU flag of CPU_FLAGS (oneDNN, XNNPACK, YNNPACK fusions off, fast math,
            512-bit vectors, the concurrency-optimised scheduler). A CPU-only section, written
            into --vmap_json's section of this device kind.
  main_job  the README's first command whole, `bash scripts/run.sh --main_job_dir` (its
            install check, the sweep with each encoding's seeds in one program, vmapped or
            as --main_job_seed_steps says (run.sh's SEED_STEPS), the plots), once,
            into a directory that must not hold a run yet, with --main_job_parallel
            encodings at a time (run.sh's PARALLEL; default run.sh's own: one per CPU core)
            and --main_job_seeds seeds each (SEEDS, default 3) of --main_job_steps steps
            (STEPS, default 600) of --main_job_batch rows (BATCH, default run.sh's
            8): its wall seconds (and of its steps: install check and decay analysis, sweep,
            plot, from when each wrote its files) with the machine's load before and after,
            the steps and batch its runs trained, their seconds and perplexities and the
            commit timed (git_commit, git_dirty), appended to the repeats of
            --vmap_json's section of this device kind. The compilation cache starts empty,
            as on a fresh clone. The directory is kept, for scripts/collect_results.py.
"""

from __future__ import annotations

import argparse
import ctypes.util
import functools
import os
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from unittest import mock

import jax
import jax.numpy as jnp

from benchlib import peaks, sweeps
from benchlib.flags import Parser, at_least, run_script, sizes_list
from benchlib.runs import (
    ROOT,
    describe,
    device_section,
    fresh_device,
    fresh_result,
    in_processes,
    load,
    record,
    rewrite,
    summarise,
    tagged,
    verdict,
)
from benchlib.steps import LM, Trainee
from posjax import attention, encoders, fileio, provenance
from posjax.config import load_config_module
from posjax.launch import hostenv
from posjax.models import layers
from posjax.train import steps as train_steps

ENCODINGS = ("none", "learned", "sinusoidal", "rope", "xpos", "alibi", "t5", "kerple_log",
             "fire", "shaw", "xl", "deberta")
QUICK_ENCODINGS = ("none", "rope", "alibi", "shaw")
ROTARY = ("rope", "xpos")
MFU_TARGET = 0.4  # rotary encodings, of the datasheet peak
# The vmapped sweep in at most this fraction of the seed-by-seed wall time, on the medians.
VMAP_TARGET = 0.6
_LM = load_config_module(str(LM))
MAIN_ENCODINGS = _LM.MAIN_ENCODINGS
MAIN_SIZE = _LM.SIZES["main"]  # the main study's model, batch and steps (run.sh: 8 rows)
# The vmap section's --quick sweep: smoke-sized models of one encoding, evaluated at 32 and 64.
QUICK_VMAP = dict(vmap_encodings="rope",
                  vmap_arg="study=main,seeds=3,smoke=true,seq_len=32,eval_max_factor=2")


def parse_args(argv=None):
    p = Parser(__doc__, output="experiments/bench/train.json",
               sections=(*SECTIONS, *OWN_FILE_SECTIONS),
               default_sections="speed", child=True,
               processes_help="speed, pipeline: fresh processes, one after another, each with "
               "--repeats visits; allocator, compile: rounds over the settings, each "
               "measurement a fresh process",
               quick={"encodings": ",".join(QUICK_ENCODINGS), "steps": 2, "repeats": 2,
                      "compile_lengths": "512,1024", **QUICK_VMAP})
    p.add_argument("--encodings", default=",".join(ENCODINGS),
                   help="comma-separated names; NAME@KERNEL runs NAME on attention=KERNEL "
                   "(t5@flash_bias)")
    p.add_argument("--seq_len", type=at_least(2), default=512)
    p.add_argument("--batch_size", type=at_least(1), default=8)
    p.add_argument("--steps", type=at_least(0), default=3, help="timed steps per visit (0: "
                   "the long section compiles its steps into the cache and times none)")
    p.add_argument("--warmup", type=at_least(0), default=2, help="untimed steps after compiling")
    p.add_argument("--matmul_sizes", default=None, type=sizes_list,
                   help="comma-separated sizes of the achievable matmul's square products "
                   "(default peaks.matmul_sizes(platform): 256,512 on a CPU, 4096,8192 on an "
                   "accelerator, where 2048 measures the launch, not the multiply)")
    p.add_argument("--memory", action="store_true",
                   help="speed: compile each step ahead of time and record its memory analysis")
    p.add_argument("--long_shapes", default="4096x8,8192x4",
                   help="the long section's comma-separated LENGTHxBATCH")
    p.add_argument("--size", default="base", help="configs/lm.py size of the speed, pipeline "
                   "and allocator sections' model (gpt2: GPT-2 small's blocks, for a GPU)")
    p.add_argument("--packing", default="documents",
                   help="data.packing of their batches (stream: whole rows, no mask)")
    p.add_argument("--encoding", default="rope", help="of the pipeline, allocator and "
                   "cpu_flags sections")
    p.add_argument("--compile_arg", default="encoding=rope,size=base,seq_len=512,steps=8",
                   help="configs/lm.py arg of the run the compile section trains")
    p.add_argument("--compile_lengths", default="512,1024,2048,4096")
    p.add_argument("--compile_overrides", default="",
                   help="space-separated --config.KEY=V flags for the compile section's run, "
                   "e.g. --config.eval.group_factor=1")
    p.add_names("--compile_settings", CACHE_SETTINGS, what="compile setting",
                help="the compile section's cache settings: none (no persistent cache), "
                "default (JAX's 1 s threshold), every (every entry, as posjax sweep)")
    p.add_names("--vmap_encodings", MAIN_ENCODINGS, what="main-job encoding",
                help="the vmap section's encodings (default: the main job's 7)")
    p.add_argument("--vmap_arg", default="study=main,seeds=3",
                   help="configs/lm.py arg of the vmap section's sweep (the main job's)")
    p.add_argument("--vmap_parallel", type=int, default=1,
                   help="the vmap section's runs at a time (posjax sweep --parallel; run.sh's "
                   "PARALLEL: one per core on a CPU)")
    p.add_argument("--vmap_rtol", type=float, default=sweeps.RTOL,
                   help="perplexities of the two modes agree if |a - b| <= rtol |b|")
    p.add_argument("--vmap_seeds", type=int, default=3,
                   help="the vmap_step section's seeds per vmapped program")
    p.add_names("--vmap_step_encodings", MAIN_ENCODINGS, what="main-job encoding",
                default="none,rope,alibi,t5",
                help="the vmap_step section's encodings, each at the main job's model and "
                "shape (size=main, 128 x 16), whatever --size, --seq_len and --batch_size say")
    p.add_argument("--step_variant", default="", choices=("", *(
        f"{section}:{way}" for section, (_, _, ways, _) in STEP_VARIANTS.items() for way in ways)),
                   help="SECTION:WAY, the step_variant section's (the projections, "
                   "correctness and activation sections run each way in its own process)")
    p.add_argument("--main_batch", type=int, default=8,
                   help="rows per batch of the step variant sections' step "
                   "(default run.sh's 8; the projections record's: 16)")
    p.add_argument("--main_job_dir", default="runs/main_job",
                   help="the main_job section's output directory (fresh)")
    p.add_argument("--main_job_parallel", type=int, default=0,
                   help="the main_job section's encodings at a time (0: run.sh's default)")
    p.add_argument("--main_job_seeds", type=int, default=3,
                   help="the main_job section's seeds per encoding (run.sh's SEEDS)")
    p.add_argument("--main_job_steps", type=int, default=0,
                   help="the main_job section's steps per run (run.sh's STEPS; 0: run.sh's)")
    p.add_argument("--main_job_batch", type=int, default=0,
                   help="the main_job section's rows per batch (run.sh's BATCH; 0: run.sh's)")
    p.add_argument("--main_job_seed_steps", default="vmap", choices=("vmap", "in_turn"),
                   help="the main_job section's way of stepping an encoding's seeds (run.sh's "
                   "SEED_STEPS)")
    p.add_output("--vmap_json", "experiments/bench/vmap_seeds.json",
                 "the vmap, main_job, cpu_flags and vmap_step sections' file, one section per "
                 "device kind (--json is the other sections')")
    args = p.parse_args(argv)
    for label in filter(None, args.encodings.split(",")):  # refused before any section runs
        name, _, kernel = label.partition("@")
        for what, given, valid in (("encoding", name, encoders.names()),
                                   ("attention kernel", kernel or "auto", attention.IMPLS)):
            if given not in valid:
                p.error(f"--encodings: unknown {what} {given!r} in {label!r}; valid: "
                        f"{', '.join(sorted(valid))}")
    timing = [s for s in args.sections.split(",") if s != "long"]
    if args.steps == 0 and timing:  # a median of no step: a traceback after the compiles
        p.error(f"--steps=0 times no step, and section {timing[0]} times steps: give at "
                "least 1 (0 is for the long section alone, which then only compiles)")
    if not re.fullmatch(r"[1-9]\d*x[1-9]\d*(,[1-9]\d*x[1-9]\d*)*", args.long_shapes):
        p.error(f"--long_shapes={args.long_shapes}: give LENGTHxBATCH pairs of whole numbers "
                "joined by commas, e.g. 4096x8,8192x4")
    if args.matmul_sizes is None:
        args.matmul_sizes = ",".join(map(str, peaks.matmul_sizes(jax.default_backend())))
    return args


# --- model FLOPs and timers -----------------------------------------------------------------


def model_flops(model: Trainee) -> dict:
    """Model FLOPs of one training step (peaks.model_flops), from the `none` model."""
    m = model.config.model
    seq_len, batch, _ = model.config.train.stages[0]
    return peaks.model_flops(model.matmul_params(), m.num_layers, m.num_heads, m.head_dim,
                             batch, seq_len, causal=model.experiment.model_class.causal)


class Timer:
    """Wall seconds, process CPU seconds and minor page faults of a block of work."""

    def __enter__(self):
        self.faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        self.cpu, self.wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
        self.faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - self.faults


def _median(rows: list[Timer], key: str) -> float:
    return statistics.median(getattr(t, key) for t in rows)


def _visits(rows: list[Timer], steps: int, key: str = "wall") -> list[float]:
    """The median `key` (wall, cpu or faults) of each visit's `steps` consecutive steps."""
    values = [getattr(t, key) for t in rows]
    return [statistics.median(values[i:i + steps]) for i in range(0, len(values), steps)]


# --- speed -----------------------------------------------------------------------------------


def _warmed_up(args) -> tuple[list[str], dict, dict, dict]:
    """(encodings, {encoding: Trainee}, the batch, {encoding: memory analysis}): every model
    compiled (ahead of time, its memory analysed, with --memory) and warmed up on the first
    batch of the real pipeline, kept on the device."""
    names = [n for n in args.encodings.split(",") if n]
    names = ["none"] + [n for n in names if n != "none"]  # ratios and FLOPs need `none`
    # every model built first: a label that cannot run (fire@flash_bias) is refused before
    # any compiles
    models, build_s, memory, batch = {}, {}, {}, None
    for name in names:
        start = time.perf_counter()
        models[name] = Trainee(name, args.seq_len, args.batch_size, size=args.size,
                               packing=args.packing)
        build_s[name] = time.perf_counter() - start
    for name in names:
        model, start = models[name], time.perf_counter() - build_s[name]
        if batch is None:
            batch = model.put(next(model.iterator()))
        if args.memory:
            memory[name] = model.compile(batch)
        for _ in range(1 + args.warmup):  # the first step compiles
            model.step(batch)
            model.wait()
        print(f"  {name:11s} compiled and warmed up in {time.perf_counter() - start:6.1f} s",
              flush=True)
    return names, models, batch, memory


def _sizes(args) -> tuple[int, ...]:
    return tuple(int(size) for size in args.matmul_sizes.split(","))


def _timed(args, models: dict, batch, dtype) -> tuple[dict[str, list[Timer]], list[dict]]:
    """({encoding: a Timer per step}, the achievable matmul of each visit): --repeats visits,
    round-robin, each of --steps steps per encoding and then the chained matmuls."""
    times: dict[str, list[Timer]] = {key: [] for key in models}
    matmuls = []
    for _ in range(args.repeats):
        for name, model in models.items():
            for _ in range(args.steps):
                with Timer() as t:
                    model.step(batch)
                    model.wait()
                times[name].append(t)
        matmuls.append(peaks.achievable(_sizes(args), dtype, chains=max(args.steps, 3)))
    return times, matmuls


def _speed_row(args, name: str, times: dict, flops: dict, peak: float | None,
               matmuls: list[dict], params: int) -> dict:
    """One encoding's row: medians over every step, and each visit's median step, ratio to
    `none` (same visit), MFU and fraction of the achievable (that visit's matmul)."""
    tokens = args.seq_len * args.batch_size
    wall, cpu = _median(times[name], "wall"), _median(times[name], "cpu")
    best = max(matmuls, key=lambda m: m["flops_per_s"])
    visits = zip(_visits(times[name], args.steps), _visits(times["none"], args.steps), matmuls,
                 _visits(times[name], args.steps, "cpu"),
                 _visits(times[name], args.steps, "faults"), strict=True)
    return dict(
        encoding=name, step_s=wall, tokens_per_s=tokens / wall,
        ratio_to_none=wall / _median(times["none"], "wall"),
        mfu=peaks.mfu(flops["flops"], wall, peak),
        mfu_palm=peaks.mfu(flops["palm_flops"], wall, peak),
        of_achievable=flops["flops"] / wall / best["flops_per_s"],
        cpu_s=cpu, of_achievable_cpu=flops["flops"] / cpu / best["flops_per_cpu_s"],
        page_faults=_median(times[name], "faults"),
        step_s_all=[t.wall for t in times[name]], params=params,
        visits=[dict(step_s=v, tokens_per_s=tokens / v, ratio_to_none=v / b,
                     mfu=peaks.mfu(flops["flops"], v, peak),
                     of_achievable=flops["flops"] / v / m["flops_per_s"], cpu_s=c,
                     page_faults=f)
                for v, b, m, c, f in visits],
    )  # fmt: skip


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _say_interpreted(rows: list[dict]) -> None:
    """A line under a table for each label on a kernel that runs interpreted here."""
    for r in rows:
        kernel = r["encoding"].partition("@")[2]
        if kernel and attention.interpreted_here(kernel):
            print(f"{r['encoding']}: {attention.INTERPRETED}")


def _print_speed(rows: list[dict], flops: dict, peak: dict, achievable: dict) -> None:
    print("\nMFU's peak: " + (f"{peak['flops_per_s'] / 1e12:.0f} TFLOP/s {peak['dtype']} "
                               f"({peak['source']})" if peak["flops_per_s"] else
                               f"none, so no MFU: {peak['source']}"))
    print(f"achievable: {achievable['flops_per_s'] / 1e12:.2f} TFLOP/s {achievable['dtype']} "
          f"({achievable['size']}^2, {achievable['method']}; "
          f"{achievable['flops_per_cpu_s'] / 1e9:.1f} GFLOP per CPU second)")
    print(f"model FLOPs per step {flops['flops'] / 1e9:.4g} G ({flops['formula']}, "
          f"N={flops['matmul_params']:,}); PaLM's count {flops['palm_flops'] / 1e9:.4g} G")
    print("\n| encoding | tokens/s | step ms | step time / none's | MFU | MFU, PaLM's count "
          "| of the achievable | CPU s/step | CPU, of the achievable | page faults/step |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['encoding']} | {r['tokens_per_s']:.0f} | {r['step_s'] * 1e3:.0f} | "
              f"{r['ratio_to_none']:.2f} | {_percent(r['mfu'])} | {_percent(r['mfu_palm'])} | "
              f"{_percent(r['of_achievable'])} | {r['cpu_s']:.2f} | "
              f"{_percent(r['of_achievable_cpu'])} | {r['page_faults']:.0f} |")
    _say_interpreted(rows)
    for r in (r for r in rows if r["encoding"] in ROTARY):
        if r["mfu"] is None:
            print(f"target: {r['encoding']} MFU >= {100 * MFU_TARGET:.0f}% of the datasheet "
                  f"peak: not measured ({peak['source']})")
        else:
            print(f"target: {r['encoding']} MFU {100 * r['mfu']:.1f}% >= "
                  f"{100 * MFU_TARGET:.0f}% of the datasheet peak: "
                  f"{verdict(r['mfu'] >= MFU_TARGET)}")


def _peak(dtype) -> dict:
    """MFU's denominator on this device: the datasheet's dense peak in the dtype matmuls of
    `dtype` run in (`peaks.matmul_dtype`: TF32 for float32 on a GPU at JAX's default
    precision) and its source (None and why, where there is none)."""
    device = jax.devices()[0]
    name = peaks.matmul_dtype(jnp.dtype(dtype).name, device.platform,
                              jax.config.jax_default_matmul_precision)
    flops_per_s, source = peaks.datasheet_peak(device.device_kind, name)
    return dict(device_kind=device.device_kind, dtype=name, flops_per_s=flops_per_s,
                source=source, devices=jax.device_count())


def bench_speed(args) -> dict:
    names, models, batch, memory = _warmed_up(args)
    dtype = models["none"].experiment.model_config.compute_dtype
    times, matmuls = _timed(args, models, batch, dtype)
    flops = model_flops(models["none"])
    peak = _peak(dtype)
    # the step runs on a mesh of every device: MFU and the achievable are per device, so
    # each device's share of the FLOPs (peak and matmul are one device's)
    devices = peak["devices"]
    share = dict(flops, flops=flops["flops"] / devices, palm_flops=flops["palm_flops"] / devices)
    rows = [_speed_row(args, name, times, share, peak["flops_per_s"], matmuls,
                       models[name].num_params()) for name in names]
    for row in rows:
        if row["encoding"] in memory:
            row["memory"] = memory[row["encoding"]]
    achievable = max(matmuls, key=lambda m: m["flops_per_s"])
    _print_speed(rows, flops, peak, achievable)
    return dict(model=_model_summary(models["none"]), flops=flops, peak=peak,
                peak_source=peak["source"], achievable=achievable,
                achievable_visits=matmuls,
                timing="median over repeats x steps single steps, each block_until_ready",
                rows=rows, mfu_target_rotary=MFU_TARGET)


SPREAD_KEYS = ("step_s", "tokens_per_s", "ratio_to_none", "of_achievable")


# The flags a section's fresh process inherits from this one.
FORWARDED = ("encodings", "encoding", "seq_len", "batch_size", "steps", "repeats", "warmup",
             "matmul_sizes", "size", "packing", "long_shapes", "vmap_step_encodings",
             "vmap_seeds", "step_variant", "main_batch")


def _section_command(args, section: str) -> list[str]:
    """This script measuring `section` in one process, its output flag last."""
    return [__file__, f"--sections={section}", "--processes=1",
            *(f"--{key}={getattr(args, key)}" for key in FORWARDED),
            *(["--memory"] if args.memory else []), "--json"]


def run_section(args, section: str, env: dict | None = None, quiet: bool = False) -> dict:
    """`section` measured in one fresh process (with `env`, if given): its result."""
    return fresh_result(_section_command(args, section), cwd=ROOT, env=env,
                        capture_output=quiet, text=True)[section]


def section_in_processes(args, section: str) -> list[dict]:
    """`section` measured in `args.processes` fresh processes, one after another."""
    return [result[section] for result in
            in_processes(args.processes, _section_command(args, section), cwd=ROOT)]


def bench_speed_in_processes(args) -> dict:
    """The speed section in `args.processes` fresh processes, one after another; every row
    keeps each process's visits and gives the median, min and max over all of them."""
    runs = section_in_processes(args, "speed")
    keys = SPREAD_KEYS + (("mfu",) if runs[0]["peak"]["flops_per_s"] else ())
    rows = [summarise(dict(encoding=row["encoding"], params=row["params"],
                           visits=tagged([run["rows"][position]["visits"] for run in runs])),
                      keys, over="visits")
            for position, row in enumerate(runs[0]["rows"])]
    print(f"\n{len(runs) * args.repeats} visits in {len(runs)} processes: median (min-max)")
    print("\n| encoding | tokens/s | step time / none's | MFU | of the achievable |\n"
          "|---|---|---|---|---|")
    for r in rows:
        mfu = (f"{_range(r, 'mfu')}" if "mfu" in keys
               else f"- ({runs[0]['peak']['source']})")
        print(f"| {r['encoding']} | {r['tokens_per_s']:.0f} ({r['tokens_per_s_min']:.0f}-"
              f"{r['tokens_per_s_max']:.0f}) | {r['ratio_to_none']:.2f} "
              f"({r['ratio_to_none_min']:.2f}-{r['ratio_to_none_max']:.2f}) | {mfu} | "
              f"{_range(r, 'of_achievable')} |")
    _say_interpreted(rows)
    return dict(model=runs[0]["model"], flops=runs[0]["flops"], peak=runs[0]["peak"],
                peak_source=runs[0]["peak_source"], processes=runs,
                timing="median, min and max over processes x repeats visits; a visit's "
                       "figure is the median of its steps", rows=rows,
                mfu_target_rotary=MFU_TARGET)


def _range(row: dict, key: str) -> str:
    """A summarised fraction as a percentage: median (min-max)."""
    return (f"{100 * row[key]:.1f}% ({100 * row[key + '_min']:.1f}-"
            f"{100 * row[key + '_max']:.1f}%)")


def _model_summary(model: Trainee) -> dict:
    m = model.config.model
    seq_len, batch, _ = model.config.train.stages[0]
    return dict(d_model=m.d_model, num_layers=m.num_layers, num_heads=m.num_heads,
                head_dim=m.head_dim, mlp_dim=m.mlp_dim,
                vocab_size=model.experiment.batch_spec().vocab_size, seq_len=seq_len,
                batch_size=batch, attention=m.attention, dtype=m.dtype)


# --- past the training lengths of the speed section -----------------------------------------


def _failure(error: Exception) -> str:
    """An error's status: "oom" where the device ran out of memory, else "failed"."""
    text = str(error)
    return "oom" if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower() else "failed"


def long_row(encoding: str, seq_len: int, batch_size: int, size: str, packing: str,
             steps: int, warmup: int) -> dict:
    """One encoding at one length: the step compiled ahead of time, its memory analysis, and
    the median of `steps` timed steps (none for 0). An out-of-memory or any other error is
    the row's status with the stage it stopped in (build, compile or run), so one shape that
    does not fit leaves the others measured."""
    row = dict(encoding=encoding, seq_len=seq_len, batch_size=batch_size, status="ok")
    stage = "build"
    try:
        model = Trainee(encoding, seq_len, batch_size, size=size, packing=packing)
        batch = model.first_batches()
        stage = "compile"
        start = time.perf_counter()
        row["memory"] = model.compile(batch)
        row["compile_s"] = time.perf_counter() - start
        stage = "run"
        times = []
        for index in range(warmup + steps if steps else 0):
            with Timer() as t:
                model.step(batch)
                model.wait()
            if index >= warmup:
                times.append(t.wall)
    except Exception as error:  # recorded in the row: the next shape still runs
        return dict(row, status=_failure(error), stage=stage, error=str(error)[-1000:])
    if times:
        row.update(step_s=statistics.median(times), step_s_all=times,
                   tokens_per_s=seq_len * batch_size / statistics.median(times))
    return row


def _long_line(row: dict) -> str:
    memory = row.get("memory")
    mib = f"{memory['peak_bytes'] / 2**20:8.1f} MiB" if memory else "       - MiB"
    if row["status"] != "ok":
        return (f"  {row['encoding']:11s} L {row['seq_len']:5d} x {row['batch_size']:2d}: "
                f"{row['status']} in {row['stage']}: {row['error'].splitlines()[0][:120]}")
    speed = f"{row['tokens_per_s']:8.0f} tokens/s" if "tokens_per_s" in row else "not timed"
    return (f"  {row['encoding']:11s} L {row['seq_len']:5d} x {row['batch_size']:2d}: "
            f"{speed}, {mib} (temp + arguments + outputs), compiled in "
            f"{row['compile_s']:.1f} s")


def bench_long(args) -> dict:
    """The long section (module docstring): every row printed as it ends; an interrupt
    (the check's time limit) keeps the rows measured so far."""
    rows, interrupted = [], False
    shapes = [tuple(map(int, shape.split("x"))) for shape in args.long_shapes.split(",")]
    try:
        for seq_len, batch_size in shapes:
            for encoding in args.encodings.split(","):
                rows.append(long_row(encoding, seq_len, batch_size, args.size, args.packing,
                                     args.steps, args.warmup))
                print(_long_line(rows[-1]), flush=True)
    except KeyboardInterrupt:
        interrupted = True
        print("  interrupted: the rows above are kept", flush=True)
    return dict(size=args.size, packing=args.packing, shapes=args.long_shapes,
                steps=args.steps, warmup=args.warmup, rows=rows, interrupted=interrupted,
                memory="XLA's memory analysis of the compiled step: peak_bytes = temp + "
                       "argument + output bytes")


# --- pipeline --------------------------------------------------------------------------------


def bench_pipeline(args) -> dict:
    """The trainer's loop body fed by the grain pipeline vs by one in-memory batch."""
    model = Trainee(args.encoding, args.seq_len, args.batch_size, size=args.size,
                    packing=args.packing)
    iterator = model.iterator()
    batch = model.put(next(iterator))
    for _ in range(1 + args.warmup):
        model.step(batch)
        model.wait()
    steps = max(args.steps, 4)
    feeds = {
        "in_memory": lambda: batch,
        "pipeline": lambda: model.put(next(iterator)),
    }
    times: dict[str, list[Timer]] = {k: [] for k in feeds}
    for _ in range(max(args.repeats, 4)):
        for key, feed in feeds.items():
            with Timer() as t:
                for _ in range(steps):  # waits only at the end, as the trainer between logs
                    model.step(feed())
                model.wait()
            times[key].append(t)
    # The pipeline alone, from a fresh iterator (its reader threads start cold), with no step
    # competing for the CPU: wall and process CPU seconds per batch.
    fresh, count = model.iterator(), 32
    with Timer() as alone:
        for _ in range(count):
            next(fresh)
    per_step = {k: {"wall": _median(v, "wall") / steps, "cpu": _median(v, "cpu") / steps}
                for k, v in times.items()}
    result = dict(
        encoding=args.encoding, steps_per_block=steps, blocks=len(times["pipeline"]),
        step_s=per_step, overhead=per_step["pipeline"]["wall"] / per_step["in_memory"]["wall"] - 1,
        cpu_overhead=per_step["pipeline"]["cpu"] / per_step["in_memory"]["cpu"] - 1,
        pipeline_alone=dict(batches=count, wall_s_per_batch=alone.wall / count,
                            cpu_s_per_batch=alone.cpu / count),
        block_wall_s={k: [t.wall for t in v] for k, v in times.items()},
    )  # fmt: skip
    print(f"\n{args.encoding}: {steps} steps per block, median of {result['blocks']} "
          f"blocks each: in-memory batch {per_step['in_memory']['wall'] * 1e3:.0f} ms/step "
          f"({per_step['in_memory']['cpu']:.2f} CPU s), grain pipeline "
          f"{per_step['pipeline']['wall'] * 1e3:.0f} ms/step ({per_step['pipeline']['cpu']:.2f} "
          f"CPU s): {100 * result['overhead']:+.1f}% wall, {100 * result['cpu_overhead']:+.1f}% "
          f"CPU; the pipeline alone {1e3 * alone.wall / count:.1f} ms "
          f"({1e3 * alone.cpu / count:.1f} CPU ms) per batch")
    return result


def bench_pipeline_in_processes(args) -> dict:
    """The pipeline section in `args.processes` fresh processes, one after another; the
    overhead is the median, min and max over every process's blocks."""
    runs = section_in_processes(args, "pipeline")
    ratios = [p / m for run in runs for p, m in zip(run["block_wall_s"]["pipeline"],
                                                    run["block_wall_s"]["in_memory"],
                                                    strict=True)]
    overheads = [r - 1 for r in ratios]
    print(f"\n{len(ratios)} blocks in {len(runs)} processes: the pipeline's overhead "
          f"{100 * statistics.median(overheads):+.1f}% on the median "
          f"({100 * min(overheads):+.1f}% to {100 * max(overheads):+.1f}%)")
    return dict(encoding=args.encoding, steps_per_block=runs[0]["steps_per_block"],
                overhead=statistics.median(overheads), overhead_min=min(overheads),
                overhead_max=max(overheads), processes=runs)


# --- compile ---------------------------------------------------------------------------------


def child(argv: list[str], out: str) -> None:
    """Run one `posjax` command in this process; write its compile statistics to `out`."""
    from collections import Counter, defaultdict

    from jax import monitoring

    from posjax.launch import cli

    durations: dict[str, float] = defaultdict(float)
    per_function: Counter = Counter()
    events: Counter = Counter()

    def on_duration(event, seconds, **kw):
        durations[event] += seconds
        if event == "/jax/core/compile/backend_compile_duration":
            per_function[kw.get("fun_name", "?")] += 1

    monitoring.register_event_duration_secs_listener(on_duration)
    monitoring.register_event_listener(lambda event, **kw: events.update([event]))
    start = time.perf_counter()
    code = cli.main(argv)
    fileio.write_json(out, dict(
        exit_code=code, wall_s=time.perf_counter() - start,
        backend_compile_s=durations["/jax/core/compile/backend_compile_duration"],
        trace_s=durations["/jax/core/compile/jaxpr_trace_duration"],
        lower_s=durations["/jax/core/compile/jaxpr_to_mlir_module_duration"],
        compiles=sum(per_function.values()), per_function=dict(per_function.most_common()),
        cache_hits=events["/jax/compilation_cache/cache_hits"],
        cache_misses=events["/jax/compilation_cache/cache_misses"],
    ))  # fmt: skip


def _run_child(argv: list[str], env: dict) -> dict:
    return fresh_result([__file__, "--child", *argv], env=env, cwd=ROOT, capture_output=True,
                        text=True)


# Persistent compilation cache settings: short name -> (label, min compile time to cache).
CACHE_SETTINGS = {
    "none": ("no cache", None),
    "default": ("cache, min compile time 1 s (JAX default; before)", "1.0"),
    "every": ("cache, every entry (posjax sweep; after)", "0"),
}


def bench_compile(args) -> dict:
    """Compile seconds of train + extrapolate without, with an empty and with a warm cache;
    `args.processes` rounds over the settings, every command a fresh process."""
    scratch = Path(tempfile.mkdtemp(prefix="bench_compile_"))
    base = {k: v for k, v in os.environ.items()
            if k not in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")}
    settings = {label: min_time for name, (label, min_time) in CACHE_SETTINGS.items()
                if name in args.compile_settings.split(",")}
    rows = []
    try:
        for round_, (label, min_time) in ((r, item) for r in range(args.processes)
                                          for item in settings.items()):
            cache = scratch / f"cache{len(rows)}"
            for state in ("cold", "warm") if min_time is not None else ("-",):
                env = dict(base)
                if min_time is not None:
                    env.update(JAX_COMPILATION_CACHE_DIR=str(cache),
                               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=min_time)
                workdir = scratch / f"run{len(rows)}"
                train = _run_child(["train", f"--config={LM}:{args.compile_arg}",
                                    f"--workdir={workdir}", "--noprogress",
                                    *args.compile_overrides.split()], env)
                evaluate = _run_child(["extrapolate", f"--workdir={workdir}",
                                       f"--lengths={args.compile_lengths}",
                                       "--max_tokens=4096"], env)
                row = dict(setting=label, cache=state, round=round_, train=train,
                           extrapolate=evaluate)
                rows.append(row)
                print(f"  {round_} {label:50s} {state:5s} train: compile "
                      f"{train['backend_compile_s']:5.1f} s of {train['wall_s']:5.1f} s "
                      f"({train['compiles']} compiles, {train['cache_hits']} hits) | "
                      f"extrapolate: compile "
                      f"{evaluate['backend_compile_s']:5.1f} s of {evaluate['wall_s']:5.1f} s "
                      f"({evaluate['compiles']} compiles, {evaluate['cache_hits']} hits)",
                      flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return dict(arg=args.compile_arg, overrides=args.compile_overrides,
                settings=args.compile_settings,
                lengths=args.compile_lengths, max_tokens=4096, rows=rows)


# --- allocator -------------------------------------------------------------------------------

ALLOCATOR_ENV = ("GLIBC_TUNABLES", "LD_PRELOAD", "MALLOC_CONF")


def _allocators() -> dict[str, dict[str, str]]:
    """Environment of each host allocator setting to compare (jemalloc only if installed)."""
    variants = {
        "glibc default": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"},
        "glibc hugetlb=1 (what posjax sets)": {"GLIBC_TUNABLES": hostenv.HUGE_PAGES},
    }
    jemalloc = ctypes.util.find_library("jemalloc")
    if jemalloc:  # keeps freed pages mapped (never decays them), so nothing is re-faulted
        variants["jemalloc, no decay"] = {
            "LD_PRELOAD": jemalloc, "MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1",
            "GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}
    return variants


def _speed_per_setting(args, settings: dict[str, dict[str, str]], strip: tuple[str, ...],
                       key: str) -> list[dict]:
    """The speed section for --encoding in a fresh process per setting (its environment,
    read at process start, in place of `strip`'s variables), the settings alternated over
    `--processes` rounds (at least 2): a row per process, the setting's name under `key`,
    with the process's --repeats visits."""
    base = {k: v for k, v in os.environ.items() if k not in strip}
    one = argparse.Namespace(**{**vars(args), "encodings": args.encoding})
    rows = []
    for round_ in range(max(args.processes, 2)):
        for label, extra in settings.items():
            speed = run_section(one, "speed", env={**base, **extra}, quiet=True)
            row = next(r for r in speed["rows"] if r["encoding"] == args.encoding)
            rows.append({key: label, "env": extra, "round": round_, "step_s": row["step_s"],
                         "cpu_s": row["cpu_s"], "page_faults": row["page_faults"],
                         "mfu": row["mfu"], "of_achievable": row["of_achievable"],
                         "visits": row["visits"],
                         "matmul_flops_per_s": speed["achievable"]["flops_per_s"]})
            print(f"  {round_} {label:40s} step {row['step_s'] * 1e3:6.0f} ms, "
                  f"{row['cpu_s']:.2f} CPU s, {row['page_faults']:8.0f} page faults, "
                  f"{_percent(row['of_achievable'])} of the achievable matmul", flush=True)
    return rows


def bench_allocator(args) -> dict:
    """The speed section for --encoding under each host allocator setting (variables read at
    process start), in fresh processes (`_speed_per_setting`)."""
    return dict(encoding=args.encoding,
                rows=_speed_per_setting(args, _allocators(), ALLOCATOR_ENV, "allocator"))


# --- XLA:CPU's flags and cores on the main job's model -----------------------------------------

# name -> (label, XLA_FLAGS): the XLA:CPU options of this jaxlib that could change how the
# main job's small matmuls and fusions are compiled.
CPU_FLAGS = {
    "onednn": ("oneDNN", "--xla_cpu_use_onednn=true"),
    "onednn_calls": ("oneDNN custom calls", "--xla_cpu_experimental_onednn_custom_call=true"),
    "xnnpack": ("XNNPACK", "--xla_cpu_use_xnnpack=true"),
    "no_ynn": ("no YNNPACK fusions", "--xla_cpu_experimental_ynn_fusion_type="),
    "fast_math": ("fast math", "--xla_cpu_enable_fast_math=true"),
    "vector512": ("512-bit vectors", "--xla_cpu_prefer_vector_width=512"),
    "concurrency": ("concurrency-optimised scheduler",
                    "--xla_cpu_enable_concurrency_optimized_scheduler=true"),
}
CPU_FLAGS_ENV = ("XLA_FLAGS", hostenv.CPUS)


def _cpu_settings() -> dict[str, dict[str, str]]:
    """name -> the environment of the cpu_flags section's process: XLA's defaults on all of
    this process's cores and on one (as the main job runs each encoding), then each of
    CPU_FLAGS on that one core."""
    one = {hostenv.CPUS: str(min(os.sched_getaffinity(0)))}
    return {"default_all": {}, "default_1": one,
            **{name: {**one, "XLA_FLAGS": flags} for name, (_, flags) in CPU_FLAGS.items()}}


def bench_cpu_flags(args) -> None:
    """The cpu_flags section (module docstring), written into --vmap_json's section of this
    device kind."""
    if not hasattr(os, "sched_getaffinity"):
        print("cpu_flags: its one-core settings pin processes to a core, which this platform "
              "cannot (Linux can)", flush=True)
        return
    measured = fresh_device()
    if measured[0]["platform"] != "cpu":
        print(f"cpu_flags: XLA:CPU's flags, but this machine runs on {measured[0]['platform']}; "
              "run it on a machine without an accelerator (or JAX_PLATFORMS=cpu)", flush=True)
        return
    path = Path(args.vmap_json)
    out, mine = device_section(path, measured)
    main = argparse.Namespace(**{**vars(args), "size": "main", "packing": "documents",
                                 "seq_len": _LM.DEFAULTS["seq_len"],
                                 "batch_size": MAIN_SIZE["batch_size"]})
    rows = _speed_per_setting(main, _cpu_settings(), CPU_FLAGS_ENV, "setting")
    record(path, out, mine, "cpu_flags", dict(
        encoding=args.encoding, size="main", seq_len=main.seq_len,
        batch_size=main.batch_size, steps=args.steps, repeats=args.repeats,
        cores=len(os.sched_getaffinity(0)), flags={k: list(v) for k, v in CPU_FLAGS.items()},
        rows=rows))
    print(f"wrote {path}")


# --- seeds vmapped against seed by seed -----------------------------------------------------


def _vmap_repeat(args, result: dict, mode: str, index: int) -> dict:
    """One sweep of `mode` in a fresh directory: its repeat record, checked against the
    first seed-by-seed repeat's perplexities."""
    scratch = Path(tempfile.mkdtemp(prefix="bench_vmap_"))
    cmds = sweeps.commands(str(LM), args.vmap_arg, result["points"], result["every_point"],
                           scratch / "sweep", mode, args.vmap_parallel)
    before, started = load(), time.strftime("%Y-%m-%d %H:%M:%S")
    repeat = sweeps.timed_sweep(cmds, scratch / "sweep", scratch / "sweep.log")
    shutil.rmtree(scratch)  # kept, with its log, when the sweep failed
    reference = next((r["runs"] for r in result["repeats"] if r["mode"] == "seed_by_seed"),
                     repeat["runs"])
    problems, largest = sweeps.disagreements(reference, repeat["runs"], args.vmap_rtol)
    first_step, speed = (sweeps.per_run(repeat["runs"], key)
                         for key in ("first_step_s", "tokens_per_s"))
    print(f"  {index} {mode:12s} {repeat['wall_s']:7.1f} s; per run: first step "
          f"{statistics.median(first_step):5.1f} s, {statistics.median(speed):6.0f} tokens/s; "
          f"perplexities within {largest:.2g} of the first seed-by-seed repeat "
          f"({len(problems)} beyond rtol {args.vmap_rtol:g})", flush=True)
    return dict(repeat, mode=mode, index=index, started_at=started, load_before=before,
                load_after=load(), max_relative_difference=largest, disagreements=problems)


def bench_vmap(args) -> None:
    """The vmap section (module docstring): every repeat recorded as it ends."""
    measured = fresh_device()
    path = Path(args.vmap_json)
    out, mine = device_section(path, measured)
    points, every = sweeps.points(str(LM), args.vmap_arg, args.vmap_encodings.split(","))
    result = dict(device_line=measured[1], config=str(LM.relative_to(ROOT)), arg=args.vmap_arg,
                  points=points, every_point=every, rtol=args.vmap_rtol,
                  target=VMAP_TARGET, repeats=[], parallel=args.vmap_parallel,
                  commands={mode: [" ".join(c[3:]) for c in sweeps.commands(
                      str(LM.relative_to(ROOT)), args.vmap_arg, points, every,
                      Path("SWEEPDIR"), mode, args.vmap_parallel)] for mode in sweeps.MODES})
    for index in range(args.repeats):
        for mode in sweeps.MODES:  # alternated, so a drift in load hits both modes
            result["repeats"].append(_vmap_repeat(args, result, mode, index))
            record(path, out, mine, "vmap", result)
    s = sweeps.summary(result["repeats"], result["target"])
    agree = not any(r["disagreements"] for r in result["repeats"])
    print(f"\nsweep wall s, median (min-max) of {args.repeats}: seed by seed "
          f"{s['seed_by_seed']['median']:.0f} ({s['seed_by_seed']['min']:.0f}-"
          f"{s['seed_by_seed']['max']:.0f}), vmapped {s['vmapped']['median']:.0f} "
          f"({s['vmapped']['min']:.0f}-{s['vmapped']['max']:.0f}); vmapped / seed by seed "
          f"{s['ratio']:.2f} on the medians ({s['ratio_min']:.2f}-{s['ratio_max']:.2f} by "
          f"repeat): target <= {s['target']}x {verdict(s['met'])}; "
          f"perplexities {'agree' if agree else 'DISAGREE'} within rtol {args.vmap_rtol:g}")
    print(f"wrote {path}")


def _step_visit(model: Trainee, batch, steps: int) -> dict:
    with Timer() as t:
        for _ in range(steps):
            model.step(batch)
        model.wait()
    return dict(ms_per_step=1e3 * t.wall / steps, cores_busy=t.cpu / t.wall,
                page_faults_per_step=t.faults / steps)


def _argmax_reference(logits, targets):
    """Token correctness by jnp.argmax, as posjax computed it before argmax_is."""
    return jnp.argmax(logits, axis=-1) == targets


def _saved_gelu(x, approximate: bool):
    """The MLP's gelu as autodiff keeps it for the backward pass, as posjax computed it
    before layers.gelu."""
    return jax.nn.gelu(x, approximate=approximate)


def _step_logits(model: Trainee, batch) -> tuple:
    """Random logits and targets of the shape `model`'s step scores (seeds, rows, tokens,
    vocabulary): argmax_is's input in that step."""
    targets = batch["targets"]
    vocab = model.experiment.batch_spec().vocab_size
    logits = jax.random.normal(jax.random.key(0), (*targets.shape, vocab), jnp.float32)
    return logits, targets


# Sections timing the main job's step with one function posjax calls swapped for another, each
# way in its own fresh process: section -> (module, attribute, {way: function}, inputs),
# posjax's way first, then the one it is measured against; where `inputs(model, batch)` gives
# the function's input in a step, the function is also timed alone on it.
STEP_VARIANTS = {
    "projections": (layers, "matrix_dot_general",  # the dot_general nnx.LinearGeneral gets
                    {"matrix": layers.matrix_dot_general, "general": jax.lax.dot_general},
                    None),
    "correctness": (train_steps, "argmax_is",
                    {"compare": train_steps.argmax_is, "argmax": _argmax_reference},
                    _step_logits),
    "activation": (layers, "gelu", {"recomputed": layers.gelu, "saved": _saved_gelu}, None),
}


def step_variant(variant: str):
    """A context in which posjax runs `variant` ("SECTION:WAY") of STEP_VARIANTS: models built
    and steps traced inside it use that way's function."""
    section, _, way = variant.partition(":")
    module, attribute, ways, _ = STEP_VARIANTS[section]
    return mock.patch.object(module, attribute, ways[way])


def _call_visit(fn, inputs: tuple, calls: int) -> dict:
    """ms per call of `calls` calls of jitted `fn`, each waited for."""
    with Timer() as t:
        for _ in range(calls):
            jax.block_until_ready(fn(*inputs))
    return dict(ms_per_step=1e3 * t.wall / calls)


def _lone_and_vmapped(args, encoding: str, batch_size: int) -> tuple[dict, dict]:
    """({"lone": Trainee, "vmapped": Trainee of --vmap_seeds seeds}, their first batches) of
    the main job's model at `batch_size` rows, each compiled and warmed up."""
    models = {mode: Trainee(encoding, _LM.DEFAULTS["seq_len"], batch_size, size="main",
                            seeds=seeds)
              for mode, seeds in (("lone", 1), ("vmapped", args.vmap_seeds))}
    batches = {mode: model.first_batches() for mode, model in models.items()}
    for mode, model in models.items():
        _step_visit(model, batches[mode], 1 + args.warmup)
    return models, batches


def bench_vmap_step(args) -> None:
    """The vmap_step section (module docstring), every visit recorded."""
    path = Path(args.vmap_json)
    out, mine = device_section(path)
    seq_len, batch_size = _LM.DEFAULTS["seq_len"], MAIN_SIZE["batch_size"]
    rows, flops = [], None
    for encoding in args.vmap_step_encodings.split(","):
        models, batches = _lone_and_vmapped(args, encoding, batch_size)
        flops = flops or model_flops(models["lone"])
        dtype = models["lone"].experiment.model_config.compute_dtype
        visits = []
        for index in range(args.repeats):
            visit = {mode: _step_visit(model, batches[mode], args.steps)
                     for mode, model in models.items()}
            visit["per_seed_ratio"] = (visit["vmapped"]["ms_per_step"] / args.vmap_seeds
                                       / visit["lone"]["ms_per_step"])
            visit["matmul"] = peaks.achievable(_sizes(args), dtype, chains=3)
            visits.append(dict(visit, index=index))
            print(f"  {encoding:10s} {index}: lone {visit['lone']['ms_per_step']:6.1f} ms/step "
                  f"({visit['lone']['cores_busy']:.2f} cores busy), {args.vmap_seeds} seeds "
                  f"vmapped {visit['vmapped']['ms_per_step']:6.1f} ms/step "
                  f"({visit['vmapped']['cores_busy']:.2f} cores); per seed-step "
                  f"{visit['per_seed_ratio']:.2f}x the lone step", flush=True)
        rows.append(dict(encoding=encoding, visits=visits))
    job_steps = len(MAIN_ENCODINGS) * args.vmap_seeds * MAIN_SIZE["steps"]
    record(path, out, mine, "vmap_step", dict(
        rows=rows, seeds=args.vmap_seeds, seq_len=seq_len, batch_size=batch_size,
        size="main", steps=args.steps, repeats=args.repeats, load_before=load(),
        flops_per_seed_step=flops, main_job_seed_steps=job_steps,
        main_job_flops=job_steps * flops["flops"]))
    print(f"wrote {path}")


def bench_step_variant(args) -> dict:
    """One process of a STEP_VARIANTS section: --step_variant's programs (lone and
    --vmap_seeds seeds vmapped) per encoding of --vmap_step_encodings, warmed up, then
    --repeats visits of --steps steps each, the two programs alternated."""
    rows = []
    section, _, way = args.step_variant.partition(":")
    module, attribute, _, inputs = STEP_VARIANTS[section]
    with step_variant(args.step_variant):
        for encoding in args.vmap_step_encodings.split(","):
            models, batches = _lone_and_vmapped(args, encoding, args.main_batch)
            rows.append(dict(encoding=encoding, visits=[
                {mode: _step_visit(model, batches[mode], args.steps)
                 for mode, model in models.items()} for _ in range(args.repeats)]))
        if inputs:  # the function alone, on its input in the last encoding's two programs
            fn = jax.jit(getattr(module, attribute))
            given = {mode: inputs(model, batches[mode]) for mode, model in models.items()}
            for mode in given:
                _call_visit(fn, given[mode], 2)  # compiled and warm
            rows.append(dict(encoding="alone", visits=[
                {mode: _call_visit(fn, given[mode], 10 * args.steps) for mode in given}
                for _ in range(args.repeats)]))
    return dict(variant=way, rows=rows)


def bench_step_variants(args, section: str) -> None:
    """A STEP_VARIANTS section (module docstring): each way in its own fresh process, as the
    main job runs one program per process, the ways alternated over --processes rounds (at
    least 2), every visit recorded."""
    path = Path(args.vmap_json)
    out, mine = device_section(path)
    ways = STEP_VARIANTS[section][2]
    processes = []
    for round_ in range(max(args.processes, 2)):
        for way in ways:
            one = argparse.Namespace(**{**vars(args), "step_variant": f"{section}:{way}"})
            result = run_section(one, "step_variant")
            processes.append(dict(result, round=round_))
            for row in result["rows"]:
                print(f"  {round_} {way:8s} {row['encoding']:10s} " + ", ".join(
                    f"{mode} " + " ".join(f"{v[mode]['ms_per_step']:.1f}" for v in row["visits"])
                    + " ms/step" for mode in ("lone", "vmapped")), flush=True)
    record(path, out, mine, section, dict(
        processes=processes, ways=list(ways), seeds=args.vmap_seeds, size="main",
        seq_len=_LM.DEFAULTS["seq_len"], batch_size=args.main_batch, steps=args.steps,
        repeats=args.repeats, cores=provenance.allowed_cores(), load_before=load()))
    print(f"wrote {path}")


def main_job_phases(out_dir: Path, start_unix: float) -> dict[str, float]:
    """Seconds of each step of scripts/run.sh, from when its files were last written: the
    install check and the RoPE decay analysis (rope_decay.json), the sweep (sweep.json,
    rewritten as each run ends) and the plot (extrapolation.png)."""
    ends = [(name, (out_dir / file).stat().st_mtime) for name, file in (
        ("install_and_decay", "rope_decay.json"), ("sweep", "sweep.json"),
        ("plot", "extrapolation.png"))]
    starts = [start_unix] + [end for _, end in ends[:-1]]
    return {name: end - begin for (name, end), begin in zip(ends, starts, strict=True)}


def bench_main_job(args) -> None:
    """The main_job section (module docstring)."""
    out_dir = Path(args.main_job_dir)
    if (out_dir / "sweep.json").exists():
        raise SystemExit(f"error: {out_dir} already holds a run; the main_job section times a "
                         "fresh one: give --main_job_dir a new directory")
    measured = fresh_device()
    path = Path(args.vmap_json)
    out, mine = device_section(path, measured)
    command = ["bash", str(ROOT / "scripts" / "run.sh"), str(out_dir)]
    parallel = args.main_job_parallel or provenance.allowed_cores()
    # What run.sh gets only where the flags differ from its defaults (0 or "": run.sh's own)
    optional = {"STEPS": args.main_job_steps, "BATCH": args.main_job_batch,
                "SEED_STEPS": "" if args.main_job_seed_steps == "vmap" else
                args.main_job_seed_steps}
    settings = {"PARALLEL": str(parallel), "SEEDS": str(args.main_job_seeds),
                **{name: str(value) for name, value in optional.items() if value}}
    shown = " ".join(f"{k}={v}" for k, v in settings.items()) + " bash scripts/run.sh"
    before, started = load(), time.strftime("%Y-%m-%d %H:%M:%S")
    code = provenance.code_version()  # the commit timed, so repeats on two commits tell apart
    with tempfile.TemporaryDirectory() as cache:  # a fresh clone's: empty
        start, start_unix = time.perf_counter(), time.time()
        # The settings from the flags alone: one exported in the shell would go unrecorded.
        inherited = {k: v for k, v in os.environ.items() if k not in optional}
        done = subprocess.run(command, check=False, env={
            **inherited, "JAX_COMPILATION_CACHE_DIR": cache, **settings})
        wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"error: {' '.join(command)} failed with exit status {done.returncode}")
    runs = sweeps.run_results(out_dir)
    steps, batch_size = sweeps.budget(runs)  # what run.sh trained, its defaults included
    repeats = mine.get("main_job", {}).get("repeats", [])
    record(path, out, mine, "main_job", {"repeats": [*repeats, dict(
        command=f"{shown} {args.main_job_dir}", parallel=parallel, seeds=args.main_job_seeds,
        steps=steps, batch_size=batch_size, seed_steps=args.main_job_seed_steps,
        device_line=measured[1], **code,
        started_at=started, wall_s=wall,
        phases_s=main_job_phases(out_dir, start_unix), load_before=before,
        load_after=load(), runs=runs)]})
    print(f"  {shown}: {wall / 60:.1f} min, load before "
          f"{before['1min']:.2f}; wrote {path}", flush=True)


SECTIONS = {"speed": bench_speed, "pipeline": bench_pipeline, "compile": bench_compile,
            "allocator": bench_allocator, "long": bench_long,
            "step_variant": bench_step_variant}
# The sections that measure in this process, and their runs in `--processes` fresh ones (the
# allocator and compile sections start a fresh process per measurement themselves).
IN_PROCESSES = {"speed": bench_speed_in_processes, "pipeline": bench_pipeline_in_processes}
# Sections writing their own per-device file, run in this order: those that keep this process
# off the device (their work runs in other processes, which a GPU's memory must be free for)
# before vmap_step, which steps models here.
OWN_FILE_SECTIONS = {"vmap": bench_vmap, "main_job": bench_main_job,
                     "cpu_flags": bench_cpu_flags, "vmap_step": bench_vmap_step,
                     **{section: functools.partial(bench_step_variants, section=section)
                        for section in STEP_VARIANTS}}


def main(argv=None) -> None:
    hostenv.reexec_with_huge_pages()  # measure what `posjax train` runs with
    hostenv.pin_to_cpus(os.environ)  # and on the cores a sweep gives it (POSJAX_CPUS)
    args = parse_args(argv)
    if args.child is not None:  # a posjax command and, last, the path of its statistics
        child(args.child[:-1], args.child[-1])
        return
    sections = args.sections.split(",")
    for key in (k for k in OWN_FILE_SECTIONS if k in sections):
        print(f"\n[{key}]", flush=True)
        OWN_FILE_SECTIONS[key](args)
    here = [k for k in sections if k not in OWN_FILE_SECTIONS]
    if here:
        measure_here(args, here)


def measure_here(args, sections: list[str]) -> None:
    """The sections that measure in this process (or in --processes fresh ones), each
    written under its key of --json."""
    print(describe(), flush=True)
    for key in sections:
        run = IN_PROCESSES.get(key, SECTIONS[key]) if args.processes > 1 else SECTIONS[key]
        print(f"\n[{key}]", flush=True)
        before = load()
        result = run(args)
        entry = dict(result, config=vars(args), load_before=before, load_after=load(),
                     measured_at=time.strftime("%Y-%m-%d %H:%M:%S"),
                     allocator={k: os.environ.get(k, "") for k in ALLOCATOR_ENV})
        # another run into the same --json may have added sections: they stay
        rewrite(args.json, lambda payload, key=key, entry=entry: payload.update({key: entry}))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    run_script(main)
