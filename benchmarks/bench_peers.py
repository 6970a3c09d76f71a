"""posjax against a peer: training speed beside x-transformers, RoPE apply, 128k evaluation.

    pip install -e '.[bench]'   # torch (CPU build) and x-transformers
    .venv/bin/python benchmarks/bench_peers.py [--sections train,rope,long]
        [--encodings rope,alibi,t5] [--processes 2] [--repeats 3]
        [--json experiments/bench/peers.json]

Sections (each printed and written, atomically, under its key of the JSON file, within the
section of this device kind: `{"cpu": {"train": ...}}`, so figures from a GPU or TPU run go
beside the CPU ones; keys not run this time are kept):

  train  The same causal LM in both systems: d_model 256, 4 layers, 4 heads of 64, MLP 1024
         (GELU), pre-LayerNorm, untied output head, byte vocabulary 260, seq_len 512, batch
         8, AdamW (lr 1e-3, weight decay 0.01) with gradients clipped at norm 1. posjax runs
         its real jitted `train_step` on configs/lm.py size=base (benchlib.steps'
         Trainee); the peer is x-transformers' TransformerWrapper(Decoder(...)) with
         rotary_pos_emb, alibi_pos_bias or rel_pos_bias (T5's buckets, 32 of them, max
         distance 128, one table for all layers), stepped by torch's AdamW. t5 is posjax's
         own T5 (a table per layer), t5_shared posjax's T5 with one table for all layers
         (share_position_params=true), the like-for-like pair of the peer's. Both get
         --threads threads. A visit times
         --steps steps of one system and then of the other (the order alternates between
         visits), so machine load hits both alike; the ratio is posjax's tokens/s over the
         peer's within the visit. Target: >= 1.5x for each encoding, on the median.
  rope   RoPE apply (the rope encoding's rotate of q and k, [8, 512, 4, 64] each, jitted,
         positions an argument) against an elementwise read+write of the same arrays
         (x * 1.0001), interleaved: the fraction of the copy's speed, for one call (its
         cos/sin tables included) and for 4 layers' q and k in one program, as the model
         runs them (one positions array: the tables are computed once). Target: >= 0.8 on
         the median.
  fused  Forward+backward of causal attention at the train step's shapes with
         attention=fused (jax.nn.dot_product_attention) over attention=dense, interleaved,
         for none, rope, alibi and t5: what `auto` should pick on this platform.
  long   Evaluation of the 4-layer model at batch 1 and 16k-128k tokens, chunked attention,
         for alibi, t5 and rope: XLA's compiled memory analysis of the forward pass
         (arguments + outputs + temporaries, compiled, not run) at each length, and, at
         --long_run_length for --long_run_encodings, the peak RSS of a fresh process that
         runs the forward once.
         Target: < 4 GiB at 128k, memory linear in the length.

With --processes N the train and rope sections run in N fresh processes one after another
and every visit of every process is kept (median, min and max over all of them). Like `posjax
train`, the script runs with huge-page malloc (posjax.launch.hostenv) and on the cores
POSJAX_CPUS names; kept to fewer cores than the machine has, the train section is recorded
as train_one_core (one core; give --threads 1: each main job's run has one core to itself)
or train_N_cores, beside the section on every core. Run under OMP_WAIT_POLICY (torch's
OpenMP threads spin between its ops unless it is `passive`, on the cores XLA's threads want
too), the train section is recorded with the policy as well: train_omp_passive.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from benchlib.flags import Parser, at_least, check_peer_installed, run_script
from benchlib.runs import device_section, fresh_result, in_processes, record, spread, tagged
from benchlib.steps import LM, PEER_FLAGS, Ours, Peer, label_arg
from posjax import fileio, provenance
from posjax.launch import hostenv

SECTIONS = ("train", "rope", "fused", "long")
PEER_SECTIONS = ("train",)  # the sections that train x-transformers (torch)
TRAIN_TARGET, ROPE_TARGET, LONG_TARGET_GIB = 1.5, 0.8, 4.0
GIB = 2**30


def parse_args(argv=None):
    p = Parser(__doc__, output="experiments/bench/peers.json", processes=2,
               processes_help="fresh processes, one after another, each with --repeats visits",
               sections=SECTIONS, default_sections="train,rope,long", child=True,
               quick={"encodings": "rope", "steps": 1, "warmup": 1, "repeats": 1,
                      "processes": 1, "long_lengths": "16384", "long_run_length": 0})
    p.add_names("--encodings", PEER_FLAGS, what="peer model of encoding")
    p.add_argument("--seq_len", type=at_least(2), default=512)
    p.add_argument("--batch_size", type=at_least(1), default=8)
    p.add_argument("--size", default="base", help="configs/lm.py size of both train models "
                   "(gpt2: GPT-2 small's blocks, for a GPU)")
    p.add_argument("--packing", default="documents", help="data.packing of posjax's batch")
    p.add_argument("--steps", type=at_least(1), default=3,
                   help="timed steps per system per visit")
    p.add_argument("--warmup", type=at_least(1), default=2,
                   help="untimed steps before the timed ones, the first of which compiles")
    p.add_argument("--threads", type=int, default=2, help="torch threads (XLA uses the cores)")
    p.add_argument("--long_lengths", default="16384,32768,65536,131072")
    p.add_argument("--long_run_length", type=int, default=131072,
                   help="length of the measured run (0: compile-only)")
    p.add_argument("--long_run_encodings", default="alibi,t5,rope",
                   help="encodings that also get the measured run (about 15 min each at "
                   "128k on 2 CPU cores)")
    return p.parse_args(argv)


# --- train: posjax's train step (benchlib.steps.Ours) against x-transformers' (Peer) ---


def _seconds_per_step(system, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        system.step()
    system.wait()
    return (time.perf_counter() - start) / steps


def train_section(args) -> dict:
    """Per encoding, every visit: both systems' seconds per step and tokens/s, and the ratio."""
    tokens = args.seq_len * args.batch_size
    systems = {}
    for name in args.encodings.split(","):
        ours = Ours(name, args.seq_len, args.batch_size, args.size, args.packing)
        peer = Peer(name, args.seq_len, args.batch_size, args.threads, args.size)
        for system in (ours, peer):
            for _ in range(args.warmup):
                system.step()
            system.wait()
        systems[name] = (ours, peer)
    rows = {name: {"params": {"posjax": ours.num_params(), "x-transformers": peer.num_params()},
                   "visits": []}
            for name, (ours, peer) in systems.items()}
    for visit in range(args.repeats):
        for name, (ours, peer) in systems.items():
            order = [("posjax", ours), ("x-transformers", peer)]
            if visit % 2:
                order.reverse()
            seconds = {label: _seconds_per_step(system, args.steps) for label, system in order}
            rows[name]["visits"].append({
                "seconds_per_step": seconds,
                "tokens_per_s": {k: tokens / v for k, v in seconds.items()},
                "ratio": seconds["x-transformers"] / seconds["posjax"],
                "first": order[0][0],
                "load_1min": os.getloadavg()[0],
            })
            print(f"  visit {visit}: {name}: posjax {seconds['posjax'] * 1e3:.0f} ms, "
                  f"x-transformers {seconds['x-transformers'] * 1e3:.0f} ms per step, "
                  f"ratio {rows[name]['visits'][-1]['ratio']:.2f}x", flush=True)
    import importlib.metadata

    import torch

    return {"rows": rows, "steps_per_visit": args.steps, "seq_len": args.seq_len,
            "batch_size": args.batch_size, "threads": args.threads, "size": args.size,
            "packing": args.packing,
            "versions": {"jax": jax.__version__, "torch": torch.__version__,
                         "x-transformers": importlib.metadata.version("x-transformers")}}


