"""benchlib: the benchmark scripts' shared parser, fresh processes, spread of repeats and
per-device result files; MFU's datasheet peaks and FLOP counts, the GPU check's figures, the
chained matmul and the long section's rows; the vmap section's pure parts (the tables'
agreement, the ratio of the medians and its verdict, the commands, the raw file's table); and
that every command of experiments/bench/commands.sh parses."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchlib import gpu_figures, peaks, runs, sweeps
from benchlib.flags import Parser
from benchlib.steps import Trainee
from posjax import fileio
from posjax.config import load_config_module
from posjax.errors import ConfigError
from posjax.train import steps as train_steps

ROOT = Path(__file__).resolve().parents[1]
MAIN_ENCODINGS = ("none", "learned", "sinusoidal", "rope", "alibi", "t5", "xpos")
SCRIPTS = sorted((ROOT / "benchmarks").glob("bench_*.py"))


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
    # a quick check writes beside no committed record (it replaced experiments/bench's, and
    # `posjax report experiments/bench --check` then failed on it)
    assert vars(_parser().parse_args(["--quick"])) == dict(
        repeats=1, processes=1, json="runs/bench_quick/out.json", sections="a", quick=True,
        size=8)
    assert _parser().parse_args(["--quick", "--json=mine.json"]).json == "mine.json"
    assert _parser().parse_args(["--json=out.json"]).json == "out.json"
    args = _parser().parse_args(["--quick", "--size=32"])
    assert (args.repeats, args.size) == (1, 32)
    args = _parser().parse_args(["--quick", "--size=64", "--repeats", "3"])  # the defaults
    assert (args.repeats, args.size) == (3, 64)
    assert _parser().get_default("size") == 64


def test_quick_moves_every_committed_output_beside_no_record():
    """bench_train.py --quick --sections vmap replaced experiments/bench/vmap_seeds.json:
    only --json was moved, not --vmap_json."""
    from benchlib import flags

    p = _parser()
    p.add_output("--vmap_json", "experiments/bench/vmap_seeds.json", "another file")
    args = p.parse_args(["--quick"])
    assert (args.json, args.vmap_json) == ("runs/bench_quick/out.json",
                                           "runs/bench_quick/vmap_seeds.json")
    assert p.parse_args([]).vmap_json == "experiments/bench/vmap_seeds.json"
    assert p.parse_args(["--quick", "--vmap_json=mine.json"]).vmap_json == "mine.json"
    train = _script(ROOT / "benchmarks" / "bench_train.py").parse_args(
        ["--quick", "--sections=vmap"])
    assert train.vmap_json == f"{flags.QUICK_FOLDER}/vmap_seeds.json"


def test_unknown_section_is_one_line_naming_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(["--sections=a,c"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "error: unknown section 'c'; valid: a, b")


@pytest.mark.parametrize("argv", [["--repeats", "-1"], ["--repeats", "0"],
                                  ["--processes", "0"]])
def test_no_visit_or_no_process_is_one_line(argv, capsys):
    """--repeats -1 compiled everything, then failed on a median of no data; --processes 0
    ran in-process and recorded "processes": 0."""
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        f"error: {argv[0]}={argv[1]} must be at least 1")


@pytest.mark.parametrize("script, section", [("bench_peers.py", "train"),
                                             ("bench_profile.py", "peer")])
def test_a_peer_section_without_torch_is_one_line_before_any_section(script, section, capsys,
                                                                      monkeypatch):
    """Without torch, a section that trains x-transformers ended in two tracebacks (the
    child's ModuleNotFoundError, then the parent's RuntimeError), after the sections before
    it had run."""
    import importlib.util

    from benchlib.flags import check_peer_installed

    module = _script(ROOT / "benchmarks" / script)
    assert section in module.PEER_SECTIONS
    assert "check_peer_installed(args.sections, PEER_SECTIONS)" in (
        ROOT / "benchmarks" / script).read_text()  # main checks before its first section
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else find_spec(name, *a))
    monkeypatch.setattr(sys, "argv", [script])
    check_peer_installed("rope", module.PEER_SECTIONS)  # what needs no torch runs
    with pytest.raises(SystemExit) as exit_:
        check_peer_installed(f"rope,{section}", module.PEER_SECTIONS)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{script}: error: section {section} trains x-transformers, and torch is not installed: "
        f"pip install -c constraints.txt -e '.[bench]', or leave {section} out of --sections"]


@pytest.mark.parametrize("script, argv, error", [
    ("bench_peers.py", ["--encodings=rope,xpos"],
     "unknown peer model of encoding 'xpos'; valid: rope, alibi, t5, t5_shared"),
    ("bench_train.py", ["--compile_settings=warm"],
     "unknown compile setting 'warm'; valid: none, default, every"),
    ("bench_attention.py", ["--encodings=none,nope"], "unknown encoding label 'nope'; valid: "),
    # each was refused only after the sections before the one that read it, or a traceback
    ("bench_attention.py", ["--lengths=abc"],
     "--lengths=abc: give token counts of at least 1 joined by commas"),
    # refused when its section started, after the ones before it ran
    ("bench_train.py", ["--encodings=rope,bogus"], "--encodings: unknown encoding 'bogus' in "
     "'bogus'; valid: "),
    ("bench_train.py", ["--encodings=t5@nokernel"], "--encodings: unknown attention kernel "
     "'nokernel' in 't5@nokernel'; valid: auto, chunked, dense, flash_bias, fused, linear"),
    # each ran: a batch of 0 rows trained none (tokens/s 0, peers' ratio 0.03x), a warm-up
    # of -1 timed the compile, 0 steps and sizes of 0 or abc were tracebacks
    ("bench_train.py", ["--batch_size=0"], "argument --batch_size: 0 must be at least 1"),
    ("bench_train.py", ["--warmup=-1"], "argument --warmup: -1 must be at least 0"),
    ("bench_train.py", ["--steps=0"], "--steps=0 times no step, and section speed times steps: "
     "give at least 1 (0 is for the long section alone, which then only compiles)"),
    ("bench_train.py", ["--matmul_sizes=256,abc"],
     "argument --matmul_sizes: 'abc' is not a whole number"),
    ("bench_peers.py", ["--warmup=0"], "argument --warmup: 0 must be at least 1"),
    ("bench_profile.py", ["--calls=0"], "argument --calls: 0 must be at least 1"),
    ("bench_train.py", ["--long_shapes=12x"], "--long_shapes=12x: give LENGTHxBATCH pairs of "
     "whole numbers joined by commas, e.g. 4096x8,8192x4"),
    ("bench_attention.py", ["--lengths=512,0"],
     "--lengths=512,0: give token counts of at least 1 joined by commas"),
    ("bench_attention.py", ["--block_size=0"], "--block_size=0 must be at least 1"),
    ("bench_attention.py", ["--long_length=-5"], "--long_length=-5 must be at least 1"),
    ("bench_attention.py", ["--long_encoding=bogus"], "unknown --long_encoding 'bogus'; valid: "),
    ("bench_profile.py", ["--sections=train,gpu"],
     "unknown section 'gpu'; valid: attention, train, peer, rope"),
])
def test_a_script_names_a_bad_name_and_the_valid_ones(script, argv, error, capsys):
    with pytest.raises(SystemExit) as exit_:
        _script(ROOT / "benchmarks" / script).parse_args(argv)
    assert exit_.value.code == 2
    assert error in capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize("allowed, key", [({0, 1}, "train"), ({1}, "train_one_core"),
                                          ({0, 2}, "train_2_cores")])
def test_peers_train_is_recorded_by_the_cores_it_ran_on(allowed, key, monkeypatch):
    """bench_peers.py kept to fewer cores than the machine's (POSJAX_CPUS) records its train
    section apart from the one on every core, so neither replaces the other."""
    peers = _script(ROOT / "benchmarks" / "bench_peers.py")
    monkeypatch.setattr(os, "cpu_count", lambda: 2 if allowed == {0, 1} else 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: allowed, raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert peers.cores_key("train") == key
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert peers.cores_key("train") == f"{key}_omp_passive"  # not over the spinning one's


def test_peers_long_section_builds_every_default_label():
    """Its default encodings include t5_shared, which the long section passed on as
    `encoding=t5_shared`: unknown encoding, after the others were measured."""
    peers = _script(ROOT / "benchmarks" / "bench_peers.py")
    step, (params, rest, batch) = peers._long_setup("t5_shared", 64)
    assert batch["positions"].shape == (1, 64)
    shared = [path for path, _ in jax.tree_util.tree_leaves_with_path(params)
              if "table" in jax.tree_util.keystr(path)]
    own = [path for path, _ in jax.tree_util.tree_leaves_with_path(
        peers._long_setup("t5", 64)[1][0]) if "table" in jax.tree_util.keystr(path)]
    assert 0 < len(shared) < len(own)  # one table for all layers, against one per layer


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
    # Each kind of CPU has its own section (cpu@VENDOR-FAMILY-MODEL); "cpu", the records
    # made before kinds were told apart, is kept as it is.
    kind = runs.cpu_key(runs.host_cpu())
    path = tmp_path / "peers.json"
    path.write_text(json.dumps({"H100": {"train": {"x": 1}}, "cpu": {"rope": {"y": 2}},
                                kind: {"rope": {"y": 3}}}))
    out, mine = runs.device_section(path)
    assert capsys.readouterr().out.startswith("device: cpu (cpu) x ")
    runs.record(path, out, mine, "train", {"z": 3})
    written = json.loads(path.read_text())
    assert written["H100"] == {"train": {"x": 1}} and written["cpu"] == {"rope": {"y": 2}}
    assert written[kind]["rope"] == {"y": 3}
    assert written[kind]["train"]["z"] == 3 and len(written[kind]["train"]["date"]) == 10
    assert written[kind]["device"] == runs.device()
    # a section another run wrote after this one read the file stays (it was written over)
    path.write_text(json.dumps({**written, "TPU": {"train": {"w": 4}},
                                kind: {**written[kind], "vmap": {"v": 5}}}))
    runs.record(path, out, mine, "rope", {"y": 6})
    again = json.loads(path.read_text())
    assert again["TPU"] == {"train": {"w": 4}} and again[kind]["vmap"] == {"v": 5}
    assert again[kind]["rope"]["y"] == 6 and again[kind]["train"]["z"] == 3


def test_the_host_cpu_is_named_by_vendor_family_and_model(tmp_path):
    cpu = runs.host_cpu()
    assert cpu["name"]
    if Path("/proc/cpuinfo").exists():
        assert runs.cpu_key(cpu) == f"cpu@{cpu['vendor']}-{cpu['family']}-{cpu['model']}"
    assert runs.cpu_key({"name": "x"}) == "cpu@?-?-?"


def _script(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands() -> list[list[str]]:
    """Every `python benchmarks/bench_*.py ...` command of experiments/bench/commands.sh."""
    text = (ROOT / "experiments" / "bench" / "commands.sh").read_text().replace("\\\n", " ")
    return [shlex.split(line)[1:] for line in text.splitlines()
            if line.startswith("python benchmarks/bench_")]


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
    assert "from benchlib" in source
    assert {"repeats", "processes", "json"} <= set(vars(_script(path).parse_args([])))


# --- the vmap section: the main job's sweep with its seeds vmapped against seed by seed ---

LM = str(ROOT / "configs" / "lm.py")
ppls = st.dictionaries(st.sampled_from(["128", "256", "512"]), st.floats(1.0, 1e4),
                       min_size=1)


@given(st.dictionaries(st.sampled_from(["encoding=rope,seed=0", "encoding=t5,seed=1"]), ppls,
                       min_size=1), st.floats(0, 0.99))
def test_tables_agree_within_rtol_and_not_beyond_it(table, fraction):
    rtol = 1e-3
    reference = {name: {"ppl": row} for name, row in table.items()}
    within = {name: {"ppl": {k: v * (1 + fraction * rtol) for k, v in row.items()}}
              for name, row in table.items()}
    problems, largest = sweeps.disagreements(reference, within, rtol)
    assert problems == [] and largest <= rtol
    name, row = next(iter(table.items()))
    length = next(iter(row))
    beyond = {**within, name: {"ppl": {**row, length: row[length] * (1 + 2 * rtol)}}}
    problems, largest = sweeps.disagreements(reference, beyond, rtol)
    assert len(problems) == 1 and problems[0].startswith(f"{name}@{length}: ")
    assert largest == pytest.approx(2 * rtol)


def test_a_missing_or_nan_perplexity_is_a_disagreement():
    reference = {"a": {"ppl": {"128": 2.0, "256": 3.0}}}
    problems, _ = sweeps.disagreements(reference, {"a": {"ppl": {"128": float("nan")}}})
    assert problems[0].startswith("a@128: nan against 2") and problems[1] == (
        "a: no perplexity at 256")


def _repeats(seed_by_seed: list[float], vmapped: list[float]) -> list[dict]:
    """Alternated repeats of the two modes with these wall seconds."""
    return [{"mode": mode, "index": i, "wall_s": wall}
            for i, pair in enumerate(zip(seed_by_seed, vmapped, strict=True))
            for mode, wall in zip(sweeps.MODES, pair, strict=True)]


def test_summary_is_the_ratio_of_the_medians_with_the_repeats_range_and_the_verdict():
    s = sweeps.summary(_repeats([100.0, 120.0, 90.0], [50.0, 80.0, 60.0]), target=0.6)
    assert (s["seed_by_seed"]["median"], s["vmapped"]["median"]) == (100.0, 60.0)
    assert s["ratio"] == pytest.approx(0.6) and s["met"]
    assert (s["ratio_min"], s["ratio_max"]) == pytest.approx((0.5, 80 / 120))
    assert not sweeps.summary(_repeats([100.0], [61.0]), target=0.6)["met"]
    with pytest.raises(ConfigError, match="needs a repeat of each mode"):
        sweeps.summary(_repeats([100.0], [61.0])[:1], target=0.6)


def test_the_sweep_is_the_main_job_whole_or_one_command_per_encoding(tmp_path):
    every, whole = sweeps.points(LM, "study=main,seeds=3", list(MAIN_ENCODINGS))
    assert whole and len(every) == 7
    (cmd,) = sweeps.commands(LM, "study=main,seeds=3", every, whole, tmp_path, "vmapped")
    assert cmd[3:] == ["sweep", f"--config={LM}:study=main,seeds=3", f"--workdir={tmp_path}",
                       "--vmap_seeds"]
    some, whole = sweeps.points(LM, "study=main,seeds=3", ["rope", "t5"])
    assert not whole
    cmds = sweeps.commands(LM, "study=main,seeds=3", some, whole, tmp_path, "seed_by_seed")
    assert [c[6:] for c in cmds] == [["--only=encoding=rope,seed=*"],
                                     ["--only=encoding=t5,seed=*"]]
    (cmd,) = sweeps.commands(LM, "study=main,seeds=3", every, True, tmp_path, "vmapped", 2)
    assert cmd[6:] == ["--vmap_seeds", "--parallel=2"]  # run.sh's one run per core
    with pytest.raises(ConfigError, match="no point with 2 or more seeds for encoding=rope"):
        sweeps.points(LM, "study=main", ["rope"])


def test_run_results_read_each_runs_files(tmp_path):
    run = tmp_path / "runs" / "encoding=rope,seed=0"
    run.mkdir(parents=True)
    (tmp_path / "sweep.json").write_text(json.dumps(
        {"runs": {"encoding=rope,seed=0": {"status": "done", "seconds": 12.5}}}))
    phases = {"setup": 1.0, "first_steps": 3.0, "steps": 6.0, "score": 2.0}
    (run / "stages.json").write_text(json.dumps({"stages": [{"first_step_s": 3.0}],
                                                 "seconds": phases}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"tokens_per_sec": s}) + "\n"
                                               for s in (None, 100.0, 300.0, 200.0)))
    (run / "extrapolation.json").write_text(json.dumps(
        {"lengths": [{"length": 128, "ppl": 8.5, "seconds": 0.5}, {"length": 256, "ppl": 9.5}]}))
    (run / "config.json").write_text(json.dumps({"train": {"stages": [[128, 8, 600]]}}))
    assert sweeps.run_results(tmp_path) == {"encoding=rope,seed=0": dict(
        status="done", seconds=12.5, stages=[[128, 8, 600]], first_step_s=3.0,
        tokens_per_s=200.0,
        ppl={"128": 8.5, "256": 9.5}, phases=phases, score_s={"128": 0.5})}
    # A run that recorded no figure is left out of the figures, not counted as one.
    assert sweeps.per_run({"a": {"x": 1.0}, "b": {"x": None}, "c": {}}, "x") == [1.0]


def test_the_vmap_flags_and_their_quick_settings():
    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    args = bench_train.parse_args(["--sections=vmap"])
    assert (args.vmap_encodings.split(","), args.vmap_arg, args.vmap_rtol, args.repeats) == (
        list(MAIN_ENCODINGS), "study=main,seeds=3", sweeps.RTOL, 3)
    quick = bench_train.parse_args(["--sections=vmap", "--quick"])
    assert (quick.vmap_encodings, quick.repeats) == ("rope", 2)
    assert "smoke=true" in quick.vmap_arg and "seeds=3" in quick.vmap_arg


def test_a_label_that_cannot_run_is_refused_before_any_model_compiles(monkeypatch):
    """`--encodings=none,fire@flash_bias` compiled and warmed up none (minutes at real
    sizes, in every process) before it refused fire on the Pallas kernel."""
    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    args = bench_train.parse_args(["--encodings=none,rope,fire@flash_bias", "--size=smoke",
                                   "--seq_len=32", "--batch_size=2"])

    def compiled(self, batch):
        raise AssertionError("a model compiled before every label was checked")

    monkeypatch.setattr(bench_train.Trainee, "step", compiled)
    with pytest.raises(ConfigError, match="encoding 'fire' cannot run with "
                                          "attention='flash_bias'"):
        bench_train._warmed_up(args)


def test_a_kernel_interpreted_here_is_named_where_its_speed_is_shown(capsys):
    """t5@flash_bias on a CPU printed its tokens/s and ratio beside the others', and a run
    on it said only "on 1 x cpu", with no word that the Pallas kernel was interpreted."""
    from posjax import attention
    from posjax.train import trainer

    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    on_gpu = jax.devices()[0].platform == "gpu"
    assert attention.interpreted_here("flash_bias") is not on_gpu
    assert not attention.interpreted_here("chunked")
    bench_train._say_interpreted([{"encoding": "t5@flash_bias"}, {"encoding": "rope"}])
    config = load_config_module(str(ROOT / "configs" / "lm.py")).get_config(
        "smoke,encoding=t5,attention=flash_bias")
    said = f"t5@flash_bias: {attention.INTERPRETED}\n"
    assert capsys.readouterr().out == ("" if on_gpu else said)
    assert trainer.device_line(config).endswith(
        "" if on_gpu else f", attention flash_bias: {attention.INTERPRETED}")


def test_the_matmul_is_measured_at_sizes_the_platform_does_not_launch_bound(monkeypatch):
    """An accelerator's matmul needs large products (a 2048^2 one on an H200 measured the
    launch: 102 TFLOP/s); the CPU's are small. Given sizes win."""
    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    assert peaks.matmul_sizes("cpu") == (256, 512)
    assert peaks.matmul_sizes("gpu") == peaks.matmul_sizes("tpu") == (4096, 8192)
    for platform, sizes in (("cpu", "256,512"), ("gpu", "4096,8192")):
        monkeypatch.setattr(bench_train.jax, "default_backend", lambda p=platform: p)
        assert bench_train.parse_args([]).matmul_sizes == sizes
        assert bench_train.parse_args(["--matmul_sizes=1024"]).matmul_sizes == "1024"


