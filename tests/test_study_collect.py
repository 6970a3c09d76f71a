"""experiments/rope_extension/collect.py: a study's results/ is replaced whole, from seeds
that all hold the same methods, and the files written are named."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COLLECT = ROOT / "experiments" / "rope_extension" / "collect.py"
FINETUNE_COLLECT = ROOT / "experiments" / "roformer_finetune" / "collect.py"


def _script(script: Path, *args) -> subprocess.CompletedProcess:
    """A study's script run as its commands.sh runs it, from the checkout's root."""
    return subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT)


def _collect(*args) -> subprocess.CompletedProcess:
    return _script(COLLECT, *args)


def _sweep(tmp_path: Path, seeds) -> Path:
    sweep = tmp_path / "ext"
    runs = {f"encoding=rope,seed={k}": {"status": "done"} for k in seeds}
    for name in runs:
        (sweep / "runs" / name).mkdir(parents=True)
        for kept in ("config.json", "stages.json"):
            (sweep / "runs" / name / kept).write_text(json.dumps({"name": name}))
    (sweep / "sweep.json").write_text(json.dumps({"config": "lm.py", "arg": "", "runs": runs}))
    return sweep


def _evaluated(tmp_path: Path, methods: dict[int, list[str]]) -> Path:
    evaldir = tmp_path / "eval"
    for seed, names in methods.items():
        (evaldir / f"seed={seed}").mkdir(parents=True)
        for method in names:
            (evaldir / f"seed={seed}" / f"{method}.json").write_text(json.dumps({"m": method}))
    return evaldir


def test_a_collection_replaces_the_results_whole_and_names_each_file(tmp_path):
    """Collecting one seed over a folder of three kept the other two, stale, beside it, and
    printed nothing."""
    sweep, dest = _sweep(tmp_path, [0, 1, 2]), tmp_path / "study"
    done = _collect(sweep, _evaluated(tmp_path, {0: ["none", "yarn"], 1: ["none", "yarn"],
                                                 2: ["none", "yarn"]}), dest)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 3 * 4 + 1
    again = _collect(sweep, _evaluated(tmp_path / "one", {0: ["none"]}), dest)
    assert again.returncode == 0, again.stderr
    results = dest / "results"
    assert sorted(p.name for p in results.iterdir()) == ["encoding=rope,seed=0", "sweep.json"]
    assert sorted(p.name for p in (results / "encoding=rope,seed=0").iterdir()) == [
        "config.json", "extrapolation_none.json", "stages.json"]
    assert list(json.loads((results / "sweep.json").read_text())["runs"]) == [
        "encoding=rope,seed=0"]
    assert not (dest / "results.new").exists()


def test_seeds_of_other_methods_are_refused_before_anything_is_written(tmp_path):
    sweep, dest = _sweep(tmp_path, [0, 1]), tmp_path / "study"
    done = _collect(sweep, _evaluated(tmp_path, {0: ["none", "yarn"], 1: ["none"]}), dest)
    assert done.returncode == 2
    assert done.stderr == ("collect.py: error: seed=1 and seed=0 hold other methods (yarn in "
                           "one only): evaluate every seed with every method (commands.sh), "
                           "then collect again\n")
    assert not dest.exists()
    empty = _collect(sweep, tmp_path / "nothing", dest)
    assert (empty.returncode, empty.stderr.count("\n")) == (2, 1)
    assert empty.stderr.startswith(
        f"collect.py: error: {tmp_path / 'nothing'} has no seed=K folder")


def test_a_run_not_finished_is_refused_in_one_line_before_anything_is_written(tmp_path):
    """A seed whose run had no stages.json yet: a FileNotFoundError traceback, exit 1, after
    the seeds before it were copied into results.new."""
    sweep, dest = _sweep(tmp_path, [0, 1]), tmp_path / "study"
    (sweep / "runs" / "encoding=rope,seed=1" / "stages.json").unlink()
    done = _collect(sweep, _evaluated(tmp_path, {0: ["none"], 1: ["none"]}), dest)
    assert done.returncode == 2
    assert done.stderr == (f"collect.py: error: {sweep / 'runs' / 'encoding=rope,seed=1'} has "
                           "no stages.json: give the sweep whose runs were evaluated, once "
                           "they finished\n")
    assert not dest.exists()


def test_the_finetune_collect_given_no_sweep_is_one_line_writing_nothing(tmp_path):
    """experiments/roformer_finetune/collect.py with an empty RUNS_ROOT: a ConfigError
    traceback whose message began with a blank name."""
    done = _script(FINETUNE_COLLECT, tmp_path / "none", tmp_path / "dest")
    assert done.returncode == 2
    assert done.stderr == (f"collect.py: error: {tmp_path / 'none'} holds no fine-tune sweep "
                           "(ft_NAME/ with its sweep.json): give the RUNS_ROOT of the study's "
                           "commands.sh\n")
    assert not (tmp_path / "dest").exists()


def test_the_t5_table_stats_given_no_sweep_is_one_line(tmp_path):
    """experiments/t5_conventions/table_stats.py on a missing folder: a FileNotFoundError
    traceback."""
    done = _script(ROOT / "experiments" / "t5_conventions" / "table_stats.py",
                   tmp_path / "none", tmp_path / "out.json")
    assert done.returncode == 2
    assert done.stderr == (f"table_stats.py: error: {tmp_path / 'none' / 'runs'} holds no runs: "
                           "give the folder of a sweep of T5 runs "
                           "(experiments/t5_conventions/commands.sh)\n")
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("damage, message", [
    ("no_runs", "has no runs/ folder: re-run its sweep (commands.sh)"),
    ("bad_json", "sweep.json is not valid JSON"),
    ("dest_file", "is a file: give the study's folder"),
])
def test_the_finetune_collect_refuses_bad_input_before_writing(tmp_path, damage, message):
    """Each was a traceback (exit 1); the damaged sweep.json was first copied over the
    study's own."""
    sweep = tmp_path / "root" / "ft_rope"
    (sweep / "runs" / "encoding=rope").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"runs": {}}))
    dest = tmp_path / "study"
    if damage == "no_runs":
        shutil.rmtree(sweep / "runs")
    elif damage == "bad_json":
        (sweep / "sweep.json").write_text('{"runs": ')
    else:
        dest.write_text("a file")
    done = _script(FINETUNE_COLLECT, tmp_path / "root", dest)
    assert (done.returncode, done.stderr.count("\n")) == (2, 1), done.stderr
    assert done.stderr.startswith("collect.py: error: ") and message in done.stderr
    assert not (dest / "results").exists()


def test_the_finetune_collect_replaces_the_results_whole(tmp_path, monkeypatch):
    """A run left from an earlier collection stayed beside the new ones, and the README's
    provenance counted every folder on disk (48 runs for 24)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("finetune_collect", FINETUNE_COLLECT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module.plots, "plot_sweep", lambda sources, output: [])
    root, dest = tmp_path / "root", tmp_path / "study"
    for name in ("length=64", "length=128"):
        (root / "ft_rope" / "runs" / name).mkdir(parents=True)
        (root / "ft_rope" / "runs" / name / "config.json").write_text("{}")
    (root / "ft_rope" / "sweep.json").write_text("{}")
    module.collect(root, dest)
    shutil.rmtree(root / "ft_rope" / "runs" / "length=128")
    module.collect(root, dest)
    assert sorted(p.name for p in (dest / "results" / "ft_rope").iterdir()) == [
        "length=64", "sweep.json"]
    assert not (dest / "results.new").exists()