# --- rope: RoPE apply against an elementwise copy ------------------------------------------


def rope_section(args) -> dict:
    """RoPE apply against a copy of the same arrays, interleaved: one rotate of q and k (its
    tables included), and the model's case, 4 layers' q and k rotated by one positions
    array in one program (XLA computes the shared cos/sin tables once)."""
    from posjax import encoders

    shape = (args.batch_size, args.seq_len, 4, 64)
    layers = 4
    arrays = list(jax.random.normal(jax.random.key(0), (2 * layers, *shape)))
    pos = jnp.broadcast_to(jnp.arange(args.seq_len, dtype=jnp.int32), shape[:2])
    rope = encoders.get("rope")

    def rotate_layers(pos, *qk):
        return [x for q, k in zip(qk[0::2], qk[1::2], strict=True)
                for x in rope.rotate({}, q, k, pos, pos)]

    copy = jax.jit(lambda pos, *xs: [x * 1.0001 for x in xs])
    cases = {"one_call": (jax.jit(rotate_layers), arrays[:2]),
             "four_layers": (jax.jit(rotate_layers), arrays)}
    calls = 100

    def seconds(fn, xs) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            out = fn(pos, *xs)
        jax.block_until_ready(out)
        return (time.perf_counter() - start) / calls

    for fn, xs in cases.values():
        jax.block_until_ready((fn(pos, *xs), copy(pos, *xs)))
    visits = []
    for _ in range(args.repeats):
        visit = {}
        for case, (fn, xs) in cases.items():
            a, c = seconds(fn, xs), seconds(copy, xs)
            visit[case] = {"apply_s": a, "copy_s": c, "fraction_of_copy": c / a}
            print(f"  rope {case}: apply {a * 1e6:.0f} us, copy {c * 1e6:.0f} us: "
                  f"{c / a:.2f} of copy", flush=True)
        visits.append(visit)
    return {"shape": list(shape), "layers": layers, "calls_per_visit": calls, "visits": visits}