# --- MFU by the datasheet, and the matmul this device reaches ---


@pytest.mark.parametrize("kind, dtype, peak, source", [
    ("NVIDIA H200", "bfloat16", 989e12, "H200"),
    ("NVIDIA H100 80GB HBM3", "bfloat16", 989e12, "H100"),
    ("NVIDIA H100 80GB HBM3", "float32", 67e12, "SXM"),
    ("NVIDIA H100 80GB HBM3", "tfloat32", 494.5e12, "SXM"),
    ("NVIDIA H200", "tfloat32", 494.5e12, "H200"),
    ("NVIDIA A100-SXM4-80GB", "tfloat32", 156e12, "A100"),
    ("NVIDIA H100 PCIe", "bfloat16", 756e12, "PCIe"),
    ("NVIDIA A100-SXM4-80GB", "bfloat16", 312e12, "A100"),
    ("NVIDIA A100-SXM4-40GB", "float32", 19.5e12, "A100"),
    ("NVIDIA L40S", "bfloat16", 362e12, "L40S"),
    ("NVIDIA L4", "bfloat16", 121e12, "L4"),
    ("TPU v4", "bfloat16", 275e12, "v4"),
    ("TPU v5 lite", "bfloat16", 197e12, "v5e"),
    ("TPU v5p", "bfloat16", 459e12, "v5p"),
    ("TPU v6 lite", "bfloat16", 918e12, "v6e"),
])
def test_the_datasheet_peak_of_each_known_device_kind(kind, dtype, peak, source):
    value, why = peaks.datasheet_peak(kind, dtype)
    assert value == peak and source in why


