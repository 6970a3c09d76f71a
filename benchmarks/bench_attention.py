"""Benchmark posjax attention: encoding overhead, memory of dense vs chunked, RoPE bandwidth.

    .venv/bin/python benchmarks/bench_attention.py [--quick] [--lengths 512,1024,...]
        [--heads 4] [--head_dim 64] [--json experiments/bench/attention.json]

Four measurements, printed as tables and written (atomically) to one JSON file:
  (a) forward and forward+backward time of causal attention with each encoding divided by
      plain attention (encoding "none") at the same length in the same run; dense up to
      --dense_max, chunked above. After a warm-up, --repeats rounds go round-robin over the
      cases (block_until_ready); a ratio is taken within each round, and every round is kept.
  (b) XLA's compiled memory analysis (`jax.jit(f).lower(...).compile().memory_analysis()`):
      temp_size_in_bytes, the scratch the program allocates beyond its arguments and outputs,
      for dense and chunked, forward and forward+backward, as L doubles (compiled, not run).
  (c) RoPE apply (the rope encoding's rotate of q and k) as a fraction of the bandwidth of an
      elementwise read+write of the same arrays (q * 1.0001, k * 1.0001).
  (d) chunked attention at --long_length (default 32768) with a bias encoding: forward time,
      compiled temp memory (forward and forward+backward) and the process's peak RSS.
With --processes N the whole script runs in N fresh processes one after another; timing
and RoPE rows keep every round of every process and give the median, min and max over all of
them (compiles and memory layout differ between processes, so their spread is in the figures).
Targets (2-core CPU): RoPE >= 80% of copy bandwidth; rotary <= 1.1x plain; bias <= 1.3x;
content-position <= 2x; chunked at 32768 under 4 GiB.
"""

from __future__ import annotations

import re
import resource
import time

import jax
import jax.numpy as jnp
from jax import lax

from benchlib.attention import ENCODINGS, encoding, functions, inputs
from benchlib.flags import Parser, run_script
from benchlib.runs import describe, in_processes, summarise, tagged, verdict
from posjax import encoders, fileio

TARGETS = {"plain": 1.0, "rotary": 1.1, "bias": 1.3, "content": 2.0}
GIB = 2**30


def parse_args(argv=None):
    p = Parser(__doc__, output="experiments/bench/attention.json",
               quick={"lengths": "512,1024,2048", "repeats": 2,
                      "memory_lengths": "1024,4096,16384"})
    p.add_argument("--lengths", default="512,1024,2048,4096,8192", help="comma-separated L")
    p.add_argument("--heads", type=int, default=4, help="attention heads of every case")
    p.add_argument("--head_dim", type=int, default=64, help="width of each head")
    p.add_argument("--block_size", type=int, default=256, help="chunked attention block")
    p.add_argument("--dense_max", type=int, default=2048, help="longest L timed with dense")
    p.add_names("--encodings", ENCODINGS, what="encoding label",
                help="the labels section (a) times, each as a ratio to plain attention "
                "(none) in the same round (the memory section (b) measures none and t5)")
    p.add_argument("--memory_lengths", default="1024,2048,4096,8192,16384,32768",
                   help="section (b): the lengths whose compiled memory is analysed")
    p.add_argument("--long_length", type=int, default=32768,
                   help="section (d): the length chunked attention runs at")
    p.add_argument("--long_encoding", default="alibi", help="an encoding label of --encodings")
    args = p.parse_args(argv)
    # refused now, not after the sections before the one that reads it (minutes of work)
    for flag in ("lengths", "memory_lengths"):
        text = getattr(args, flag)
        if not re.fullmatch(r"\d+(,\d+)*", text) or 0 in _ints(text):
            p.error(f"--{flag}={text}: give token counts of at least 1 joined by commas")
    for flag in ("heads", "head_dim", "block_size", "dense_max", "long_length"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag}={getattr(args, flag)} must be at least 1")
    if args.long_encoding not in ENCODINGS:
        p.error(f"unknown --long_encoding {args.long_encoding!r}; valid: {', '.join(ENCODINGS)}")
    return args


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _round_times(runs: dict, repeats: int) -> dict:
    """{key: [seconds of each round]} for runs {key: (jitted fn, args)}, after one warm-up
    call each.

    The rounds go round-robin over the runs, so a change in machine load (other processes
    on a shared machine) hits every run of a round alike and ratios within a round stay fair.
    """
    for fn, call in runs.values():
        jax.block_until_ready(fn(*call))
    times = {key: [] for key in runs}
    for _ in range(repeats):
        for key, (fn, call) in runs.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(*call))
            times[key].append(time.perf_counter() - start)
    return times