# --- fused: jax.nn.dot_product_attention against the dense kernel --------------------------


def fused_section(args) -> dict:
    """Forward+backward of causal attention ([8, 512, 4, 64], the train step's shapes) with
    attention=fused over attention=dense, interleaved, for encodings the fused path carries."""
    from posjax import encoders
    from posjax.attention import multi_head_attention
    from posjax.encoders.base import Dims

    shape = (args.batch_size, args.seq_len, 4, 64)
    q, k, v = jax.random.normal(jax.random.key(0), (3, *shape))
    pos = jnp.broadcast_to(jnp.arange(args.seq_len, dtype=jnp.int32), shape[:2])
    seg = jnp.ones(shape[:2], jnp.int32)
    cases = {}
    for name in ("none", "rope", "alibi", "t5"):
        enc = encoders.get(name).for_model(True)
        params = enc.init(jax.random.key(1), Dims(256, 4, 64, args.seq_len))
        for impl in ("dense", "fused"):
            def loss(q, k, v, params, enc=enc, impl=impl):
                out = multi_head_attention(q, k, v, encoding=enc, params=params, q_pos=pos,
                                           k_pos=pos, q_seg=seg, k_seg=seg, causal=True,
                                           impl=impl)
                return jnp.sum(out * out)
            grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))
            jax.block_until_ready(grad(q, k, v, params))
            cases[name, impl] = (grad, params)
    visits = []
    for _ in range(args.repeats):
        visit = {}
        for name in ("none", "rope", "alibi", "t5"):
            seconds = {}
            for impl in ("dense", "fused"):
                grad, params = cases[name, impl]
                start = time.perf_counter()
                for _ in range(3):
                    out = grad(q, k, v, params)
                jax.block_until_ready(out)
                seconds[impl] = (time.perf_counter() - start) / 3
            visit[name] = {**{f"{i}_s": t for i, t in seconds.items()},
                           "fused_over_dense": seconds["fused"] / seconds["dense"]}
            print(f"  {name}: dense {seconds['dense'] * 1e3:.0f} ms, fused "
                  f"{seconds['fused'] * 1e3:.0f} ms fwd+bwd", flush=True)
        visits.append(visit)
    return {"shape": list(shape), "platform": jax.default_backend(), "visits": visits}


# --- long: 128k-token evaluation -----------------------------------------------------------


def _long_setup(encoding: str, length: int):
    """(jitted eval step, its arguments) of configs/lm.py size=base with chunked attention,
    on one row of `length` tokens."""
    from posjax.config import load_config_module
    from posjax.experiment import Experiment
    from posjax.train.steps import eval_step

    config = load_config_module(str(LM)).get_config(
        f"{label_arg(encoding)},size=base,seq_len=512,attention=chunked")
    experiment = Experiment.from_config(config)
    model = experiment.build()
    spec = experiment.data.batch_spec(length, 1)
    batch = {key: jnp.zeros(a.shape, a.dtype) for key, a in spec.arrays.items()}
    batch["positions"] = jnp.arange(length, dtype=jnp.int32)[None]
    batch["segment_ids"] = jnp.ones((1, length), jnp.int32)
    batch["weights"] = jnp.ones((1, length), jnp.float32)
    step = jax.jit(lambda params, rest, batch: eval_step(
        params, rest, batch, graphdef=model.graphdef, input_key=experiment.input_key))
    return step, (model.params, model.rest, batch)


def _compiled_bytes(encoding: str, length: int) -> dict:
    step, arguments = _long_setup(encoding, length)
    memory = step.lower(*arguments).compile().memory_analysis()
    parts = {"argument": memory.argument_size_in_bytes, "output": memory.output_size_in_bytes,
             "temp": memory.temp_size_in_bytes}
    return {**parts, "total": sum(parts.values())}


def _measured_run(encoding: str, length: int) -> dict:
    """Run the forward once in this (fresh) process: seconds and peak RSS."""
    step, arguments = _long_setup(encoding, length)
    start = time.perf_counter()
    sums = jax.block_until_ready(step(*arguments))
    return {"seconds": time.perf_counter() - start,
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # KiB
            "finite": bool(all(jnp.isfinite(x).all() for x in jax.tree.leaves(sums)))}