@pytest.mark.parametrize("kind, dtype, reason", [
    ("cpu", "float32", "no datasheet peak for device kind 'cpu'"),
    ("NVIDIA H100 NVL", "bfloat16", "no datasheet peak"),
    ("NVIDIA L40", "bfloat16", "no datasheet peak"),
    ("NVIDIA L4", "float32", "gives no float32 peak"),
])
def test_an_unknown_device_or_dtype_has_no_peak_and_says_why(kind, dtype, reason):
    value, why = peaks.datasheet_peak(kind, dtype)
    assert value is None and reason in why
    assert peaks.mfu(1e12, 1.0, value) is None


@pytest.mark.parametrize("dtype, platform, precision, runs_in", [
    ("float32", "gpu", None, "tfloat32"),          # JAX's default on an NVIDIA GPU: TF32
    ("float32", "gpu", "tensorfloat32", "tfloat32"),
    ("float32", "gpu", "highest", "float32"),
    ("float32", "tpu", None, "bfloat16"),          # one bfloat16 pass
    ("float32", "tpu", "float32", "float32"),
    ("bfloat16", "gpu", None, "bfloat16"),
    ("float32", "cpu", None, "float32"),
    ("float32", "tpu", "high", "float32 at precision high"),  # three passes: no datasheet
])
def test_mfus_peak_is_the_dtype_the_matmuls_run_in(dtype, platform, precision, runs_in):
    """A float32 run on an H100 was divided by the 67 TFLOP/s of float32 CUDA cores, where
    its matmuls ran on TF32 tensor cores (494.5 dense): an MFU seven times too high."""
    assert peaks.matmul_dtype(dtype, platform, precision) == runs_in
    assert (peaks.datasheet_peak("TPU v5p", runs_in)[0] is None) == (runs_in not in (
        "bfloat16",))


