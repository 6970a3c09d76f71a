"""Where a compiled program's time goes: JAX's profiler trace, attributed to HLO ops.

    compiled = jax.jit(f).lower(*args).compile()
    result = profile.breakdown(compiled.as_text(), lambda: compiled(*args), calls=3)
    result["by_category"]       # {"matmul": seconds per call, "elementwise": ..., ...}
    result["by_source"]         # [{"source": "posjax/encoders/relative.py:245 (score)", ...}]
    result["top_ops"]           # [{"op": "fusion.3", "share": 0.21, ...}]: share of the wall
    result["attributed_share"]  # share of the wall that named ops ran
    profile.parse_trace(folder) # the same from a kept trace, offline

XLA's runtime records one trace event per executed HLO op (a thunk on CPU, a kernel on an
accelerator). On a CPU the host lines' events are named after the ops; each op's *self* time
(its events minus the ops nested in them, as a while loop's body is nested in the loop; the
time any thread ran it, so a loop split over two threads counts once) counts. On an
accelerator only the device's stream kernels count: a fusion's kernel is named after it, a
cuBLAS or cuDNN kernel inside a CUDA graph is matched to its custom call by order, and a
kernel of no op keeps its own name. Ops are classed by what they compute (a fusion by the ops
it fuses) and placed at the innermost source line they came from. Distinct ops may still run
at once on different threads, so the op seconds of a call can exceed its wall time; the
shares of `top_ops` split such time among them and so add up to at most the wall.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import re
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import jax

# What an op computes, by the opcodes it holds: the first class with one of its opcodes wins.
CATEGORIES = (
    ("matmul", {"dot", "convolution", "custom-call"}),
    ("reduction", {"reduce", "reduce-window", "all-reduce"}),
    ("gather/scatter", {"gather", "scatter", "dynamic-slice", "dynamic-update-slice", "sort"}),
    ("transcendental", {"exponential", "exponential-minus-one", "log", "log-plus-one", "sine",
                        "cosine", "tanh", "logistic", "power", "sqrt", "rsqrt", "erf", "tan",
                        "atan2"}),
    ("elementwise", {"add", "subtract", "multiply", "divide", "maximum", "minimum", "select",
                     "compare", "negate", "abs", "convert", "and", "or", "not", "clamp",
                     "floor", "ceil", "round-nearest-even", "sign", "remainder"}),
    ("copy/layout", {"copy", "transpose", "concatenate", "pad", "slice", "reshape",
                     "broadcast", "bitcast", "reverse", "iota", "constant", "tuple",
                     "get-tuple-element", "parameter", "copy-start", "copy-done"}),
)
CONTROL = "control"  # while, conditional, call: their own bookkeeping, bodies excluded
ATTENTION = "attention"  # a fused attention kernel's custom call (cuDNN's flash attention)


@dataclasses.dataclass(frozen=True)
class Op:
    """One HLO op of a compiled module: its class and the source line it came from."""

    category: str
    source: str
    target: str = ""  # a custom call's target (a cuBLAS or cuDNN routine)


_MODULE = re.compile(r"^HloModule ([\w.\-]+)", re.M)
_TARGET = re.compile(r'custom_call_target="([^"]*)"')
_HEADER = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) \(.*\) -> .*\{$")
_FRAME_FILE = re.compile(r'^(\d+) "(.*)"$')
_LOCATION = re.compile(r"^(\d+) \{file_name_id=(\d+) function_name_id=(\d+) line=(\d+)")
_STACK_FRAME = re.compile(r"^(\d+) \{file_location_id=(\d+)")


def _opcode(rhs: str) -> str:
    """`f32[2]{0} add(%a, %b), ...` -> add; a tuple shape is skipped by its parentheses."""
    if rhs.startswith("("):
        depth = 0
        for index, char in enumerate(rhs):
            depth += (char == "(") - (char == ")")
            if depth == 0:
                return rhs[index + 1:].strip().split("(", 1)[0]
    return rhs[rhs.find(" ") + 1:].split("(", 1)[0]


def _sections(hlo_text: str) -> tuple[dict[str, dict[int, str]], dict[str, list[str]]]:
    """The module's source tables ({table: {id: line}}) and computations ({name: lines})."""
    tables: dict[str, dict[int, str]] = defaultdict(dict)
    computations: dict[str, list[str]] = {}
    table, current = None, None
    for line in hlo_text.splitlines():
        stripped = line.strip()
        if stripped in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            table = stripped
        elif (header := _HEADER.match(stripped)) and not line.startswith(" "):
            table, current = None, header.group(1)
            computations[current] = []
        elif stripped == "}":
            current = None
        elif current is not None and " = " in stripped:
            computations[current].append(stripped)
        elif table and stripped:
            tables[table][int(stripped.split(" ", 1)[0])] = stripped
    return tables, computations


