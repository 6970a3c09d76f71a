"""Where a compiled program's time goes: JAX's profiler trace, attributed to HLO ops.

    compiled = jax.jit(f).lower(*args).compile()
    result = profile.breakdown(compiled.as_text(), lambda: compiled(*args), calls=3)
    result["by_category"]   # {"matmul": seconds per call, "elementwise": ..., ...}
    result["by_source"]     # [{"source": "posjax/encoders/relative.py:245 (score)", ...}]

XLA's runtime records one trace event per executed HLO op (a thunk on CPU, a kernel on an
accelerator) named after the op in the compiled module. Each op's *self* time (its events
minus the ops nested in them, as a while loop's body is nested in the loop; the time any
thread ran it, so a loop split over two threads counts once) is classed by what the op
computes (a fusion by the ops it fuses) and by the innermost source line the op came from.
Distinct ops may still run at once on different threads, so the op seconds of a call can
exceed its wall time.
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


@dataclasses.dataclass(frozen=True)
class Op:
    """One HLO op of a compiled module: its class and the source line it came from."""

    category: str
    source: str


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
            ops[name] = Op(_category({code for _, code, _ in body}), source)
    return ops


def _op_of(event, ops: dict[str, Op]) -> str | None:
    """The HLO op an event ran: its name on a CPU (a thunk is named after its op); on an
    accelerator the op in the kernel's `hlo_op` stat, or the kernel's name where it is the
    op's with "." written "_" (XLA names a fusion's GPU kernel so)."""
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


def op_seconds(run: Callable[[], object], ops: dict[str, Op], calls: int,
               trace_dir: str | Path | None = None) -> tuple[dict, float]:
    """({op name: seconds over `calls` runs}, wall seconds of those runs), traced. An op's
    seconds are the time any thread ran it: a loop split over threads counts once. The trace
    goes to `trace_dir` (kept, for TensorBoard or Perfetto) or a temporary folder."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = str(trace_dir or tmp)
        jax.block_until_ready(run())
        jax.profiler.start_trace(tmp)
        start = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(run())
        wall = time.perf_counter() - start
        jax.profiler.stop_trace()
        path = sorted(glob.glob(f"{tmp}/**/*.xplane.pb", recursive=True))[-1]
        data = jax.profiler.ProfileData.from_file(path)
    intervals: dict[str, list] = defaultdict(list)
    for plane in data.planes:
        for line in plane.lines:
            for name, pieces in _self_intervals(line.events, ops).items():
                intervals[name].extend(pieces)
    return {name: _union_seconds(pieces) for name, pieces in intervals.items()}, wall


def breakdown(hlo_text: str, run: Callable[[], object], calls: int = 3, top: int = 12,
              root: str | Path = "", trace_dir: str | Path | None = None) -> dict:
    """Per call: wall seconds, op seconds in all, by category, and the `top` source lines
    (with each line's seconds by category) of the program whose optimized HLO is `hlo_text`
    (`compiled.as_text()`), run by `run()`. `trace_dir` keeps the trace and the HLO text."""
    ops = hlo_ops(hlo_text, str(root))
    if trace_dir:
        Path(trace_dir).mkdir(parents=True, exist_ok=True)
        (Path(trace_dir) / "module.hlo.txt").write_text(hlo_text)
    seconds, wall = op_seconds(run, ops, calls, trace_dir)
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
    }