def test_model_flops_by_maxtext_halve_the_causal_attention_and_palm_does_not():
    """GPT-2 small's blocks at 1024 tokens, batch 64: 85,134,336 matmul weights."""
    flops = peaks.model_flops(85_134_336, num_layers=12, num_heads=12, head_dim=64,
                              batch=64, seq_len=1024)
    tokens = 64 * 1024
    per_token_palm = 6 * 85_134_336 + 12 * 12 * 12 * 64 * 1024  # 6N + 12 L H Dh T
    assert flops["palm_flops"] == per_token_palm * tokens
    assert flops["flops"] == flops["palm_flops"] - 6 * 12 * 12 * 64 * 1024 * tokens
    assert flops["flops"] == 37_187_034_808_320  # the H200 speed files' count
    assert peaks.mfu(flops["flops"], 0.1404, 989e12) == pytest.approx(0.2678, abs=1e-4)
    # a bidirectional model (an MLM encoder) attends over the whole square: PaLM's count
    assert peaks.model_flops(85_134_336, num_layers=12, num_heads=12, head_dim=64, batch=64,
                             seq_len=1024, causal=False)["flops"] == flops["palm_flops"]


def test_the_chained_matmul_times_a_positive_rate_per_size():
    out = peaks.achievable((32, 64), "float32", chain=3, chains=2)
    assert set(out["sizes"]) == {"32", "64"} and out["size"] in (32, 64)
    assert out["flops_per_s"] == max(s["flops_per_s"] for s in out["sizes"].values()) > 0
    assert out["flops_per_cpu_s"] > 0 and out["dtype"] == "float32"


def test_the_long_rows_record_memory_and_speed_or_the_failure():
    """A tiny model at two lengths: the compiled step's memory analysis and its tokens/s; an
    encoding that cannot be built (a kernel that cannot carry it) is a failed row, not an
    exception; steps 0 only compiles."""
    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    args = bench_train.parse_args(["--sections=long", "--size=smoke", "--packing=stream",
                                   "--encodings=rope,fire@flash_bias", "--long_shapes=64x2",
                                   "--steps=1", "--warmup=0"])
    rope, nope = bench_train.bench_long(args)["rows"]
    assert rope["status"] == "ok" and rope["tokens_per_s"] > 0
    memory = rope["memory"]
    assert memory["peak_bytes"] == (memory["temp_bytes"] + memory["argument_bytes"]
                                    + memory["output_bytes"]) > 0
    assert (nope["status"], nope["stage"]) == ("failed", "build") and "memory" not in nope
    only = bench_train.long_row("alibi", 128, 1, "smoke", "stream", steps=0, warmup=0)
    assert only["memory"]["temp_bytes"] > 0 and "tokens_per_s" not in only
    assert bench_train._failure(RuntimeError("RESOURCE_EXHAUSTED: Out of memory")) == "oom"


def _vmap_file(study: Path, seed_by_seed: list[float], vmapped: list[float], ppl: float):
    repeats = [dict(r, load_before={"1min": 1.0}, runs={
        "encoding=rope,seed=0": dict(ppl={"128": ppl if r["mode"] == "vmapped" else 8.0},
                                     first_step_s=2.0, tokens_per_s=900.0, seconds=30.0),
        "encoding=rope,seed=1": dict(ppl={"128": 9.0}, first_step_s=2.0, tokens_per_s=900.0,
                                     seconds=30.0)})
        for r in _repeats(seed_by_seed, vmapped)]
    (study / "vmap_seeds.json").write_text(json.dumps({"cpu": {"vmap": dict(
        repeats=repeats, rtol=1e-3, target=0.6, arg="study=main,seeds=3",
        device_line="device: cpu (cpu) x 1, 2 CPUs; jax")}}))


def test_the_vmap_table_is_generated_from_the_raw_file(tmp_path):
    values = _script(ROOT / "experiments" / "bench" / "values.py")
    assert values.vmap_table(tmp_path).startswith("(not measured yet: `python benchmarks/bench_")
    _vmap_file(tmp_path, [100.0, 120.0, 90.0], [50.0, 80.0, 60.0], 8.004)
    row = values.vmap_table(tmp_path).splitlines()[-1]
    assert row == ("| cpu (cpu) x 1, 2 CPUs | `study=main,seeds=3` | 3 of each, alternated "
                   "| 1.0 (1.0-1.0) "
                   "| 100 (90-120) | 60 (50-80) | 0.60 (0.50-0.67) | <= 0.6x: met "
                   "| yes, within 5.0e-04 (rtol 0.001) | at most 0.2% |")
    _vmap_file(tmp_path, [100.0], [70.0], 8.1)
    row = values.vmap_table(tmp_path).splitlines()[-1]
    assert row.endswith("| 0.70 (0.70-0.70) | <= 0.6x: **not met** "
                        "| **no**: 1 beyond rtol 0.001, up to 1.2e-02 | at most 5.0% |")
    assert values.vmap_runs_table(tmp_path).splitlines()[-1] == (
        "| cpu | vmapped | 2.0 (2.0-2.0) | 900 (900-900) | 30 (30-30) |")