def _sources(tables: dict[str, dict[int, str]], root: str) -> dict[int, str]:
    """stack_frame_id -> "path:line (function)" of the frame's own location."""
    files = {i: _FRAME_FILE.match(t).group(2) for i, t in tables["FileNames"].items()}
    functions = {i: _FRAME_FILE.match(t).group(2) for i, t in tables["FunctionNames"].items()}
    locations = {}
    for i, text in tables["FileLocations"].items():
        _, file_id, function_id, line = map(int, _LOCATION.match(text).groups())
        path = files[file_id]
        path = path[len(root) + 1:] if path.startswith(root + "/") else path
        locations[i] = f"{path}:{line} ({functions[function_id]})"
    return {i: locations[int(_STACK_FRAME.match(t).group(2))]
            for i, t in tables["StackFrames"].items()}


def _source_of(line: str, frames: dict[int, str]) -> str:
    frame = re.search(r"stack_frame_id=(\d+)", line)
    if frame and int(frame.group(1)) in frames:
        return frames[int(frame.group(1))]
    name = re.search(r'op_name="([^"]*)"', line)
    return name.group(1) if name else "?"


def _category(opcodes: set[str]) -> str:
    for category, members in CATEGORIES:
        if opcodes & members:
            return category
    return CONTROL


def _shape(rhs: str) -> str:
    """`f32[4,256,64]{2,1,0} dot(...)` -> f32[4,256,64]."""
    return re.sub(r"\{[^}]*\}", "", rhs.split(" ", 1)[0])


def _dot_label(line: str, shapes: dict[str, str]) -> str:
    """A dot without source metadata named by its shapes: `dot A x B -> C`."""
    lhs, rhs = re.search(r"dot\(%?([\w.\-]+), %?([\w.\-]+)\)", line).groups()
    return f"dot {shapes.get(lhs, '?')} x {shapes.get(rhs, '?')} -> {_shape(line.split(' = ')[1])}"


def _instruction(line: str) -> tuple[str, str, str]:
    """`ROOT %dot.1 = f32[4]{0} dot(...), ...` -> (dot.1, dot, the line)."""
    lhs, rhs = line.split(" = ", 1)
    return lhs.removeprefix("ROOT ").lstrip("%"), _opcode(rhs), line


def hlo_ops(hlo_text: str, root: str = "") -> dict[str, Op]:
    """Every op of a compiled module's text (`compiled.as_text()`) by name. A fusion is
    classed by the opcodes of the computation it calls, and placed at its own source line.
    XLA:CPU drops the metadata of some dot fusions inside loops; those are named by their
    shapes (`dot f32[1024,256] x f32[256,256] -> f32[1024,256]`). `root` is stripped from
    source paths."""
    tables, computations = _sections(hlo_text)
    frames = _sources(tables, root.rstrip("/")) if tables.get("StackFrames") else {}
    parsed = {comp: [_instruction(line) for line in lines]
              for comp, lines in computations.items()}
    shapes = {comp: {name: _shape(line.split(" = ", 1)[1]) for name, _, line in instructions}
              for comp, instructions in parsed.items()}
    ops = {}
    for comp, instructions in parsed.items():
        for name, opcode, line in instructions:
            called = re.search(r"calls=%?([\w.\-]+)", line) if opcode == "fusion" else None
            body_comp = called.group(1) if called and parsed.get(called.group(1)) else comp
            body = parsed[body_comp] if body_comp != comp else [(name, opcode, line)]
            source = _source_of(line, frames)
            dots = [text for _, code, text in body if code == "dot"]
            if source == "?" and dots:
                source = _dot_label(dots[0], shapes[body_comp])
            target = _TARGET.search(line) if opcode == "custom-call" else None
            target = target.group(1) if target else ""
            category = (ATTENTION if re.search(r"fmha|attention", target, re.I)
                        else _category({code for _, code, _ in body}))
            ops[name] = Op(category, source, target)
    return ops