TIMING_KEYS = ("fwd_s", "fwd_bwd_s", "fwd_ratio", "fwd_bwd_ratio")
ROPE_KEYS = ("rope_s", "tables_s", "copy_s", "fraction_of_copy", "tables_fraction_of_copy")


def bench_overhead(args) -> list[dict]:
    """(a): seconds and ratio to plain attention per (length, encoding)."""
    rows = []
    labels = ["none"] + [x for x in args.encodings.split(",") if x and x != "none"]
    for length in _ints(args.lengths):
        impl = "dense" if length <= args.dense_max else "chunked"
        q, k, v, pos, seg = inputs(length, args.heads, args.head_dim)
        runs = {}
        for label in labels:
            enc, params = encoding(label, args.heads, args.head_dim)
            fwd, fwd_bwd = functions(enc, impl, args.block_size)
            call = (q, k, v, params, pos, seg)
            runs[(label, "fwd")], runs[(label, "fwd_bwd")] = (fwd, call), (fwd_bwd, call)
        t = _round_times(runs, args.repeats)
        for label in labels:
            group = ENCODINGS[label][2]
            rounds = [
                dict(fwd_s=f, fwd_bwd_s=b, fwd_ratio=f / f0, fwd_bwd_ratio=b / b0)
                for f, b, f0, b0 in zip(t[(label, "fwd")], t[(label, "fwd_bwd")],
                                        t[("none", "fwd")], t[("none", "fwd_bwd")],
                                        strict=True)
            ]  # fmt: skip
            row = summarise(dict(length=length, impl=impl, encoding=label, group=group,
                                  target=TARGETS[group], rounds=rounds), TIMING_KEYS)
            rows.append(row)
            # the ratio is the median of each round's own ratio (with its range), not the
            # quotient of the median times beside it; the baseline has no target
            ratios = "  ".join(
                f"{part} {row[f'{key}_s'] * 1e3:9.1f} ms ({row[f'{key}_ratio']:5.2f}x, "
                f"{row[f'{key}_ratio_min']:.2f}-{row[f'{key}_ratio_max']:.2f})"
                for part, key in (("fwd", "fwd"), ("fwd+bwd", "fwd_bwd")))
            met = max(row["fwd_ratio"], row["fwd_bwd_ratio"]) <= TARGETS[group]
            target = ("" if label == "none" else
                      f"  target <= {TARGETS[group]}x: {verdict(met)}")
            print(f"L={length:6d} {impl:7s} {label:11s} {ratios}{target}", flush=True)
    print("ratios: the median (min-max) over rounds of each round's time over plain "
          "attention's in that round", flush=True)
    return rows


def _temp_bytes(fn, call) -> int:
    return int(fn.lower(*call).compile().memory_analysis().temp_size_in_bytes)


def bench_memory(args) -> list[dict]:
    """(b): compiled temp bytes of dense and chunked, forward and forward+backward."""
    rows = []
    for label in ("none", "t5"):
        enc, params = encoding(label, args.heads, args.head_dim)
        for length in _ints(args.memory_lengths):
            q, k, v, pos, seg = inputs(length, args.heads, args.head_dim)
            row = dict(length=length, encoding=label)
            for impl in ("dense", "chunked"):
                fwd, fwd_bwd = functions(enc, impl, args.block_size)
                call = (q, k, v, params, pos, seg)
                row[f"{impl}_fwd_temp_bytes"] = _temp_bytes(fwd, call)
                row[f"{impl}_fwd_bwd_temp_bytes"] = _temp_bytes(fwd_bwd, call)
            rows.append(row)
            print(
                f"{label:5s} L={length:6d} temp MiB: dense fwd "
                f"{row['dense_fwd_temp_bytes'] / 2**20:9.1f}  fwd+bwd "
                f"{row['dense_fwd_bwd_temp_bytes'] / 2**20:9.1f} | chunked fwd "
                f"{row['chunked_fwd_temp_bytes'] / 2**20:7.1f}  fwd+bwd "
                f"{row['chunked_fwd_bwd_temp_bytes'] / 2**20:7.1f}",
                flush=True,
            )
    return rows


