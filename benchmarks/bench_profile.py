"""Where the time goes in the cases that miss issue 19's speed targets, from profiler traces.

    .venv/bin/python benchmarks/bench_profile.py [--sections attention,train,peer,rope]
        [--repeats 3] [--processes 2] [--json experiments/bench/profile.json]
        [--size base --seq_len 512 --batch_size 8 --train_encodings none,rope,t5,...]
    .venv/bin/python benchmarks/bench_profile.py --parse_trace DIR [--calls 2] [--top 15]
        [--out DIR/profile.json]

Every case is profiled --repeats times, round-robin over the cases of its section, in each
of --processes fresh processes one after another, and every visit is kept (tagged by its
process). A visit traces --calls calls of the compiled program with JAX's profiler and
attributes each HLO op's self time to what it computes (matmul, elementwise, ...) and to the
source line it came from (benchlib.profile); on an accelerator each stream kernel counts
for its op. Each visit prints the share of the wall time named ops ran and the top ops with
their shares; the JSON keeps per call the wall seconds, the op seconds by category, the top
source lines, the device's busy seconds, the attributed share and the top ops. --parse_trace
re-reads a kept trace (--trace_dir's DIR/CASE: module.hlo.txt and the xplane under it) of
--calls calls offline, against the device span of those calls (the trace holds no host wall
time), prints it and writes it to --out. Sections, each under its key of the JSON file within
the section of this device kind (keys not run this time are kept):

  attention  Causal attention forward+backward, chunked (blocks of 256), L = --length, 4 heads
             of 64, batch 1, as benchmarks/bench_attention.py times it: plain (none) and the
             encodings that miss their bound there (xl, deberta, tupe, fire).
  train      posjax's train step of configs/lm.py size=base (seq_len 512, batch 8) for none
             and the encodings that miss `1.15x` in training (kerple_log, fire), plus t5 and
             rope; --size, --seq_len, --batch_size and --train_encodings change them (the GPU
             check profiles GPT-2 small's blocks at 1024 tokens, scripts/gpu_check.sh).
  peer       x-transformers' train step of the train section's model (--size, --seq_len,
             --batch_size) with RoPE (benchlib.steps.Peer),
             profiled by torch.profiler: each aten op's self CPU time, classed as matmul (mm,
             addmm, bmm, baddbmm), attention kernel (scaled_dot_product_*) or other. Compare
             with the train section's rope row.
  rope       The rope encoding's rotate of q and k ([8, 512, 4, 64] each, one call, tables
             included) and an elementwise copy of the same arrays.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path

import jax
import jax.numpy as jnp

from benchlib import attention, profile, steps
from benchlib.flags import Parser, at_least, check_peer_installed, run_script
from benchlib.runs import ROOT, device_section, in_processes, record, tagged
from posjax import fileio

SECTIONS = ("attention", "train", "peer", "rope")
PEER_SECTIONS = ("peer",)  # the sections that train x-transformers (torch)
ATTENTION = ("none", "xl", "deberta", "tupe", "fire")
TRAIN = ("none", "rope", "t5", "kerple_log", "fire")
TORCH_MATMUL = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def parse_args(argv=None):
    # --child PATH: profile one section here and write it there.
    p = Parser(__doc__, output="experiments/bench/profile.json", processes=2,
               processes_help="fresh processes per section, one after another, each with "
               "--repeats visits", sections=SECTIONS, child=True,
               quick={"repeats": 1, "calls": 1, "processes": 1, "length": 1024})
    p.add_argument("--calls", type=at_least(1), default=2, help="traced calls per visit")
    p.add_argument("--length", type=at_least(2), default=4096, help="attention length")
    p.add_argument("--size", default="base", help="train and peer: configs/lm.py size")
    p.add_argument("--seq_len", type=at_least(2), default=512,
                   help="train and peer: tokens per row")
    p.add_argument("--batch_size", type=at_least(1), default=8,
                   help="train and peer: rows per batch")
    p.add_argument("--train_encodings", default=",".join(TRAIN), help="train: encodings")
    p.add_argument("--trace_dir", default="", help="keep each case's first trace and HLO "
                   "text in TRACE_DIR/CASE (for TensorBoard, Perfetto or a re-parse)")
    p.add_argument("--parse_trace", default="", help="re-parse this kept trace folder and exit")
    p.add_argument("--top", type=int, default=25, help="source lines and ops kept")
    p.add_argument("--out", default="", help="--parse_trace: write its JSON here")
    return p.parse_args(argv)


def report(result: dict, shown: int = 10) -> str:
    """The lines that say where a breakdown's wall time went: its busy and attributed share,
    then the top `shown` ops, each with its share, seconds, count, category and source."""
    lines = [f"device busy {result['device_busy_s'] * 1e3:.1f} ms of "
             f"{result['wall_s'] * 1e3:.1f} ms wall ({result['wall_from']}); named ops "
             f"{result['attributed_share']:.1%} of the wall"]
    lines += [f"    {op['share']:6.1%} {op['seconds'] * 1e3:7.2f} ms x{op['ops']:<3d} "
              f"{op['op']:32s} {op['category']:14s} {op['source']}"
              for op in result["top_ops"][:shown]]
    return "\n".join(lines)


def _visits(cases: dict, repeats: int, calls: int, trace_dir: str = "", top: int = 25) -> dict:
    """{case: [breakdown of each visit]}, round-robin over the cases; the first visit's
    traces kept under `trace_dir`/CASE."""
    out = defaultdict(list)
    for visit in range(repeats):
        for name, (hlo_text, run) in cases.items():
            keep = Path(trace_dir) / name if trace_dir and visit == 0 else None
            result = profile.breakdown(hlo_text, run, calls=calls, top=top, root=str(ROOT),
                                       trace_dir=keep)
            out[name].append(result)
            cats = ", ".join(f"{k} {v * 1e3:.0f}" for k, v in result["by_category"].items())
            print(f"  visit {visit}: {name}: wall {result['wall_s'] * 1e3:.0f} ms, ops "
                  f"{result['op_s'] * 1e3:.0f} ms ({cats})\n    {report(result)}", flush=True)
    return dict(out)


def attention_section(args) -> dict:
    q, k, v, pos, seg = attention.inputs(args.length, 4, 64)
    cases = {}
    for label in ATTENTION:
        enc, params = attention.encoding(label, 4, 64)
        _, fwd_bwd = attention.functions(enc, "chunked", 256)
        call = (q, k, v, params, pos, seg)
        compiled = fwd_bwd.lower(*call).compile()
        cases[label] = (compiled.as_text(), lambda c=compiled, a=call: c(*a))
    return {"length": args.length, "shape": [1, args.length, 4, 64], "block_size": 256,
            "visits": _visits(cases, args.repeats, args.calls, top=args.top)}


def train_section(args) -> dict:
    cases = {}
    for name in args.train_encodings.split(","):
        ours = steps.Ours(name, args.seq_len, args.batch_size, size=args.size)

        def step(ours=ours):
            ours.step()
            return ours.trainee.state

        cases[name] = (ours.trainee.compiled_text(ours.batch), step)
    return {"seq_len": args.seq_len, "batch_size": args.batch_size, "size": args.size,
            "visits": _visits(cases, args.repeats, args.calls, args.trace_dir, args.top)}


def _torch_category(key: str) -> str:
    if key in TORCH_MATMUL:
        return "matmul"
    if key.startswith("aten::_scaled_dot_product") or key.startswith("aten::scaled_dot"):
        return "attention kernel"
    return "other"


def peer_section(args) -> dict:
    """torch.profiler of x-transformers' RoPE train step: self CPU seconds per step by
    category and the top aten ops."""
    import torch

    peer = steps.Peer("rope", args.seq_len, args.batch_size, threads=2, size=args.size)
    for _ in range(2):
        peer.step()
    visits = []
    for visit in range(args.repeats):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            for _ in range(args.calls):
                peer.step()
            wall = (time.perf_counter() - start) / args.calls
        ops = {e.key: e.self_cpu_time_total * 1e-6 / args.calls for e in prof.key_averages()}
        by_category = defaultdict(float)
        for key, seconds in ops.items():
            by_category[_torch_category(key)] += seconds
        top = sorted(ops.items(), key=lambda kv: -kv[1])[:15]
        visits.append({"wall_s": wall, "op_s": sum(ops.values()),
                       "by_category": dict(by_category),
                       "top": [{"op": k, "seconds": s} for k, s in top]})
        print(f"  visit {visit}: x-transformers rope: wall {wall * 1e3:.0f} ms, matmul "
              f"{by_category['matmul'] * 1e3:.0f} ms", flush=True)
    return {"seq_len": args.seq_len, "batch_size": args.batch_size, "size": args.size,
            "threads": 2, "torch": torch.__version__, "visits": visits}


def rope_section(args) -> dict:
    from posjax import encoders

    shape = (8, 512, 4, 64)
    q, k = jax.random.normal(jax.random.key(0), (2, *shape))
    pos = jnp.broadcast_to(jnp.arange(512, dtype=jnp.int32), shape[:2])
    rope = encoders.get("rope")
    rotate = jax.jit(lambda pos, q, k: rope.rotate({}, q, k, pos, pos)).lower(pos, q, k)
    copy = jax.jit(lambda pos, q, k: (q * 1.0001, k * 1.0001)).lower(pos, q, k)
    cases = {name: (c.as_text(), lambda c=c: c(pos, q, k))
             for name, c in (("rotate", rotate.compile()), ("copy", copy.compile()))}
    return {"shape": list(shape), "visits": _visits(cases, args.repeats, 20, top=args.top)}


RUNNERS = {"attention": attention_section, "train": train_section, "peer": peer_section,
           "rope": rope_section}


def profiled_in_processes(args, section: str) -> dict:
    """`section` profiled in `args.processes` fresh processes, one after another: the first
    one's fields, and every process's visits, each tagged with its process."""
    results = in_processes(args.processes, [
        __file__, f"--sections={section}", f"--repeats={args.repeats}", f"--calls={args.calls}",
        f"--length={args.length}", f"--size={args.size}", f"--seq_len={args.seq_len}",
        f"--batch_size={args.batch_size}", f"--train_encodings={args.train_encodings}",
        f"--trace_dir={args.trace_dir}", f"--top={args.top}", "--child"])
    visits = [result["visits"] for result in results]
    if isinstance(visits[0], list):  # the peer's one case
        merged = tagged(visits)
    else:
        merged = {case: tagged([each[case] for each in visits]) for case in visits[0]}
    return dict(results[0], visits=merged, processes=len(results))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.parse_trace:
        if not Path(args.parse_trace).is_dir():
            print(f"bench_profile.py: error: --parse_trace={args.parse_trace} is no folder: give "
                  "a case's folder that --trace_dir kept", file=sys.stderr)
            return 2
        result = profile.parse_trace(args.parse_trace, args.calls, args.top, str(ROOT))
        print(f"{args.parse_trace}: {report(result, args.top)}")
        if args.out:
            fileio.write_json(args.out, dict(result, trace=args.parse_trace))
        return 0
    if args.child:
        fileio.write_json(args.child[-1], RUNNERS[args.sections](args))
        return 0
    check_peer_installed(args.sections, PEER_SECTIONS)
    path = Path(args.json)
    out, mine = device_section(path)
    for section in args.sections.split(","):
        print(f"== {section}", flush=True)
        record(path, out, mine, section, profiled_in_processes(args, section))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    run_script(main)