def long_section(args) -> dict:
    """Compiled memory at every length for each encoding; a real run at --long_run_length in
    a fresh process each."""
    lengths = [int(x) for x in args.long_lengths.split(",")]
    rows = {}
    for name in args.encodings.split(","):
        compiled = {length: _compiled_bytes(name, length) for length in lengths}
        per_token = [compiled[n]["total"] / n for n in lengths]
        row = {"compiled": compiled, "bytes_per_token": per_token}
        if args.long_run_length and name in args.long_run_encodings.split(","):
            row["run"] = _child(args, "long_run", name)
            row["run"]["length"] = args.long_run_length
        at_longest = row.get("run", {}).get("peak_rss", compiled[lengths[-1]]["total"])
        row["met"] = at_longest < LONG_TARGET_GIB * GIB
        rows[name] = row
        print(f"  {name}: compiled " + ", ".join(
            f"{n}: {compiled[n]['total'] / GIB:.2f} GiB" for n in lengths)
            + (f"; run at {args.long_run_length}: peak RSS {row['run']['peak_rss'] / GIB:.2f} "
               f"GiB in {row['run']['seconds']:.0f} s" if "run" in row else ""), flush=True)
    return {"rows": rows, "lengths": lengths, "batch_size": 1, "attention": "chunked"}


# --- driver ---------------------------------------------------------------------------------

RUNNERS = {"train": train_section, "rope": rope_section, "fused": fused_section,
           "long": long_section}
# Sections that repeat in fresh processes (long's compile analysis is deterministic).
PER_PROCESS = ("train", "rope", "fused")


def _child_command(args, task: str, *extra: str) -> list[str]:
    """This script running `task` (with `extra` arguments) in one process, its output path
    last."""
    return [__file__, *args.argv, "--child", task, *extra]


def _child(args, task: str, *extra: str) -> dict:
    """Run `task` in a fresh process of this script; its progress streams through, its
    result comes back as JSON in a file."""
    return fresh_result(_child_command(args, task, *extra))


def _run_child(args) -> int:
    task, *extra, result = args.child
    if task == "long_run":
        out = _measured_run(extra[0], args.long_run_length)
    else:
        out = RUNNERS[task](args)
    fileio.write_json(result, out)
    return 0


def _merge_processes(section: str, results: list[dict]) -> dict:
    """One section's results from several processes: every visit kept, tagged by process."""
    merged = dict(results[0])
    if section == "train":
        merged["rows"] = {
            name: {**row, "visits": tagged([r["rows"][name]["visits"] for r in results])}
            for name, row in results[0]["rows"].items()}
        for row in merged["rows"].values():
            row["ratio"] = spread([v["ratio"] for v in row["visits"]])
            row["met"] = row["ratio"]["median"] >= TRAIN_TARGET
    else:
        merged["visits"] = tagged([r["visits"] for r in results])
    if section == "rope":
        for case in ("one_call", "four_layers"):
            merged[case] = spread([v[case]["fraction_of_copy"] for v in merged["visits"]])
            merged[case]["met"] = merged[case]["median"] >= ROPE_TARGET
    merged["processes"] = len(results)
    return merged


def omp_wait_policy() -> str:
    """OMP_WAIT_POLICY as torch's OpenMP reads it ("passive", "active"), "" where unset."""
    return os.environ.get("OMP_WAIT_POLICY", "").strip().lower()


def cores_key(section: str) -> str:
    """The key a section is recorded under: `section` on every core of the machine, else
    with the cores this process may use (POSJAX_CPUS): train_one_core, train_N_cores; and
    with the OpenMP wait policy where OMP_WAIT_POLICY sets one: train_omp_passive."""
    cores = provenance.allowed_cores()
    key = section
    if cores < (os.cpu_count() or cores):
        key = f"{section}_one_core" if cores == 1 else f"{section}_{cores}_cores"
    return f"{key}_omp_{omp_wait_policy()}" if omp_wait_policy() else key


def main(argv=None) -> int:
    hostenv.reexec_with_huge_pages()  # measure what `posjax train` runs with
    hostenv.pin_to_cpus(os.environ)  # on the cores POSJAX_CPUS names
    args = parse_args(argv)
    args.argv = [a for a in (sys.argv[1:] if argv is None else argv)]
    if args.child is not None:
        args.argv = args.argv[:args.argv.index("--child")]
        return _run_child(args)
    check_peer_installed(args.sections, PEER_SECTIONS)
    path = Path(args.json)
    out, mine = device_section(path)
    for section in args.sections.split(","):
        print(f"== {section}", flush=True)
        if section in PER_PROCESS:
            result = _merge_processes(section, in_processes(
                args.processes, _child_command(args, section)))
        else:
            result = RUNNERS[section](args)
        record(path, out, mine, cores_key(section) if section == "train" else section,
               dict(result, cores=provenance.allowed_cores(),
                    **({"omp_wait_policy": omp_wait_policy()} if omp_wait_policy() else {})))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    run_script(main)