def _rotate_with_tables(x, cos, sin):
    """Interleaved rotation by given tables cos, sin: [B, L, 1, D/2]; a diagnostic floor."""
    a, b = x[..., 0::2], x[..., 1::2]
    return jnp.stack([a * cos - b * sin, b * cos + a * sin], -1).reshape(x.shape)


def _repeated(fn):
    """jit of (times, q, k, *rest): `times` applications of fn: (i, q, k, *rest) -> (q, k).

    The loop carry reuses the same buffers, so the timing is compute and memory traffic, not
    the page faults of freshly allocated outputs; `times` is traced, so the loop is not
    unrolled and consecutive applications cannot be fused into one pass.
    """

    def run(times, q, k, *rest):
        return lax.fori_loop(0, times, lambda i, qk: fn(i, *qk, *rest), (q, k))

    return jax.jit(run)


def bench_rope(args) -> dict:
    """(c): the rope encoding's rotate of q and k vs an elementwise read+write of both.

    Also times the same rotation from precomputed cos/sin tables: the floor for this layout
    when the trigonometry is not recomputed per element.
    """
    enc, params = encoding("rope", args.heads, args.head_dim)
    length, times = (16384, 5) if args.quick else (65536, 10)
    q, k, _, pos, _ = inputs(length, args.heads, args.head_dim)
    inv_freq = encoders.rotary.frequencies(args.head_dim)
    angles = pos[..., None, None].astype(jnp.float32) * inv_freq
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    # Positions move each step so the compiler cannot hoist the angles out of the loop.
    rope = lambda i, q, k, p: enc.rotate(params, q, k, p + i, p + i)
    table = lambda i, q, k, c, s: (_rotate_with_tables(q, c, s), _rotate_with_tables(k, c, s))
    copy = lambda i, q, k: (q * 1.0001, k * 1.0001)
    n = jnp.int32(times)
    runs = {
        "rope": (_repeated(rope), (n, q, k, pos)),
        "tables": (_repeated(table), (n, q, k, cos, sin)),
        "copy": (_repeated(copy), (n, q, k)),
    }
    t = {key: [s / times for s in seconds]
         for key, seconds in _round_times(runs, max(args.repeats, 5)).items()}
    moved = 4 * q.size * q.dtype.itemsize  # read q, k and write both
    rounds = [
        dict(rope_s=r, tables_s=tb, copy_s=c, fraction_of_copy=c / r,
             tables_fraction_of_copy=c / tb)
        for r, tb, c in zip(t["rope"], t["tables"], t["copy"], strict=True)
    ]  # fmt: skip
    result = summarise(dict(shape=list(q.shape), applications_per_call=times, target=0.8,
                             bytes_moved=moved, rounds=rounds), ROPE_KEYS)
    result["rope_gb_per_s"] = moved / result["rope_s"] / 1e9
    result["copy_gb_per_s"] = moved / result["copy_s"] / 1e9
    t = {key: result[f"{key}_s"] for key in ("rope", "tables", "copy")}
    print(
        f"RoPE apply {list(q.shape)} x2: {t['rope'] * 1e3:.2f} ms "
        f"({result['rope_gb_per_s']:.1f} GB/s); elementwise {t['copy'] * 1e3:.2f} ms "
        f"({result['copy_gb_per_s']:.1f} GB/s): RoPE at "
        f"{100 * result['fraction_of_copy']:.0f}% of copy bandwidth (target >= 80%: "
        f"{verdict(result['fraction_of_copy'] >= result['target'])}); "
        f"from precomputed tables {t['tables'] * 1e3:.2f} ms "
        f"({100 * result['tables_fraction_of_copy']:.0f}%)",
        flush=True,
    )
    return result


