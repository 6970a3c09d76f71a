"""posjax.bench: the benchmark scripts' shared parser, fresh processes, spread of repeats and
per-device result files; and that every command of experiments/bench/commands.sh parses."""

from __future__ import annotations

import importlib.util
import json
import shlex
import statistics
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posjax.bench import runs
from posjax.bench.flags import Parser

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "scripts").glob("bench_*.py"))


def _parser(**kw) -> Parser:
    p = Parser("A benchmark.\n\nMore.", output="out.json", sections=("a", "b"),
               default_sections="a", quick={"repeats": 1, "size": 8}, **kw)
    p.add_argument("--size", type=int, default=64)
    return p


def test_parser_has_the_shared_flags_with_the_scripts_defaults():
    args = _parser(processes=2).parse_args([])
    assert (args.repeats, args.processes, args.json, args.sections, args.quick, args.size) == (
        3, 2, "out.json", "a", False, 64)
    assert not hasattr(args, "child")
    assert _parser(child=True).parse_args(["--child", "x", "--y", "out"]).child == [
        "x", "--y", "out"]


def test_quick_sets_only_the_flags_not_given():
    assert vars(_parser().parse_args(["--quick"])) == dict(
        repeats=1, processes=1, json="out.json", sections="a", quick=True, size=8)
    args = _parser().parse_args(["--quick", "--size=32"])
    assert (args.repeats, args.size) == (1, 32)
    args = _parser().parse_args(["--quick", "--size=64", "--repeats", "3"])  # the defaults
    assert (args.repeats, args.size) == (3, 64)
    assert _parser().get_default("size") == 64


def test_unknown_section_is_one_line_naming_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(["--sections=a,c"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "error: unknown section 'c'; valid: a, b")


@pytest.mark.parametrize("script, argv, error", [
    ("bench_peers.py", ["--encodings=rope,xpos"],
     "unknown peer model of encoding 'xpos'; valid: rope, alibi, t5"),
    ("bench_train.py", ["--compile_settings=warm"],
     "unknown compile setting 'warm'; valid: none, default, every"),
    ("bench_attention.py", ["--encodings=none,nope"], "unknown encoding label 'nope'; valid: "),
    ("bench_profile.py", ["--sections=train,gpu"],
     "unknown section 'gpu'; valid: attention, train, peer, rope"),
])
def test_a_script_names_a_bad_name_and_the_valid_ones(script, argv, error, capsys):
    with pytest.raises(SystemExit) as exit_:
        _script(ROOT / "scripts" / script).parse_args(argv)
    assert exit_.value.code == 2
    assert error in capsys.readouterr().err.splitlines()[-1]


repeats = st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=9)


@given(st.lists(repeats, min_size=1, max_size=4))
def test_summarise_takes_median_min_max_over_every_process_repeat(per_process):
    rows = [[{"x": v, "i": i} for i, v in enumerate(values)] for values in per_process]
    row = runs.summarise({"rounds": runs.tagged(rows)}, ("x",))
    values = [v for values in per_process for v in values]
    assert (row["x"], row["x_min"], row["x_max"]) == (
        statistics.median(values), min(values), max(values))
    assert [(r["process"], r["i"]) for r in row["rounds"]] == [
        (p, i) for p, values in enumerate(per_process) for i in range(len(values))]
    assert runs.spread(values) == {"median": row["x"], "min": row["x_min"],
                                   "max": row["x_max"], "n": len(values)}


def test_fresh_result_reads_what_a_fresh_process_wrote(tmp_path):
    script = tmp_path / "child.py"
    script.write_text("import json, os, sys\n"
                      "json.dump({'argv': sys.argv[1:-1], 'pid': os.getpid()},"
                      " open(sys.argv[-1], 'w'))\n")
    result = runs.fresh_result([str(script), "--flag", "--json"])
    assert result["argv"] == ["--flag", "--json"]
    assert result["pid"] != runs.os.getpid()
    script.write_text("import sys\nsys.exit('the child broke')\n")
    with pytest.raises(RuntimeError, match="failed with exit status 1: the child broke"):
        runs.fresh_result([str(script)], capture_output=True, text=True)


def test_record_keeps_other_devices_and_sections(tmp_path, capsys):
    path = tmp_path / "peers.json"
    path.write_text(json.dumps({"H100": {"train": {"x": 1}}, "cpu": {"rope": {"y": 2}}}))
    out, mine = runs.device_section(path)
    assert capsys.readouterr().out.startswith("device: cpu (cpu) x ")
    runs.record(path, out, mine, "train", {"z": 3})
    written = json.loads(path.read_text())
    assert written["H100"] == {"train": {"x": 1}}
    assert written["cpu"]["rope"] == {"y": 2}
    assert written["cpu"]["train"]["z"] == 3 and len(written["cpu"]["train"]["date"]) == 10
    assert written["cpu"]["device"] == runs.device()


def _script(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands() -> list[list[str]]:
    """Every `python scripts/bench_*.py ...` command of experiments/bench/commands.sh."""
    text = (ROOT / "experiments" / "bench" / "commands.sh").read_text().replace("\\\n", " ")
    return [shlex.split(line)[1:] for line in text.splitlines()
            if line.startswith("python scripts/bench_")]


def test_every_bench_command_parses_with_the_shared_parser():
    commands = _commands()
    assert {Path(c[0]).name for c in commands} == {p.name for p in SCRIPTS}
    for script, *argv in commands:
        args = _script(ROOT / script).parse_args(argv)
        assert args.json.startswith("experiments/bench/") and args.repeats >= 1


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_scripts_import_the_shared_module_not_each_other(path):
    source = path.read_text()
    assert "sys.path" not in source and "import bench_" not in source
    assert "from posjax.bench" in source
    assert {"repeats", "processes", "json"} <= set(vars(_script(path).parse_args([])))