def test_the_vmap_step_section_times_the_lone_and_the_vmapped_step_into_its_table(tmp_path):
    """A real run: the main job's model stepped alone and 2 seeds vmapped, 2 visits of 1 step;
    each visit keeps both modes' ms per step and cores busy, and the table reads the file."""
    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    values = _script(ROOT / "experiments" / "bench" / "values.py")
    assert values.vmap_step_table(tmp_path).startswith("(not measured yet")
    bench_train.bench_vmap_step(bench_train.parse_args([
        "--sections=vmap_step", "--vmap_step_encodings=none", "--vmap_seeds=2", "--steps=1",
        "--repeats=2", "--warmup=0", f"--vmap_json={tmp_path / 'vmap_seeds.json'}"]))
    kind = runs.cpu_key(runs.host_cpu())
    (row,) = json.loads((tmp_path / "vmap_seeds.json").read_text())[kind]["vmap_step"]["rows"]
    assert row["encoding"] == "none" and [v["index"] for v in row["visits"]] == [0, 1]
    for visit in row["visits"]:
        assert visit["lone"]["ms_per_step"] > 0 and visit["vmapped"]["cores_busy"] > 0
        assert visit["per_seed_ratio"] == pytest.approx(
            visit["vmapped"]["ms_per_step"] / 2 / visit["lone"]["ms_per_step"])
    table = values.vmap_step_table(tmp_path).splitlines()
    assert table[-1].startswith(f"| {kind} | none | 2 x 1 steps | ") and "| 2: " in table[-1]
    section = json.loads((tmp_path / "vmap_seeds.json").read_text())[kind]["vmap_step"]
    flops = section["flops_per_seed_step"]["flops"]
    assert section["main_job_flops"] == 7 * 2 * 600 * flops  # 7 encodings, 2 seeds, 600 steps
    got = values._vmap_step_values(tmp_path)
    prefix = "vmap_step@" + kind.removeprefix("cpu@")
    rates = [v["matmul"]["flops_per_s"] for v in row["visits"]]
    assert got[f"{prefix}:main_job_floor_min"] == pytest.approx(
        section["main_job_flops"] / statistics.median(rates) / 60)
    assert got[f"{prefix}:ten_minutes_of_achievable"] == pytest.approx(
        got[f"{prefix}:main_job_floor_min"] / 10)
    lone = [flops / (v["lone"]["ms_per_step"] / 1e3) / v["matmul"]["flops_per_s"]
            for v in row["visits"]]
    assert got[f"{prefix}:none:lone:of_achievable"] == pytest.approx(statistics.median(lone))
    share = [got[f"{prefix}:none:vmapped:of_achievable{end}"] for end in ("", ":lo", ":hi")]
    assert table[-1].endswith(" | {:.2f} ({:.2f}-{:.2f}) |".format(*share))


def test_a_step_variant_process_steps_its_ways_programs(tmp_path):
    """A real run of one process of the projections section: posjax's product compiles to a
    program with fewer copies and transposes than flax's, and the process steps its way's
    lone and vmapped programs in alternated visits."""
    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    layout_ops = {}
    for way in ("general", "matrix"):
        with bench_train.step_variant(f"projections:{way}"):
            model = Trainee("none", 128, 16, size="main")
            text = model.compiled_text(model.first_batches())
        layout_ops[way] = sum(text.count(f" {op}(") for op in ("copy", "transpose"))
    assert layout_ops["matrix"] < layout_ops["general"]  # fewer layout changes
    result = bench_train.bench_step_variant(bench_train.parse_args([
        "--sections=step_variant", "--step_variant=projections:general", "--vmap_seeds=2",
        "--vmap_step_encodings=none", "--steps=1", "--repeats=2", "--warmup=0"]))
    assert result["variant"] == "general"
    (row,) = result["rows"]
    assert row["encoding"] == "none" and len(row["visits"]) == 2
    assert all(v[mode]["ms_per_step"] > 0 for v in row["visits"] for mode in ("lone", "vmapped"))


def test_the_correctness_ways_trace_their_own_function():
    """Inside the argmax way, the step's correctness is jnp.argmax's (its program has
    argmax's two-operand reduction); posjax's own way has none, and both count the same
    tokens correct."""
    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(4, 9, 30)), jnp.float32)
    targets = jnp.asarray(np.random.default_rng(1).integers(0, 30, size=(4, 9)), jnp.int32)
    texts, correct = {}, {}
    for way in ("compare", "argmax"):
        with bench_train.step_variant(f"correctness:{way}"):
            fn = jax.jit(lambda lg, t: train_steps.token_losses(lg, t)[1])
            texts[way] = fn.lower(logits, targets).as_text()
            correct[way] = fn(logits, targets)
    two_operand = re.compile(r"stablehlo\.reduce\(%\w+ init: %\w+\), \(%\w+ init")
    assert two_operand.search(texts["argmax"]) and not two_operand.search(texts["compare"])
    np.testing.assert_array_equal(correct["compare"], correct["argmax"])
    result = bench_train.bench_step_variant(bench_train.parse_args([
        "--sections=step_variant", "--step_variant=correctness:compare", "--vmap_seeds=2",
        "--vmap_step_encodings=none", "--steps=1", "--repeats=1", "--warmup=0"]))
    alone = result["rows"][-1]  # the function alone on the steps' logits
    assert alone["encoding"] == "alone" and alone["visits"][0]["vmapped"]["ms_per_step"] > 0


def test_the_activation_ways_keep_what_their_gelu_keeps(capsys):
    """Inside the saved way an MLP's backward pass keeps gelu's intermediate arrays, inside
    posjax's own way only its input; both compute the same layer output."""
    from flax import nnx
    from jax.ad_checkpoint import print_saved_residuals

    from posjax.models.layers import GeluMLP, ModelConfig

    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 8)), jnp.float32)
    kept, out = {}, {}
    for way in ("recomputed", "saved"):
        with bench_train.step_variant(f"activation:{way}"):
            mlp = GeluMLP(ModelConfig(d_model=8, mlp_dim=16, dtype="float32"), rngs=nnx.Rngs(0))
            out[way] = mlp(x)
            print_saved_residuals(lambda x, mlp=mlp: jnp.sum(mlp(x)), x)
        kept[way] = sum("[2,3,16]" in line for line in capsys.readouterr().out.splitlines())
    assert kept["recomputed"] == 1 and kept["saved"] > 1
    np.testing.assert_allclose(out["recomputed"], out["saved"], rtol=1e-6, atol=1e-6)


def test_the_step_variant_sections_alternate_the_ways_in_fresh_processes(tmp_path,
                                                                         monkeypatch):
    """Each process gets one way, the ways alternate over the rounds, posjax's first, and the
    ratio of a round is its posjax process's median over the other way's; the table says
    the rows the step trained."""
    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    values = _script(ROOT / "experiments" / "bench" / "values.py")
    assert values.step_variant_table(tmp_path, "correctness").startswith("(not measured yet")
    ms = {"argmax": [100.0, 110.0], "compare": [90.0, 88.0]}  # lone; vmapped is 3x
    calls = []

    def process(args, section):
        way = args.step_variant.partition(":")[2]
        calls.append((section, args.step_variant, args.main_batch))
        lone = ms[way][len(calls) > 2]
        visit = {"lone": {"ms_per_step": lone}, "vmapped": {"ms_per_step": 3 * lone}}
        return {"variant": way, "rows": [{"encoding": "rope", "visits": [visit, visit]}]}

    monkeypatch.setattr(bench_train, "run_section", process)
    bench_train.OWN_FILE_SECTIONS["correctness"](bench_train.parse_args([
        "--sections=correctness", "--processes=2", "--repeats=2",
        f"--vmap_json={tmp_path / 'vmap_seeds.json'}"]))
    assert calls == [("step_variant", f"correctness:{way}", 8)
                     for way in ["compare", "argmax"] * 2]
    kind = runs.cpu_key(runs.host_cpu())
    got = values._step_variant_values(tmp_path)
    prefix = "correctness@" + kind.removeprefix("cpu@")
    assert got[f"{prefix}:rounds"] == 2 and got[f"{prefix}:rows"] == 8
    assert [got[f"{prefix}:rope:vmapped:ratio{end}"] for end in ("", ":lo", ":hi")] == \
        pytest.approx([(0.9 + 0.8) / 2, 0.8, 0.9])
    assert got[f"{prefix}:rope:lone:argmax_ms"] == 105.0
    table = values.step_variant_table(tmp_path, "correctness").splitlines()
    assert "| jnp.argmax, ms/step | first class at the max, ms/step |" in table[0]
    assert table[-2].split(" | ")[2:6] == ["8", "rope", "lone step", "2 x 2"]
    assert table[-1].endswith("| 0.85x (0.80x-0.90x) |")