def _op_of(event, ops: dict[str, Op]) -> str | None:
    """The HLO op an event ran: its name on a CPU (a thunk is named after its op); on an
    accelerator the op in the kernel's `hlo_op` stat, or the kernel's name where it is the
    op's with "." written "_" (XLA names a fusion's GPU kernel so, and reuses the kernel of
    the first of identical fusions for the others)."""
    if event.name in ops:
        return event.name
    op = dict(event.stats).get("hlo_op")
    if op in ops:
        return op
    return _kernel_names(tuple(ops)).get(event.name)


@functools.lru_cache(maxsize=4)
def _kernel_names(op_names: tuple[str, ...]) -> dict[str, str]:
    """{op name with "." as "_": op name} for the ops whose name has a "."."""
    return {name.replace(".", "_"): name for name in op_names if "." in name}


def _self_intervals(events, ops: dict[str, Op]) -> dict[str, list[tuple[float, float]]]:
    """{op name: [(start, end) ns]} of one trace line's events, each without the spans of the
    ops nested in it (a loop's body)."""
    named = ((e, _op_of(e, ops)) for e in events)
    spans = sorted(((e.start_ns, e.end_ns, name) for e, name in named if name),
                   key=lambda s: (s[0], -s[1]))
    pieces: dict[str, list[tuple[float, float]]] = defaultdict(list)
    stack: list[tuple[float, list]] = []
    for start, end, name in spans:
        while stack and stack[-1][0] <= start:
            stack.pop()
        if stack:  # cut the child out of its parent's last piece
            parent = stack[-1][1]
            first, last = parent.pop()
            parent.extend([(first, start), (end, last)])
        own = pieces[name]
        own.append((start, end))
        stack.append((end, own))
    return pieces