def bench_long(args) -> dict:
    """(d): chunked attention at one long length: it runs, its time and memory."""
    length = args.long_length
    enc, params = encoding(args.long_encoding, args.heads, args.head_dim)
    q, k, v, pos, seg = inputs(length, args.heads, args.head_dim)
    fwd, fwd_bwd = functions(enc, "chunked", args.block_size)
    call = (q, k, v, params, pos, seg)
    temp_fwd, temp_bwd = _temp_bytes(fwd, call), _temp_bytes(fwd_bwd, call)
    start = time.perf_counter()
    out = jax.block_until_ready(fwd(*call))
    seconds = time.perf_counter() - start  # includes compilation: one run only
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    result = dict(
        length=length, encoding=args.long_encoding, heads=args.heads, head_dim=args.head_dim,
        block_size=args.block_size, finite=bool(jnp.isfinite(out).all()),
        fwd_seconds_incl_compile=seconds, fwd_temp_bytes=temp_fwd, fwd_bwd_temp_bytes=temp_bwd,
        process_peak_rss_bytes=rss, target_bytes=4 * GIB,
    )  # fmt: skip
    print(
        f"chunked L={length} {args.long_encoding}: forward {seconds:.1f} s (with compile), "
        f"finite={result['finite']}; compiled temp fwd {temp_fwd / 2**20:.1f} MiB, fwd+bwd "
        f"{temp_bwd / 2**20:.1f} MiB; process peak RSS {rss / GIB:.2f} GiB (target < 4 GiB: "
        f"{verdict(rss < result['target_bytes'])})",
        flush=True,
    )
    return result


def bench_in_processes(args) -> dict:
    """The whole benchmark in `args.processes` fresh processes, one after another. Timing and
    RoPE rows keep every process's rounds (with its index) and are summarised over all of
    them; the long run is kept per process; compiled memory is the same in each, so the first
    process's is kept."""
    argv = [f"--{key}={value}" for key, value in vars(args).items()
            if key not in ("processes", "json", "quick")] + ["--quick"] * args.quick
    runs = in_processes(args.processes, [__file__, *argv, "--processes=1", "--json"])

    def merged(rows: list[dict], keys: tuple[str, ...]) -> dict:
        return summarise(dict(rows[0], rounds=tagged([row["rounds"] for row in rows])), keys)

    payload = dict(runs[0], config=vars(args), long=[run["long"] for run in runs])
    payload["rope_throughput"] = merged([run["rope_throughput"] for run in runs], ROPE_KEYS)
    payload["timing"] = [merged([run["timing"][i] for run in runs], TIMING_KEYS)
                         for i in range(len(runs[0]["timing"]))]
    print(f"\n{args.processes * args.repeats} rounds in {args.processes} processes: "
          "median (min-max) of the ratio to plain attention")
    for row in payload["timing"]:
        print(f"L={row['length']:6d} {row['impl']:7s} {row['encoding']:11s} fwd "
              f"{row['fwd_ratio']:.2f} ({row['fwd_ratio_min']:.2f}-{row['fwd_ratio_max']:.2f})"
              f"  fwd+bwd {row['fwd_bwd_ratio']:.2f} ({row['fwd_bwd_ratio_min']:.2f}-"
              f"{row['fwd_bwd_ratio_max']:.2f})", flush=True)
    return payload


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.processes > 1:
        payload = bench_in_processes(args)
    else:
        print(describe(), flush=True)
        payload = dict(
            config=vars(args),
            device=jax.devices()[0].platform,
            memory_measure="XLA compiled memory_analysis().temp_size_in_bytes (scratch beyond "
            "arguments and outputs), batch 1, causal",
        )
        # (d) first, so the process's peak RSS is the long run's own.
        print("\n(d) long-context chunked attention")
        payload["long"] = bench_long(args)
        print("\n(c) RoPE apply throughput")
        payload["rope_throughput"] = bench_rope(args)
        print(f"\n(b) dense vs chunked memory: {payload['memory_measure']}")
        payload["memory"] = bench_memory(args)
        print("\n(a) time relative to plain attention (batch 1, causal)")
        payload["timing"] = bench_overhead(args)
    fileio.write_json(args.json, payload)
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    run_script(main)