def test_the_cpu_flags_section_runs_each_setting_in_its_own_pinned_process(tmp_path,
                                                                             monkeypatch):
    """Each setting's process gets its XLA_FLAGS and core (POSJAX_CPUS) and none of this
    process's; the rounds alternate the settings; the table and values read the record."""
    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    values = _script(ROOT / "experiments" / "bench" / "values.py")
    cpu = {"name": "Some CPU", "vendor": "GenuineIntel", "family": "6", "model": "207"}
    monkeypatch.setattr(bench_train, "fresh_device", lambda: (
        {"platform": "cpu", "cpu": cpu}, "device: cpu (cpu) x 1, 2 CPUs (Some CPU, "
                                         "cpu@GenuineIntel-6-207); jax 0; load {}"))
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    monkeypatch.setenv("POSJAX_CPUS", "1")
    calls = []

    def fake_section(args, section, env, quiet):
        calls.append((args, section, env))
        ms = 100.0 if "XLA_FLAGS" not in env else 90.0  # every flag 10 % faster
        ms /= 2 if "POSJAX_CPUS" not in env else 1
        visits = [dict(step_s=ms / 1e3 * f, cpu_s=0.1, page_faults=1.0) for f in (0.9, 1, 1.1)]
        return dict(rows=[dict(encoding="none"), dict(
            encoding="rope", step_s=ms / 1e3, cpu_s=0.1, page_faults=1.0, mfu=None,
            of_achievable=0.3, visits=visits)], achievable={"flops_per_s": 1e11})

    monkeypatch.setattr(bench_train, "run_section", fake_section)
    out = tmp_path / "vmap_seeds.json"
    bench_train.bench_cpu_flags(bench_train.parse_args([
        "--sections=cpu_flags", "--processes=1", f"--vmap_json={out}"]))
    settings = ["default_all", "default_1", *bench_train.CPU_FLAGS]
    assert len(calls) == 2 * len(settings)  # at least 2 rounds
    core = str(min(os.sched_getaffinity(0)))
    for (args, section, env), name in zip(calls, settings * 2, strict=True):
        assert section == "speed" and (args.size, args.seq_len, args.batch_size) == (
            "main", 128, 16) and args.encodings == "rope"
        assert env.get("POSJAX_CPUS") == (None if name == "default_all" else core)
        assert env.get("XLA_FLAGS") == (bench_train.CPU_FLAGS[name][1]
                                        if name in bench_train.CPU_FLAGS else None)
    section = json.loads(out.read_text())["cpu@GenuineIntel-6-207"]["cpu_flags"]
    assert [r["setting"] for r in section["rows"]] == settings * 2
    got = values._cpu_flags_values(tmp_path)
    assert got["cpu_flags@GenuineIntel-6-207:default_1:step_ms"] == pytest.approx(100)
    assert got["cpu_flags@GenuineIntel-6-207:xnnpack:over_default"] == pytest.approx(0.9)
    assert got["cpu_flags@GenuineIntel-6-207:default_all:over_default"] == pytest.approx(0.5)
    assert got["cpu_flags@GenuineIntel-6-207:visits"] == 6
    assert got["cpu_flags@GenuineIntel-6-207:one_per_core_gain"] == pytest.approx(
        section["cores"] * 50 / 100)
    table = values.cpu_flags_table(tmp_path).splitlines()
    assert table[2] == (f"| GenuineIntel-6-207 | XLA's defaults, {section['cores']} cores | 6 "
                        "| 50 (45-55) | 0.100 (0.100-0.100) | 0.50 |")
    assert table[4] == ("| GenuineIntel-6-207 | oneDNN (`--xla_cpu_use_onednn=true`), 1 core "
                        "| 6 | 90 (81-99) | 0.100 (0.100-0.100) | 0.90 |")