def _union_seconds(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by possibly overlapping (start, end) ns intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total * 1e-9


def module_name(hlo_text: str) -> str:
    """`HloModule jit_train_step, ...` -> jit_train_step: the `hlo_module` of its kernels."""
    found = _MODULE.search(hlo_text)
    return found.group(1) if found else ""


def _library(name: str) -> str:
    """The library a kernel or a custom call's target belongs to (cudnn, cublas), or ""."""
    low = name.lower()
    if "cudnn" in low:
        return "cudnn"
    return "cublas" if re.search(r"cublas|nvjet|gemm|xmma|cutlass", low) else ""


def kernel_spans(kernels, ops: dict[str, Op], module: str) -> tuple[list, dict[str, Op]]:
    """([(start, end, op name)], {name: Op} of the kernels of no op of `ops`) for one
    accelerator stream's kernels in time order. A kernel of this module counts for its op
    (`_op_of`); inside a CUDA graph every kernel's `hlo_op` is the graph's, so a library
    kernel (cuBLAS, cuDNN) counts for the next custom call of its library in the module's
    order, cycling over the calls: cuBLAS runs one kernel per call, cuDNN a run of distinct
    kernels. A memset counts for the kernel after it (the library zeroes its workspace so).
    Any other kernel, or one of another program, is an op of its own name, classed "kernel"
    and placed at its program."""
    queues: dict[str, list[str]] = defaultdict(list)
    for name, op in ops.items():
        if op.target:
            queues[_library(op.target)].append(name)
    taken: dict[str, int] = defaultdict(int)
    extra: dict[str, Op] = {}
    spans, memsets = [], []
    call: tuple[str, set, str] | None = None  # (library, its kernel names, op) running
    for event in kernels:
        program = dict(event.stats).get("hlo_module", module)
        name = _op_of(event, ops) if program == module else None
        library = _library(event.name)
        if name:
            call = None
        elif event.name.startswith("Memset"):
            memsets.append(event)
            continue
        elif program == module and queues.get(library):
            if call is None or call[0] != library or library == "cublas" or event.name in call[1]:
                queue = queues[library]
                call = (library, set(), queue[taken[library] % len(queue)])
                taken[library] += 1
            call[1].add(event.name)
            name = call[2]
        else:
            name, call = event.name, None
            extra[name] = Op("kernel", program or "?")
        spans.extend((m.start_ns, m.end_ns, name) for m in memsets + [event])
        memsets = []
    for memset in memsets:
        extra[memset.name] = Op("kernel", module or "?")
        spans.append((memset.start_ns, memset.end_ns, memset.name))
    return spans, extra


def _kernel_lines(data) -> list[list]:
    """The events of each accelerator stream (a GPU's "Stream #..." lines, else a device's
    "XLA Ops" line) in time order; none on a CPU."""
    out = []
    for plane in data.planes:
        if not plane.name.startswith("/device:"):
            continue
        lines = {line.name: line for line in plane.lines}
        streams = [line for name, line in lines.items() if name.startswith("Stream")]
        for line in streams or [lines[n] for n in ("XLA Ops",) if n in lines]:
            out.append(sorted(line.events, key=lambda e: e.start_ns))
    return [events for events in out if events]


def trace_spans(data, ops: dict[str, Op], module: str) -> tuple[list, dict[str, Op]]:
    """([(start, end, op name)], {name: Op} of kernels of no op) of a profiler trace
    (`jax.profiler.ProfileData`): an accelerator's stream kernels (`kernel_spans`) where the
    trace has them, else every host line's events named after ops, each op's self time."""
    lines = _kernel_lines(data)
    if lines:
        spans, extra = [], {}
        for events in lines:
            found, more = kernel_spans(events, ops, module)
            spans.extend(found)
            extra.update(more)
        return spans, extra
    return [(start, end, name) for plane in data.planes for line in plane.lines
            for name, pieces in _self_intervals(line.events, ops).items()
            for start, end in pieces], {}


def executions(spans: list, calls: int) -> list[tuple[float, float]]:
    """The (start, end) ns of each of `calls` executions: the spans' extent cut at its
    `calls` - 1 widest gaps (the host's time between calls)."""
    ordered = sorted((start, end) for start, end, _ in spans)
    if not ordered:
        return []
    gaps, reach = [], ordered[0][1]
    for start, end in ordered[1:]:
        if start > reach:
            gaps.append((start - reach, reach, start))
        reach = max(reach, end)
    cuts = sorted((left, right) for _, left, right in sorted(gaps)[len(gaps) - calls + 1:]
                  if calls > 1)
    edges = [ordered[0][0], *(t for cut in cuts for t in cut), reach]
    return list(zip(edges[::2], edges[1::2], strict=True))


def shared_seconds(spans: list) -> dict[str, float]:
    """{op name: seconds} where each instant some op ran counts once, split evenly among the
    ops running then: the parts sum to the time anything ran, so shares of a wall add up."""
    edges = sorted({t for start, end, _ in spans for t in (start, end)})
    if not edges:
        return {}
    index = {t: i for i, t in enumerate(edges)}
    delta = defaultdict(lambda: defaultdict(int))
    for start, end, name in spans:
        delta[index[start]][name] += 1
        delta[index[end]][name] -= 1
    running: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    for i, (left, right) in enumerate(zip(edges, edges[1:], strict=False)):
        for name, change in delta[i].items():
            running[name] += change
        active = [name for name, count in running.items() if count > 0]
        for name in active:
            seconds[name] += (right - left) * 1e-9 / len(active)
    return dict(seconds)


def _kind(name: str) -> str:
    """`dot_product_attention_bwd.120` -> dot_product_attention_bwd: the ops one line of code
    makes in every layer differ only by their number."""
    return re.sub(r"\.\d+$", "", name)


def top_ops(shared: dict[str, float], ops: dict[str, Op], calls: int, wall: float,
            top: int) -> list[dict]:
    """The `top` kinds of op (`_kind`) by shared seconds, one row per kind, category and
    source line: the seconds per call, the share of the wall, how many ops and the largest."""
    groups: dict[tuple, list] = defaultdict(list)
    for name, seconds in shared.items():
        op = ops[name]
        groups[(_kind(name), op.category, op.source)].append((seconds, name))
    rows = [{"op": kind, "category": category, "source": source,
             "seconds": sum(s for s, _ in members) / calls,
             "share": sum(s for s, _ in members) / wall if wall else 0.0,
             "ops": len(members), "largest": max(members)[1]}
            for (kind, category, source), members in groups.items()]
    return sorted(rows, key=lambda row: -row["seconds"])[:top]


def summary(spans: list, ops: dict[str, Op], extra: dict[str, Op], calls: int,
            wall: float | None = None, top: int = 12) -> dict:
    """Per call: the wall seconds (`wall`, over all calls, as the host timed them; else the
    device span), op seconds in all, by category and by source line (the `top` lines), the
    seconds some op ran (`device_busy_s`), the span of the executions of the module's own ops
    `ops` (`device_span_s`), the share of the wall that named ops (`ops` and the kernels of
    no op, `extra`) ran (`attributed_share`) and the `top` kinds of op by their share
    (`top_ops`). With no `wall`, only spans inside the executions count."""
    windows = executions([s for s in spans if s[2] in ops], calls)
    ops = {**ops, **extra}
    span = sum(end - start for start, end in windows) * 1e-9
    if wall is None:
        spans = [s for s in spans if any(lo <= s[0] < hi for lo, hi in windows)]
    wall = span if wall is None else wall
    pieces: dict[str, list] = defaultdict(list)
    for start, end, name in spans:
        pieces[name].append((start, end))
    seconds = {name: _union_seconds(p) for name, p in pieces.items()}
    shared = shared_seconds(spans)
    by_category: dict[str, float] = defaultdict(float)
    by_source: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for name, s in seconds.items():
        op = ops[name]
        by_category[op.category] += s / calls
        by_source[op.source][op.category] += s / calls
    ranked = sorted(by_source.items(), key=lambda kv: -sum(kv[1].values()))
    return {
        "calls": calls,
        "wall_s": wall / calls,
        "op_s": sum(seconds.values()) / calls,
        "by_category": dict(sorted(by_category.items(), key=lambda kv: -kv[1])),
        "by_source": [{"source": source, "seconds": sum(cats.values()),
                       "by_category": dict(cats)} for source, cats in ranked[:top]],
        "device_busy_s": _union_seconds([(s, e) for s, e, _ in spans]) / calls,
        "device_span_s": span / calls,
        "attributed_share": sum(shared.values()) / wall if wall else 0.0,
        "top_ops": top_ops(shared, ops, calls, wall, top),
    }


def trace(run: Callable[[], object], calls: int, trace_dir: str | Path) -> float:
    """Wall seconds of `calls` runs of `run()`, traced into `trace_dir` after two untraced
    runs (a step whose second call differs from its first, as a metric sum started by the
    first, compiles the rest there). Python's own calls are not traced: that tracer slows
    the host's dispatch."""
    jax.block_until_ready(run())
    jax.block_until_ready(run())
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    jax.profiler.start_trace(str(trace_dir), profiler_options=options)
    start = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(run())
    wall = time.perf_counter() - start
    jax.profiler.stop_trace()
    return wall


def _profile_data(folder: str | Path):
    """The newest xplane under `folder`, read."""
    path = sorted(glob.glob(f"{folder}/**/*.xplane.pb", recursive=True))[-1]
    return jax.profiler.ProfileData.from_file(path)


def breakdown(hlo_text: str, run: Callable[[], object], calls: int = 3, top: int = 12,
              root: str | Path = "", trace_dir: str | Path | None = None) -> dict:
    """`summary` of `calls` traced runs of `run()`, the program whose optimized HLO is
    `hlo_text` (`compiled.as_text()`), against the host's wall time. `trace_dir` keeps the
    trace and the HLO text (module.hlo.txt) for `parse_trace`."""
    ops = hlo_ops(hlo_text, str(root))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(trace_dir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "module.hlo.txt").write_text(hlo_text)
        wall = trace(run, calls, folder)
        data = _profile_data(folder)
    spans, extra = trace_spans(data, ops, module_name(hlo_text))
    return dict(summary(spans, ops, extra, calls, wall, top), wall_from="host")


def parse_trace(folder: str | Path, calls: int = 2, top: int = 12, root: str | Path = "") -> dict:
    """`summary` of a kept trace folder (`breakdown`'s `trace_dir`: module.hlo.txt and the
    xplane under it) of `calls` calls, against the device span of the calls: the trace holds
    no host wall time."""
    hlo_text = (Path(folder) / "module.hlo.txt").read_text()
    ops = hlo_ops(hlo_text, str(root))
    spans, extra = trace_spans(_profile_data(folder), ops, module_name(hlo_text))
    return dict(summary(spans, ops, extra, calls, None, top), wall_from="device span")