def test_the_bench_pins_itself_to_the_cores_posjax_cpus_names():
    """The cpu_flags section's one-core settings rely on it, as a sweep's runs do."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_train.py")],
                          env={**os.environ, "POSJAX_CPUS": "99999"}, capture_output=True,
                          text=True)
    assert done.returncode != 0 and "POSJAX_CPUS=99999 names no cores" in done.stderr


def test_the_main_job_section_refuses_a_directory_that_holds_a_run(tmp_path):
    """It times a fresh run.sh: a directory with a sweep would be resumed, not timed."""
    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    (tmp_path / "sweep.json").write_text("{}")
    args = bench_train.parse_args(["--sections=main_job", f"--main_job_dir={tmp_path}",
                                   f"--vmap_json={tmp_path / 'out.json'}"])
    with pytest.raises(SystemExit, match="already holds a run; .* give --main_job_dir a new"):
        bench_train.bench_main_job(args)
    assert not (tmp_path / "out.json").exists()


def test_the_main_job_section_hands_run_sh_its_settings_and_records_them(tmp_path,
                                                                         monkeypatch):
    """PARALLEL, SEEDS, STEPS, BATCH and SEED_STEPS reach run.sh's environment and the
    repeat's record, with the commit timed and the budget its runs trained; without
    --main_job_steps, --main_job_batch and --main_job_seed_steps run.sh gets no STEPS, BATCH
    or SEED_STEPS, not even ones exported in the shell."""
    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    cpu = {"name": "Some CPU", "vendor": "GenuineIntel", "family": "6", "model": "207"}
    monkeypatch.setattr(bench_train, "fresh_device", lambda: (
        {"platform": "cpu", "cpu": cpu}, "device: cpu (cpu) x 1, 2 CPUs (Some CPU, "
                                         "cpu@GenuineIntel-6-207); jax 0; load {}"))
    trained = {"a": [[128, 4, 1000]], "b": [[128, 8, 600]]}  # what each run's configs say
    monkeypatch.setattr(bench_train.sweeps, "run_results", lambda out_dir: {
        f"encoding={e}": {"stages": trained[out_dir.name]} for e in ("rope", "t5")})
    envs, real_run = [], subprocess.run
    commit = bench_train.provenance.code_version()["git_commit"]

    def fake_run(command, *args, **kwargs):
        if command[0] == "git":  # the commit recorded
            return real_run(command, *args, **kwargs)
        envs.append(kwargs["env"])
        out_dir = Path(command[-1])
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in ("rope_decay.json", "sweep.json", "extrapolation.png"):
            (out_dir / name).write_text("{}")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(bench_train.subprocess, "run", fake_run)
    monkeypatch.setenv("STEPS", "7")
    monkeypatch.setenv("BATCH", "3")
    monkeypatch.setenv("SEED_STEPS", "in_turn")
    out = tmp_path / "vmap_seeds.json"
    for name, extra in (("a", ["--main_job_steps=1000", "--main_job_batch=4",
                               "--main_job_seed_steps=in_turn"]), ("b", [])):
        bench_train.bench_main_job(bench_train.parse_args([
            "--sections=main_job", f"--main_job_dir={tmp_path / name}",
            "--main_job_parallel=2", f"--vmap_json={out}", *extra]))
    assert [envs[0][k] for k in ("PARALLEL", "SEEDS", "STEPS", "BATCH", "SEED_STEPS")] == [
        "2", "3", "1000", "4", "in_turn"]
    assert not {"STEPS", "BATCH", "SEED_STEPS"} & set(envs[1])
    repeats = json.loads(out.read_text())["cpu@GenuineIntel-6-207"]["main_job"]["repeats"]
    assert [(r["steps"], r["batch_size"], r["seed_steps"], r["command"]) for r in repeats] == [
        (1000, 4, "in_turn", "PARALLEL=2 SEEDS=3 STEPS=1000 BATCH=4 SEED_STEPS=in_turn bash "
                             f"scripts/run.sh {tmp_path / 'a'}"),
        (600, 8, "vmap", f"PARALLEL=2 SEEDS=3 bash scripts/run.sh {tmp_path / 'b'}")]
    # each repeat names the code it timed
    assert [r["git_commit"] for r in repeats] == [commit, commit]


def test_the_budget_is_the_one_every_run_trained():
    runs = {"a": {"stages": [[128, 8, 600]]}, "b": {"stages": [[128, 8, 600]]}}
    assert sweeps.budget(runs) == (600, 8)
    for odd in ([[128, 16, 600]], [[128, 8, 300], [128, 8, 300]], None):
        with pytest.raises(ConfigError, match="do not share one stage's steps and batch"):
            sweeps.budget({**runs, "c": {"stages": odd}})


def test_table_shift_is_the_largest_mean_move_over_the_seeds_range():
    reference = {f"encoding=rope,seed={k}": {"ppl": {"128": v}} for k, v in enumerate((8, 9, 10))}
    moved = {f"encoding=rope,seed={k}": {"ppl": {"128": v}} for k, v in enumerate((8, 9, 10.5))}
    assert sweeps.table_shift(reference, reference) == 0.0
    assert sweeps.table_shift(reference, moved) == pytest.approx(0.5 / 3 / 2)
    del moved["encoding=rope,seed=2"]
    assert sweeps.table_shift(reference, moved) == float("inf")


def test_the_main_job_table_keeps_each_kind_of_cpu_and_parallel_setting(tmp_path):
    """The record from before kinds were told apart is one repeat at PARALLEL=1; a kind's
    repeats are grouped by PARALLEL, each group its median (min-max)."""
    values = _script(ROOT / "experiments" / "bench" / "values.py")
    assert values.main_job_table(tmp_path).startswith("(not measured yet")

    def timed(wall_s, parallel=None, **settings):
        job = {"wall_s": wall_s, "load_before": {"1min": 0.5}, "runs": {}, **settings,
               "started_at": "2026-11-27 15:42:43",
               "device_line": "device: cpu (cpu) x 1, 2 CPUs (Intel(R) Xeon(R) Processor, "
                              "cpu@GenuineIntel-6-207); jax 0.10.2; load {}"}
        return job if parallel is None else {**job, "parallel": parallel}

    (tmp_path / "vmap_seeds.json").write_text(json.dumps({
        "cpu": {"main_job": timed(696.0)},
        "cpu@GenuineIntel-6-207": {"main_job": {"repeats": [
            timed(1440.0, 1), timed(1200.0, 2), timed(1080.0, 2), timed(1320.0, 2),
            timed(510.0, 2, seeds=3, steps=250), timed(480.0, 2, steps=1000, batch_size=4),
            timed(540.0, 2, seed_steps="in_turn")]}}}))
    table = values.main_job_table(tmp_path).splitlines()
    assert table[2] == ("| not recorded (before CPU kinds were told apart) | 1 | 3 | 600 | 16 "
                        "| vmap | 1 | 11.6 | 0.50 | 2026-11-27 |")  # one repeat: no range
    assert table[3].startswith("| Intel(R) Xeon(R) Processor, cpu@GenuineIntel-6-207 | 1 | 3 "
                               "| 600 | 16 | vmap | 1 ")
    # A run of fewer steps (run.sh's STEPS) is a setting of its own, before the study's.
    assert table[4].endswith("| 2 | 3 | 250 | 16 | vmap | 1 | 8.5 | 0.50 | 2026-11-27 |")
    # So is a run whose seeds stepped in turn (run.sh's SEED_STEPS), after the vmapped.
    assert table[5].endswith("| 2 | 3 | 600 | 16 | in_turn | 1 | 9.0 | 0.50 | 2026-11-27 |")
    assert table[6].endswith("| 2 | 3 | 600 | 16 | vmap | 3 | 20.0 (18.0-22.0) "
                             "| 0.50 (0.50-0.50) | 2026-11-27 |")
    # So is a run of other rows per batch (run.sh's BATCH).
    assert table[7].endswith("| 2 | 3 | 1000 | 4 | vmap | 1 | 8.0 | 0.50 | 2026-11-27 |")
    got = {**values._vmap_values(tmp_path), **values._main_job_values(tmp_path)}
    assert got["main_job:wall_min"] == pytest.approx(11.6)
    assert got["main_job@GenuineIntel-6-207:parallel2:seeds3:wall_min"] == pytest.approx(20.0)
    assert got["main_job@GenuineIntel-6-207:parallel2:seeds3:in_turn:wall_min"] == (
        pytest.approx(9.0))
    assert got["main_job@GenuineIntel-6-207:parallel2:seeds3:repeats"] == 3
    assert got["main_job@GenuineIntel-6-207:parallel2:seeds3:steps250:wall_min"] == (
        pytest.approx(8.5))
    assert got["main_job@GenuineIntel-6-207:parallel2:seeds3:steps1000:batch4:wall_min"] == (
        pytest.approx(8.0))
    assert got["main_job@GenuineIntel-6-207:seeds3:parallel2_gain"] == pytest.approx(24 / 20)
    # A vmapped program's phases are shared by its seeds; each seed scores on its own.
    shared = {"setup": 5.0, "steps": 90.0}
    repeat = {"runs": {"encoding=none,seed=0": {"phases": {**shared, "score": 2.0}},
                       "encoding=none,seed=1": {"phases": {**shared, "score": 3.0}}}}
    assert values._phase_seconds(repeat) == {"setup": 5.0, "steps": 90.0, "score": 5.0}


def test_the_main_job_phases_come_from_when_run_sh_wrote_its_files(tmp_path):
    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    for name, mtime in (("rope_decay.json", 110.0), ("sweep.json", 700.0),
                        ("extrapolation.png", 712.5)):
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (mtime, mtime))
    assert bench_train.main_job_phases(tmp_path, 100.0) == {
        "install_and_decay": 10.0, "sweep": 590.0, "plot": 12.5}


def test_a_trace_folder_that_is_not_there_is_one_line(capsys):
    """--parse_trace of a missing folder was a FileNotFoundError traceback."""
    profile = _script(ROOT / "benchmarks" / "bench_profile.py")
    assert profile.main(["--parse_trace", "/no/such/trace"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "bench_profile.py: error: --parse_trace=/no/such/trace is no folder: give a case's "
        "folder that --trace_dir kept"]


def test_attention_lines_give_each_ratio_its_range_and_no_target_to_the_baseline(capsys):
    """The lines printed median times beside the median of the rounds' ratios, which the
    times did not divide into, and gave plain attention a target of its own; a target's
    line never said whether the median met it."""
    attention = _script(ROOT / "benchmarks" / "bench_attention.py")
    args = attention.parse_args(["--lengths=64", "--repeats=2", "--encodings=none,alibi"])
    rows = attention.bench_overhead(args)
    lines = capsys.readouterr().out.splitlines()
    assert [row["encoding"] for row in rows] == ["none", "alibi"]
    alibi = rows[1]
    assert (f"({alibi['fwd_ratio']:5.2f}x, {alibi['fwd_ratio_min']:.2f}-"
            f"{alibi['fwd_ratio_max']:.2f})") in lines[1]
    met = max(alibi["fwd_ratio"], alibi["fwd_bwd_ratio"]) <= 1.3
    assert lines[1].endswith(f"target <= 1.3x: {'met' if met else 'NOT met'}")
    assert "target" not in lines[0]
    assert lines[-1] == ("ratios: the median (min-max) over rounds of each round's time over "
                         "plain attention's in that round")


def test_a_benchmark_imports_the_posjax_of_its_own_checkout(tmp_path):
    """A second checkout's benchmarks time that checkout's posjax, in the script and in the
    processes it starts, not the one the editable install of another checkout points to; a
    process that imported posjax first (`posjax report` on a study's values.py) keeps it."""
    import shutil
    ignore = shutil.ignore_patterns("__pycache__")
    for folder in ("benchmarks", "posjax"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=ignore)
    child = ("subprocess.run([sys.executable, '-c', 'import posjax; print(posjax.__file__)'],"
             " capture_output=True, text=True, cwd='/').stdout.strip()")

    def imported(first: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", f"import subprocess, sys; {first}; print(posjax.__file__); "
             f"print({child})"], capture_output=True, text=True, cwd=tmp_path / "benchmarks",
            env={**os.environ, "PYTHONPATH": ""})
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    here = str((tmp_path / "posjax" / "__init__.py").resolve())
    assert imported("import benchlib, posjax") == [here, here]
    installed = str(ROOT / "posjax" / "__init__.py")
    assert imported("import posjax, benchlib") == [installed, installed]


def test_a_value_posjax_refuses_is_one_line_naming_the_script(capsys, monkeypatch):
    """`bench_train.py --size bogus` and the like ended in a ConfigError traceback, rc 1."""
    from benchlib.flags import run_script

    def refused():
        raise ConfigError("unknown size 'bogus'; valid: base, main, smoke")

    monkeypatch.setattr(sys, "argv", ["benchmarks/bench_train.py", "--size", "bogus"])
    with pytest.raises(SystemExit) as exited:
        run_script(refused)
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "bench_train.py: error: unknown size 'bogus'; valid: base, main, smoke\n")
    with pytest.raises(SystemExit) as exited:
        run_script(lambda: None)
    assert exited.value.code == 0


def test_a_benchmark_stopped_by_ctrl_c_is_one_line(capsys, monkeypatch):
    """Ctrl-C printed a KeyboardInterrupt traceback through jax's compile."""
    from benchlib.flags import run_script

    def stopped():
        raise KeyboardInterrupt

    monkeypatch.setattr(sys, "argv", ["benchmarks/bench_attention.py", "--quick"])
    with pytest.raises(SystemExit) as exited:
        run_script(stopped)
    assert exited.value.code == 130
    assert capsys.readouterr().err == (
        "bench_attention.py: interrupted: every file it wrote is whole (a section in flight "
        "writes nothing); re-run the same command to measure\n")


def test_a_section_written_meanwhile_by_another_run_into_the_json_is_kept(tmp_path,
                                                                           monkeypatch):
    """bench_train read its --json once at the start and wrote it back after each section:
    a section another run wrote meanwhile was lost."""
    import argparse

    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    out = tmp_path / "train.json"

    def section(args):  # while it measures, another run writes its own section
        fileio.write_json(out, {**fileio.read_json(out, {}), "long": {"theirs": 1}})
        return {"mine": 1}

    monkeypatch.setattr(bench_train, "SECTIONS", {"speed": section})
    bench_train.measure_here(argparse.Namespace(json=str(out), processes=1), ["speed"])
    payload = fileio.read_json(out)
    assert payload["long"] == {"theirs": 1} and payload["speed"]["mine"] == 1


def test_mfu_is_each_devices_share_of_the_flops_over_one_devices_peak(monkeypatch):
    """On a host of 4 devices the step's FLOPs (all 4 shards') went over one device's peak
    and one device's matmul: MFU and "of the achievable" read 4x too high."""
    import types

    import jax.numpy as jnp

    bench_train = _script(ROOT / "benchmarks" / "bench_train.py")
    model = types.SimpleNamespace(experiment=types.SimpleNamespace(
        model_config=types.SimpleNamespace(compute_dtype=jnp.bfloat16)), num_params=lambda: 1)
    step = types.SimpleNamespace(wall=0.5, cpu=0.5, faults=0)
    matmul = dict(flops_per_s=1e14, flops_per_cpu_s=1e14, dtype="bfloat16", size=4096,
                  method="chained")
    monkeypatch.setattr(bench_train, "_warmed_up", lambda args: (["none"], {"none": model},
                                                                 None, {}))
    monkeypatch.setattr(bench_train, "_timed", lambda *args: ({"none": [step] * 2}, [matmul]))
    monkeypatch.setattr(bench_train, "model_flops", lambda m: dict(
        flops=4e13, palm_flops=8e13, formula="f", matmul_params=1))
    monkeypatch.setattr(bench_train, "_model_summary", lambda m: {})
    monkeypatch.setattr(bench_train.peaks, "datasheet_peak", lambda kind, dtype: (1e15, "sheet"))
    monkeypatch.setattr(bench_train.jax, "device_count", lambda: 4)
    args = bench_train.parse_args(["--sections=speed", "--steps=2", "--repeats=1"])
    result = bench_train.bench_speed(args)
    (row,) = result["rows"]
    # 4e13 FLOPs on 4 devices in 0.5 s: 2e13 FLOP/s each, 2% of 1e15 and 20% of 1e14
    assert row["mfu"] == pytest.approx(0.02) and row["of_achievable"] == pytest.approx(0.2)
    assert result["peak"]["devices"] == 4 and result["flops"]["flops"] == 4e13


def test_the_gpu_checks_figures_are_per_visit_mfu_and_ratios_to_ropes_same_visit():
    """gpu_figures: MFU is the recorded model FLOPs over each visit's step over the peak;
    a ratio to RoPE pairs each visit with RoPE's same visit; the long stage's label that
    names its kernel is compared with RoPE at its length."""
    section = {"flops": {"flops": 6e12, "dense_flops": 5e12, "attention_flops_full": 2e12},
               "rows": [{"encoding": "rope", "visits": [
                            {"step_s": 0.1, "tokens_per_s": 1000.0},
                            {"step_s": 0.2, "tokens_per_s": 500.0}]},
                        {"encoding": "t5", "visits": [
                            {"step_s": 0.2, "tokens_per_s": 500.0},
                            {"step_s": 0.2, "tokens_per_s": 500.0}]}]}
    figures = gpu_figures.speed_figures(section, peak=1e14)
    assert figures["rope"]["mfu"] == pytest.approx([0.6, 0.3])
    assert figures["rope"]["mfu_palm"] == pytest.approx([0.7, 0.35])
    assert figures["t5"]["over_rope"] == [0.5, 1.0] and figures["t5"]["step_ms"] == [200, 200]
    long = {"rows": [
        {"encoding": name, "seq_len": 4096, "batch_size": 8, "tokens_per_s": tokens,
         "step_s_all": [0.1, 0.2], "memory": {"peak_bytes": gib * 2**30}}
        for name, tokens, gib in (("rope", 400e3, 10), ("t5", 100e3, 11), ("t5@fused", 200e3, 22))]}
    rows = gpu_figures.long_figures(long)
    assert rows[("t5@fused", 4096)]["over_rope"] == 0.5 and rows[("t5", 4096)]["tokens_k"] == 100
    assert rows[("t5@fused", 4096)]["memory_gib"] == 22
    assert rows[("rope", 4096)]["step_ms"] == [100, 200]
