"""End-to-end sweeps and extrapolation: `posjax sweep` (resumable, failures isolated),
`posjax extrapolate` (learned tables, rotary length extension) and `posjax plot`.

One sweep serves most tests: configs/lm.py's smoke study (rope, alibi) plus a run that no
device's memory holds (alibi at a batch of 2**30), first with --only on the rope run, then
whole. Every run reads a small slice of the stdlib corpus built once per session
(conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import pytest

from posjax import fileio
from posjax.config import config_json, configured
from posjax.errors import ConfigError
from posjax.eval import evaluate
from posjax.launch import cli, executors, hostenv, sweep
from posjax.results import plots
from posjax.runlock import RunLock, exclusive
from posjax.train.steps import eval_token_losses, train_step

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
LM = str(REPO / "configs" / "lm.py")
BASE = "smoke,seq_len=32,steps=4,eval_max_factor=2"  # evaluated at 32 and 64 tokens
RUNS = ("encoding=rope", "encoding=alibi", "encoding=alibi,batch_size=1073741824")


SWEEP_CONFIG = f'''
"""lm.py's smoke study plus a run that fails at train time."""
from posjax.config import load_config_module

_lm = load_config_module({LM!r})
get_config = _lm.get_config


def sweep(add, arg=""):
    _lm.sweep(add, arg)
    # its batch fits no device's memory: refused as it starts, not as the sweep plans
    add(encoding="alibi", batch_size=1073741824)
'''


@pytest.fixture(scope="module")
def swept(tmp_path_factory, data_flags, worker_id):
    """(sweep dir, the rope run's metrics.jsonl mtime after its own sweep, exit codes).

    Built once per session: under xdist the first worker builds it in the session's shared
    temporary folder and every worker tests its own copy (copied with the files' times; a
    sweep finds its runs under its own directory)."""
    if worker_id == "master":
        return _build_sweep(tmp_path_factory.mktemp("sweep"), data_flags)
    shared = tmp_path_factory.getbasetemp().parent / "shared_sweep"
    with exclusive(shared.with_name("shared_sweep.lock")):
        if not (shared / "built.json").exists():
            shared.mkdir(exist_ok=True)
            built = _build_sweep(shared, data_flags)
            fileio.write_json(shared / "built.json", {"mtime": built[1], "codes": built[2]})
    root = tmp_path_factory.mktemp("sweep")
    shutil.copytree(shared, root, dirs_exist_ok=True)
    built = fileio.read_json(root / "built.json")
    return root / "out", built["mtime"], tuple(built["codes"])


def _build_sweep(root: Path, data_flags):
    config = root / "sweep_config.py"
    config.write_text(SWEEP_CONFIG)
    sweepdir = root / "out"
    argv = ["sweep", f"--config={config}:{BASE},study=smoke", f"--workdir={sweepdir}",
            *data_flags]
    first = cli.main([*argv, "--only=encoding=rope"])
    mtime = (sweepdir / "runs" / "encoding=rope" / "metrics.jsonl").stat().st_mtime_ns
    index = fileio.read_json(sweepdir / "sweep.json")
    assert set(index["runs"]) == {"encoding=rope"}
    assert index["runs"]["encoding=rope"]["status"] == "done"
    whole = cli.main([*argv, "--parallel=2"])
    return sweepdir, mtime, (first, whole)


def test_sweep_runs_every_run_and_records_its_status(swept):
    sweepdir, _, (first, whole) = swept
    runs = fileio.read_json(sweepdir / "sweep.json")["runs"]
    assert set(runs) == set(RUNS)
    assert runs["encoding=rope"]["status"] == "done"
    assert runs["encoding=alibi"]["status"] == "done"
    assert runs["encoding=alibi"]["arg"] == f"{BASE},study=smoke,encoding=alibi"
    assert set(runs["encoding=alibi"]["summary"]["ppl"]) == {"32", "64"}
    assert first == 0 and whole == 1  # the sweep reports its failed run


def test_a_sweep_ends_by_printing_its_results_table(swept, data_flags, capsys):
    sweepdir, _, _ = swept
    config = sweepdir.parent / "sweep_config.py"
    capsys.readouterr()
    assert cli.main(["sweep", f"--config={config}:{BASE},study=smoke", f"--workdir={sweepdir}",
                     "--only=encoding=rope", *data_flags]) == 1  # nothing to run; the
    # failed run of the first sweep still counts
    out = capsys.readouterr().out
    assert "| rope |" in out and "| alibi |" in out
    assert f"plots: posjax plot {sweepdir}" in out
    assert out.endswith(f"results in {sweepdir.resolve() / 'runs'} (one folder per run), "
                        f"statuses in {sweepdir.resolve() / 'sweep.json'}\n")


def test_a_failed_run_records_its_error_and_does_not_stop_the_others(swept):
    sweepdir, _, _ = swept
    runs = fileio.read_json(sweepdir / "sweep.json")["runs"]
    failed = runs["encoding=alibi,batch_size=1073741824"]
    assert failed["status"] == "failed"
    assert failed["error"].startswith("posjax train: error:")
    assert "batch 1073741824" in failed["error"] and "GiB" in failed["error"]
    assert not (sweepdir / "runs" / "encoding=alibi,batch_size=1073741824" / "checkpoints").exists()


def test_a_resumed_sweep_does_not_redo_finished_runs(swept):
    sweepdir, mtime, _ = swept
    metrics = sweepdir / "runs" / "encoding=rope" / "metrics.jsonl"
    assert metrics.stat().st_mtime_ns == mtime
    log = (sweepdir / "runs" / "encoding=rope" / "log.txt").read_text()
    assert log.count("$ posjax train") == 1


def test_each_run_has_an_extrapolation_result_per_length(swept):
    sweepdir, _, _ = swept
    for name in RUNS[:2]:
        result = fileio.read_json(sweepdir / "runs" / name / "extrapolation.json")
        assert result["train_len"] == 32 and result["method"] == "none"
        rows = result["lengths"]
        assert [r["length"] for r in rows] == [32, 64]
        for row in rows:
            assert {"loss", "ppl", "acc", "bucket_loss"} <= set(row)
            assert row["ppl"] == pytest.approx(2.718281828 ** row["loss"], rel=1e-6)
            assert len(row["bucket_loss"]) == row["length"] // 32
            assert all(v is not None and v > 0 for v in row["bucket_loss"])


def test_plot_writes_the_picture_and_the_table(swept, capsys):
    sweepdir, _, _ = swept
    assert cli.main(["plot", str(sweepdir)]) == 0
    printed = capsys.readouterr().out.split()
    assert str(sweepdir / "extrapolation.png") in printed
    png = (sweepdir / "extrapolation.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    table = (sweepdir / "extrapolation.md").read_text()
    assert "| run | 32 | 64 |" in table
    assert "| rope |" in table and "| alibi |" in table


def test_print_commands_records_pending_runs_whose_commands_work_from_anywhere(
        tmp_path, small_data, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    sweepdir = tmp_path / "sweep"
    # Relative paths in the flags are made absolute in the commands.
    data_flags = [f"--config.data.data_dir={os.path.relpath(small_data['data_dir'])}",
                  f"--config.data.max_text_bytes={small_data['max_text_bytes']}"]
    assert cli.main(["sweep", f"--config=configs/lm.py:{BASE},study=smoke",
                     f"--workdir={os.path.relpath(sweepdir)}", "--print_commands",
                     *data_flags]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2  # lm.py's smoke study: rope, alibi
    runs = fileio.read_json(sweepdir / "sweep.json")["runs"]
    assert {name: r["status"] for name, r in runs.items()} == {
        "encoding=rope": "pending", "encoding=alibi": "pending"}
    train = shlex.split(lines[0])  # training and its evaluation in one process
    assert train[:2] == ["posjax", "train"] and train[-1] == "--extrapolate"
    assert f"--config={REPO / 'configs' / 'lm.py'}:" in train[2]
    assert train[3] == f"--workdir={sweepdir / 'runs' / 'encoding=rope'}"
    assert f"--config.data.data_dir={small_data['data_dir']}" in train
    # Run elsewhere, as another host would; --status and plot then see it finished.
    monkeypatch.chdir(tmp_path)
    assert cli.main(train[1:] + ["--noprogress"]) == 0
    capsys.readouterr()
    assert cli.main(["sweep", "--status", f"--workdir={sweepdir}"]) == 0
    status = capsys.readouterr().out
    assert "done         encoding=rope  final_loss=" in status
    assert "pending      encoding=alibi" in status
    assert cli.main(["plot", str(sweepdir)]) == 0
    assert "| rope |" in (sweepdir / "extrapolation.md").read_text()


@pytest.mark.parametrize(("extra", "message"), [
    (["--config=" + LM + ":smoke,study=smoke,seq_lne=3"], "did you mean 'seq_len'"),
    (["--config=" + LM + ":smoke,study=smoke", "--config.model.d_modle=3"],
     "did you mean 'd_model'"),
    (["--config=" + LM + ":smoke,study=smoke", "--only=encoding=nope"], "matches no run"),
])
def test_a_bad_sweep_fails_before_any_run(tmp_path, capsys, extra, message):
    sweepdir = tmp_path / "sweep"
    assert cli.main(["sweep", *extra, f"--workdir={sweepdir}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not sweepdir.exists()


# --- extrapolation options --------------------------------------------------------------


@pytest.fixture(scope="module")
def learned_run(tmp_path_factory, data_flags) -> Path:
    workdir = tmp_path_factory.mktemp("learned") / "run"
    assert cli.main(["train", f"--config={LM}:{BASE},encoding=learned", f"--workdir={workdir}",
                     "--noprogress", *data_flags]) == 0
    return workdir


def test_learned_table_beyond_its_length_is_an_error_row_without_an_extension(learned_run):
    result = evaluate(learned_run, learned_extension="")
    short, long = result["lengths"]
    assert short["length"] == 32 and "ppl" in short
    assert long["length"] == 64 and "ppl" not in long
    assert "defines 32 positions but evaluation needs 64" in long["error"]
    # the fix as `posjax extrapolate` takes it (its --config.eval. twin is no flag of it)
    assert "posjax extrapolate --learned_extension=hierarchical" in long["error"]


def test_learned_table_evaluates_beyond_its_length_with_hierarchical(learned_run, capsys):
    assert cli.main(["extrapolate", f"--workdir={learned_run}",
                     "--learned_extension=hierarchical"]) == 0
    result = fileio.read_json(learned_run / "extrapolation.json")
    assert [r["length"] for r in result["lengths"]] == [32, 64]
    assert all("ppl" in r for r in result["lengths"])
    assert result["learned_extension"] == "hierarchical"
    out = capsys.readouterr().out
    assert "| 64 |" in out and out.endswith(f"wrote {learned_run / 'extrapolation.json'}\n")


def test_rope_scaling_on_a_non_rotary_run_is_a_config_error(swept, capsys):
    sweepdir, _, _ = swept
    alibi = sweepdir / "runs" / "encoding=alibi"
    # every rotary encoding named (it said "rope, xpos": xpos takes none, ssmax and others do)
    with pytest.raises(ConfigError, match=r"applies to rotary encodings \(rope, rope_pp, "
                       r"qkvo_rope, vo_rope, ssmax\); this run uses 'alibi': drop --rope_s"):
        evaluate(alibi, rope_scaling="ntk")
    assert cli.main(["extrapolate", f"--workdir={alibi}", "--rope_scaling=yarn"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not list(alibi.glob("extrapolation_*.json"))


def test_unknown_rope_scaling_method_is_a_config_error(swept):
    sweepdir, _, _ = swept
    with pytest.raises(ConfigError, match="unknown length-extension method 'ntx'.*'ntk'"):
        evaluate(sweepdir / "runs" / "encoding=rope", rope_scaling="ntx")


@pytest.mark.parametrize(("method", "name"), [("ntk", "extrapolation_ntk.json"),
                                              ("rerope:8", "extrapolation_rerope-8.json")])
def test_rope_scaling_methods_write_their_own_result(swept, method, name):
    sweepdir, _, _ = swept
    rope = sweepdir / "runs" / "encoding=rope"
    plain = (rope / "extrapolation.json").read_text()
    evaluate(rope, rope_scaling=method)
    result = json.loads((rope / name).read_text())
    assert result["method"] == method
    assert [r["length"] for r in result["lengths"]] == [32, 64]
    assert all("ppl" in r for r in result["lengths"])
    assert (rope / "extrapolation.json").read_text() == plain


def test_a_hugging_face_rope_scaling_block_is_taken_as_is_and_named_by_it(swept, capsys):
    sweepdir, _, _ = swept
    rope = sweepdir / "runs" / "encoding=rope"
    block = ('{"rope_type": "llama3", "factor": 2, "low_freq_factor": 1, '
             '"high_freq_factor": 4, "original_max_position_embeddings": 16}')
    assert cli.main(["extrapolate", f"--workdir={rope}", f"--rope_scaling={block}"]) == 0
    written = list(rope.glob("extrapolation_llama3-2-*.json"))
    assert len(written) == 1
    result = json.loads(written[0].read_text())
    assert json.loads(result["method"])["original_max_position_embeddings"] == 16  # as given
    assert all("ppl" in r for r in result["lengths"])


@pytest.mark.parametrize(("spec", "message"), [
    ("linear:0.5", "factor 0.5 < 1"),
    ("linear:abc", "needs a numeric factor"),
    ('{"rope_type": "ntk_by_parts", "factor": 2}', "unknown rope_scaling type 'ntk_by_parts'.*"
                                                   "valid: default, dynamic, linear, llama3, "
                                                   "longrope, ntk, yarn"),
    ('{"rope_type": "yarn", "factr": 2}', "does not read 'factr' \\(did you mean 'factor'\\?\\)"),
    ('{"rope_type": "yarn"', "is not valid JSON"),
])
def test_a_bad_rope_scaling_is_one_line_before_any_write(swept, capsys, spec, message):
    sweepdir, _, _ = swept
    rope = sweepdir / "runs" / "encoding=rope"
    before = sorted(p.name for p in rope.iterdir())
    assert cli.main(["extrapolate", f"--workdir={rope}", f"--rope_scaling={spec}"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert sorted(p.name for p in rope.iterdir()) == before


def test_a_sliding_evaluation_keeps_the_non_overlapping_one(swept):
    sweepdir, _, _ = swept
    rope = sweepdir / "runs" / "encoding=rope"
    plain = (rope / "extrapolation.json").read_text()
    evaluate(rope, protocol="sliding", stride=8)
    sliding = json.loads((rope / "extrapolation_sliding-s8.json").read_text())
    assert sliding["protocol"] == "sliding" and sliding["stride"] == 8
    assert (rope / "extrapolation.json").read_text() == plain
    labels = [r["label"] for r in plots.load_results(sweepdir)]
    assert "rope" in labels and "rope (sliding, stride 8)" in labels


# --- grouped evaluation lengths ---------------------------------------------------------

# Trained at 32: with group_factor 4 the rungs are 32 and 128, so 8, 16, 32 share rows of 32
# and 64, 128 rows of 128 (two compiled shapes instead of five).
GROUP_LENGTHS = (8, 16, 32, 64, 128)
GROUPED = {8: 32, 16: 32, 32: 32, 64: 128, 128: 128}


@pytest.mark.parametrize(("run", "method", "row_len", "programs"), [
    ("encoding=rope", "", GROUPED, 2),
    ("encoding=rope", "dynamic:4", GROUPED, 2),  # reads max(position) + 1 = L, not R
    ("learned", "", GROUPED, 2),  # a learned table, hierarchical past 32 (a second encoding)
    # ntk's factor is L / 32 past 32: 64 and 128 compile their own programs anyway, unpacked.
    ("encoding=rope", "ntk", {8: 32, 16: 32, 32: 32, 64: 64, 128: 128}, 3),
])
def test_grouped_lengths_score_the_same_with_fewer_programs(swept, learned_run, tmp_path,
                                                            run, method, row_len, programs):
    workdir = learned_run if run == "learned" else swept[0] / "runs" / run
    results, compiled = {}, {}
    for factor in (1, 4):
        eval_token_losses.clear_cache()
        results[factor] = evaluate(
            workdir, lengths=GROUP_LENGTHS, rope_scaling=method, group_factor=factor,
            output=tmp_path / f"group{factor}.json")
        compiled[factor] = eval_token_losses._cache_size()
    assert compiled == {1: len(GROUP_LENGTHS), 4: programs}
    alone, grouped = results[1]["lengths"], results[4]["lengths"]
    assert {r["length"]: r["row_len"] for r in alone} == {n: n for n in GROUP_LENGTHS}
    assert {r["length"]: r["row_len"] for r in grouped} == row_len
    for a, g in zip(alone, grouped, strict=True):
        assert g["length"] == a["length"] and g["tokens"] == a["tokens"]
        for key in ("loss", "ppl"):
            assert g[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6)
        assert g["bucket_loss"] == pytest.approx(a["bucket_loss"], rel=1e-5, abs=1e-6)
        # Float rounding may flip an argmax between near-equal logits: one token at most.
        assert g["acc"] == pytest.approx(a["acc"], abs=1.0 / a["tokens"])


# --- faults -----------------------------------------------------------------------------

LONG = f"--config={LM}:smoke,seq_len=32,steps=100000,study=smoke"  # killed long before the end


def start_sweep(sweepdir, data_flags, *flags) -> tuple[subprocess.Popen, list[Path]]:
    """A long sweep in its own process, once each of its first `parallel` runs is training
    (has taken its run directory's lock); the process and the run directories' locks."""
    parallel = next((int(f.split("=")[1]) for f in flags if f.startswith("--parallel=")), 1)
    proc = subprocess.Popen([sys.executable, "-m", "posjax", "sweep", LONG,
                             f"--workdir={sweepdir}", *data_flags, *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    locks = [sweepdir / "runs" / name / ".lock" for name in ("encoding=rope", "encoding=alibi")]
    deadline = time.time() + 120
    while sum(lock.exists() and "PID" in lock.read_text() for lock in locks) < parallel:
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
        time.sleep(0.05)
    return proc, locks[:parallel]


def wait_unlocked(lock: Path, seconds: float = 30) -> None:
    """Wait until no process holds the run directory's lock."""
    deadline = time.time() + seconds
    while True:
        try:
            RunLock(lock.parent).acquire().release()
            return
        except ConfigError:
            assert time.time() < deadline, f"{lock.parent} is still in use"
            time.sleep(0.1)


def test_sigkill_of_a_sweep_takes_its_children_with_it(tmp_path, data_flags):
    proc, locks = start_sweep(tmp_path, data_flags, "--parallel=2")
    proc.kill()
    proc.communicate()
    for lock in locks:
        # A child inside an XLA compile takes its SIGTERM when the compile returns.
        wait_unlocked(lock, 120)
    runs = fileio.read_json(tmp_path / "sweep.json")["runs"]
    assert {r["status"] for r in runs.values()} == {"running"}  # a re-run resumes them


def test_sighup_on_a_sweep_stops_it_in_one_line_marking_runs_interrupted(tmp_path,
                                                                        data_flags):
    """A closed terminal (every stop signal takes one path: tests/test_train.py)."""
    proc, (lock,) = start_sweep(tmp_path, data_flags)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGHUP
    assert err.strip().splitlines()[-1] == (
        "posjax sweep: interrupted: re-run the same command to resume"), err
    assert "Traceback" not in err
    # the run's own line ("posjax train: interrupted ...") stays in its log, off the screen
    assert "posjax train: interrupted" not in err
    assert "posjax train: interrupted" in (tmp_path / "runs" / "encoding=rope" / "log.txt"
                                           ).read_text()
    runs = fileio.read_json(tmp_path / "sweep.json")["runs"]
    assert runs["encoding=rope"]["status"] == "interrupted"
    assert runs["encoding=alibi"]["status"] == "pending"  # never started
    wait_unlocked(lock, 1)


def test_a_second_sweep_on_the_same_directory_is_refused(tmp_path, data_flags, capsys):
    proc, _ = start_sweep(tmp_path, data_flags)
    try:
        assert cli.main(["sweep", LONG, f"--workdir={tmp_path}", *data_flags]) == 2
        assert f"is in use by PID {proc.pid}" in capsys.readouterr().err
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def test_a_sweep_folder_refuses_another_config_files_runs(tmp_path, data_flags, capsys):
    """Another config file's runs of the same name would be taken for finished (and another
    model kind's ranked in one table): refused in one line; the same file from another
    place (a moved checkout) is the same config."""
    workdir = tmp_path / "sweep"
    planned = ["--grid=theta=1e4,5e5", f"--workdir={workdir}", "--print_commands", *data_flags]
    assert cli.main(["sweep", f"--config={LM}:{BASE},encoding=rope", *planned]) == 0
    before = (workdir / "sweep.json").read_bytes()
    mine = tmp_path / "my_config.py"
    mine.write_text(f"from posjax.config import load_config_module\n"
                    f"get_config = load_config_module({LM!r}).get_config\n")
    mlm = REPO / "configs" / "mlm.py"
    capsys.readouterr()
    for other in (f"{mine}:{BASE},encoding=rope", f"{mlm}:smoke,encoding=rope"):
        assert cli.main(["sweep", f"--config={other}", *planned]) == 2
        recorded, given = LM, other.partition(":")[0]
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"posjax sweep: error: {workdir} holds runs of {recorded}, not of {given}: use a "
            "new --workdir for this config file (posjax plot DIR1 DIR2 compares the runs of "
            "both)")
        assert (workdir / "sweep.json").read_bytes() == before
    moved = tmp_path / "checkout" / "lm.py"
    moved.parent.mkdir()
    shutil.copy(LM, moved)
    assert cli.main(["sweep", f"--config={moved}:{BASE},encoding=rope", *planned]) == 0


def test_a_sweep_evaluating_again_scores_the_runs_it_trained_without_evaluation(
        tmp_path, data_flags, capsys):
    """--extrapolate=false, then the same sweep evaluating: the trained runs are scored, not
    taken for finished and not trained again."""
    sweep_flags = [f"--config={LM}:{BASE},encoding=rope", "--grid=theta=1e4,5e5",
                   f"--workdir={tmp_path}", "--executor=inprocess", *data_flags]
    assert cli.main(["sweep", *sweep_flags, "--extrapolate=false"]) == 0
    # Each in-process run's compiled programs are dropped when it ends, as a child's are.
    assert train_step._cache_size() == 0
    runs = [tmp_path / "runs" / f"theta={theta}" for theta in ("1e4", "5e5")]
    metrics = [(run / "metrics.jsonl").read_text() for run in runs]
    assert not any((run / "extrapolation.json").exists() for run in runs)
    # Written to a file, a run's bar under the sweep's was a stream of cursor escapes.
    assert "\x1b[" not in capsys.readouterr().err
    assert not any("\r" in (run / "log.txt").read_text() for run in runs)
    assert cli.main(["sweep", *sweep_flags]) == 0
    assert all((run / "extrapolation.json").exists() for run in runs)
    assert [(run / "metrics.jsonl").read_text() for run in runs] == metrics  # not retrained
    entries = fileio.read_json(tmp_path / "sweep.json")["runs"]
    assert {entry["status"] for entry in entries.values()} == {"done"}
    assert all(entry["summary"]["ppl"] for entry in entries.values())


def test_a_re_run_leaves_a_run_another_process_holds_and_takes_it_up_once_it_ends(
        tmp_path, data_flags, capsys, lock_held_elsewhere):
    """A SLURM job of an interrupted sweep still training when the sweep is run again: its
    run was submitted a second time, failed on the lock and was recorded failed."""
    sweep_flags = [f"--config={LM}:{BASE},encoding=rope", "--grid=theta=1e4,5e5",
                   f"--workdir={tmp_path}", "--executor=inprocess", *data_flags]
    held = tmp_path / "runs" / "theta=5e5"
    with lock_held_elsewhere(held) as holder:
        assert cli.main(["sweep", *sweep_flags]) == 1
        err = capsys.readouterr().err
        busy = f"in use by PID {holder.pid} (-c)"
        assert (f"posjax sweep: theta=5e5 {busy}: not started again; `posjax sweep --status` "
                "shows when it ends, and a re-run then takes up what it left") in err, err
        assert err.splitlines()[-1] == (
            f"running: theta=5e5: {busy}, not by this sweep: re-run the sweep once it ends")
        runs = fileio.read_json(tmp_path / "sweep.json")["runs"]
        assert runs["theta=1e4"]["status"] == "done"
        assert (runs["theta=5e5"]["status"], runs["theta=5e5"]["error"]) == ("running", busy)
        assert not (held / "metrics.jsonl").exists()  # not trained beside its holder
        assert cli.main(["sweep", f"--workdir={tmp_path}", "--status"]) == 0
        assert f"running      theta=5e5  {busy}" in capsys.readouterr().out
    assert cli.main(["sweep", *sweep_flags]) == 0
    runs = fileio.read_json(tmp_path / "sweep.json")["runs"]
    assert {entry["status"] for entry in runs.values()} == {"done"}


def test_status_after_the_sweep_was_killed_says_interrupted_not_running(tmp_path, capsys):
    """kill -9 of a sweep left its runs "running" in sweep.json, and --status said so."""
    arg = f"{BASE},study=smoke"
    fileio.write_json(tmp_path / "sweep.json", {"config": LM, "arg": arg, "runs": {
        name: {"arg": f"{arg},{name}", "status": "running"}
        for name in ("encoding=rope", "encoding=alibi")}})
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from posjax.runlock import RunLock; "
         f"lock = RunLock({str(tmp_path / 'runs' / 'encoding=alibi')!r}).acquire(); "
         "print(1, flush=True); "
         "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    started = tmp_path / "runs" / "encoding=rope" / "config.json"  # a run writes it first
    fileio.write_json(started, {})
    fileio.write_json(tmp_path / "runs" / "encoding=alibi" / "config.json", {})
    try:
        assert holder.stdout.readline().strip() == "1"  # alibi's own process holds it
        assert cli.main(["sweep", f"--workdir={tmp_path}", "--status"]) == 0
        assert capsys.readouterr().out.splitlines() == [
            "interrupted  encoding=rope  its process is gone: re-run the sweep to resume",
            "running      encoding=alibi"]
        # recorded running when submitted (Ray's queue), but never started: no config.json
        started.unlink()
        assert cli.main(["sweep", f"--workdir={tmp_path}", "--status"]) == 0
        assert capsys.readouterr().out.splitlines()[0] == (
            "pending      encoding=rope  submitted, never started: re-run the sweep")
    finally:
        holder.kill()
        holder.wait()


# --- executors --------------------------------------------------------------------------


def final_losses(sweepdir) -> dict[str, float]:
    runs = fileio.read_json(Path(sweepdir) / "sweep.json")["runs"]
    return {n: r["summary"]["final_loss"] for n, r in runs.items() if r["status"] == "done"}


# Ray's one-machine switch: with it off, a node started on 127.0.0.1 stays there.
RAY_ONE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@pytest.fixture
def ray_cluster(ray_home):
    """A 2-CPU Ray cluster listening on 127.0.0.1 only, started with Ray's own CLI where a
    token file exists, so it requires that token; its address. Stopped by stopping its own
    `ray start --block` (`ray stop` would stop every Ray on the machine), with no drain: Ray
    drains a node for up to 30 s on SIGTERM (for Serve), and here the drain sometimes took
    all 30 s after the test had passed."""
    pytest.importorskip("ray")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ray = str(Path(sys.executable).parent / "ray")
    head = subprocess.Popen(
        [ray, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
         "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats"],
        env={**os.environ, RAY_ONE_MACHINE: "0", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not _answers("127.0.0.1", port):
            assert head.poll() is None and time.monotonic() < deadline, "ray start failed"
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        head.terminate()
        head.wait(timeout=60)


def _answers(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True


def test_ray_runs_the_sweep_with_the_local_executors_losses_and_retries_failures(
        swept, tmp_path, data_flags, ray_cluster, monkeypatch):
    local, _, _ = swept
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(local / ".jax_cache"))
    config = local.parent / "sweep_config.py"
    # The driver gets a process of its own: Ray's client takes over the logging of its process.
    # It reaches the cluster only if it stays on 127.0.0.1 and presents the token it has.
    # Two CPUs a run on the 2-CPU cluster: one run at a time, the other queued by Ray. sweep.json
    # recorded both running from their submission on; then, when each task waited on Ray's
    # queue to say it started, Ray lent the waiting task's CPUs to the queued run.
    # Its stderr goes to a file: a pipe nobody reads while the test polls could fill and stall it.
    with tempfile.TemporaryFile("w+") as err:
        driver = subprocess.Popen(
            [sys.executable, "-m", "posjax", "sweep", f"--config={config}:{BASE},study=smoke",
             f"--workdir={tmp_path}", "--executor=ray", f"--ray_address={ray_cluster}",
             "--retries=1", "--only=encoding=alibi*", "--cpus_per_run=2", *data_flags],
            stdout=subprocess.DEVNULL, stderr=err, text=True)
        running_at_once = set()
        while driver.poll() is None:
            runs = (fileio.read_json(tmp_path / "sweep.json") or {}).get("runs", {})
            running_at_once.add(sum(run.get("status") == "running" for run in runs.values()))
            time.sleep(0.1)
        err.seek(0)
        stderr = err.read()
    assert driver.returncode == 1, stderr  # the run that no memory holds always fails
    assert running_at_once == {0, 1}
    assert "os.fork() was called" not in stderr  # JAX's warning at Ray's forks
    assert final_losses(tmp_path) == {
        run: loss for run, loss in final_losses(local).items() if run.startswith("encoding=alibi")}
    failed = "encoding=alibi,batch_size=1073741824"
    assert fileio.read_json(tmp_path / "sweep.json")["runs"][failed]["status"] == "failed"
    assert (tmp_path / "runs" / failed / "log.txt").read_text().count("$ posjax train") == 2


def test_a_ray_runs_end_is_reported_before_the_start_of_the_run_that_took_its_worker():
    """Run B's start, read in the same look as the end of run A, whose worker it took, was
    reported first: sweep.json showed both running."""

    class Ray:  # the refs that ended by this look, and each one's outcome
        def __init__(self, done):
            self.done = done

        def wait(self, refs, num_returns, timeout):
            return [ref for ref in refs if ref in self.done], []

        def get(self, ref):
            return executors.Outcome("done", None, 1.0)

    def looked(done, started, runs=(("a", "A"), ("b", "B"), ("c", "C"))):
        reports = []
        pending = {ref: executors.Job(name, "", ()) for ref, name in runs}
        executors._report_news(Ray(done), started, pending,
                               lambda name, outcome: reports.append(
                                   (name, outcome and outcome.status)))
        return reports, sorted(pending)

    assert looked({"a"}, ["B"]) == ([("A", "done"), ("B", None)], ["b", "c"])
    # a run that started and ended between two looks; a retried run's two starts, one report
    assert looked({"a"}, ["A", "B", "B"]) == ([("A", None), ("A", "done"), ("B", None)],
                                              ["b", "c"])
    assert looked(set(), []) == ([], ["a", "b", "c"])
    # A's start arrived after its end was reported: A is not recorded running again
    assert looked(set(), ["A", "B"], runs=[("b", "B")]) == ([("B", None)], ["b"])


def test_a_cancel_without_a_signal_stops_a_quiet_run_at_once(tmp_path):
    """Ctrl-C on a Ray sweep let its runs train to the end: Ray cancels a running task by
    raising KeyboardInterrupt in its thread without a signal (as _thread.interrupt_main), and
    the task waited in a read of the run's stderr, which --noprogress leaves quiet."""
    import _thread

    quiet = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             stderr=subprocess.PIPE)
    started = time.monotonic()
    # As in a Ray worker, SIGINT raises KeyboardInterrupt: a suite started with SIGINT ignored
    # (`(bash scripts/test.sh &)` in a script) keeps it ignored, and interrupt_main then
    # does nothing.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.3, _thread.interrupt_main).start()
        with open(tmp_path / "log.txt", "ab") as log, pytest.raises(KeyboardInterrupt):
            executors._stream(quiet, log, show=False)
    finally:
        signal.signal(signal.SIGINT, previous)
        quiet.kill()
        quiet.wait()
    assert time.monotonic() - started < 10


def test_a_muted_stream_is_logged_but_not_shown(tmp_path, capfd):
    """A stopped sweep printed each shown run's "interrupted" line above its own."""
    muted = threading.Event()
    muted.set()
    loud = subprocess.Popen([sys.executable, "-c", "import sys; sys.stderr.write('the line')"],
                            stderr=subprocess.PIPE)
    with open(tmp_path / "log.txt", "ab") as log:
        assert executors._stream(loud, log, show=True, muted=muted) == "the line"
    loud.wait()
    assert "the line" not in capfd.readouterr().err
    assert (tmp_path / "log.txt").read_text() == "the line"


def test_a_shown_stream_whose_reader_left_is_still_logged_whole(tmp_path, monkeypatch):
    """`posjax sweep ... 2>&1 | head -1`: the copy onto our stderr met a closed pipe, and the
    run's own stderr, read no more, would fill and block it."""
    class ReaderLeft:
        class buffer:  # noqa: N801 (sys.stderr.buffer's place)
            @staticmethod
            def write(chunk):
                raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stderr", ReaderLeft())
    lines = "".join(f"line {i}\n" for i in range(20_000))  # more than a pipe holds
    loud = subprocess.Popen([sys.executable, "-c", "import sys; sys.stderr.write(''.join("
                             "f'line {i}\\n' for i in range(20_000)))"], stderr=subprocess.PIPE)
    with open(tmp_path / "log.txt", "ab") as log:
        assert executors._stream(loud, log, show=True) == "line 19999"
    assert loud.wait(timeout=60) == 0
    assert (tmp_path / "log.txt").read_text() == lines


def test_a_ray_cluster_that_rejects_the_token_is_one_line_naming_the_token_file(
        tmp_path, capsys, ray_cluster, monkeypatch):
    stale = tmp_path / "stale_token"
    stale.write_text("0" * 64)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(stale))
    workdir = tmp_path / "sweep"
    assert cli.main(["sweep", f"--config={LM}:{BASE},study=smoke", f"--workdir={workdir}",
                     "--executor=ray", f"--ray_address={ray_cluster}"]) == 2
    assert capsys.readouterr().err == (
        f"posjax sweep: error: the Ray cluster at --ray_address={ray_cluster} requires an auth "
        f"token, and the one in {stale} is not the cluster's: replace it with the cluster's "
        "token (`ray get-auth-token` on its head node), or point RAY_AUTH_TOKEN_PATH at a file "
        "holding that\n")
    assert not workdir.exists()


@pytest.mark.parametrize(("address", "environ", "has_token", "expected"), [
    (None, {}, False, {RAY_ONE_MACHINE: "0"}),
    ("127.0.0.1:6379", {}, True, {RAY_ONE_MACHINE: "0", "RAY_AUTH_MODE": "token"}),
    ("localhost:6379", {}, False, {RAY_ONE_MACHINE: "0"}),
    ("10.1.2.3:6379", {}, True, {"RAY_AUTH_MODE": "token"}),
    ("10.1.2.3:6379", {"RAY_AUTH_MODE": "disabled"}, True, {}),
    ("10.1.2.3:6379", {"RAY_AUTH_TOKEN": "abc"}, False, {"RAY_AUTH_MODE": "token"}),
])
def test_the_ray_driver_stays_on_127_0_0_1_and_presents_its_token(
        tmp_path, address, environ, has_token, expected):
    if has_token:
        (tmp_path / ".ray").mkdir()
        (tmp_path / ".ray" / "auth_token").write_text("abc\n")
    assert executors.ray_environment(address, environ, tmp_path) == expected


def test_a_ray_connection_failure_is_one_line_naming_ray_not_the_disk(monkeypatch):
    def refuse(**_):
        raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:6379")

    for name in (RAY_ONE_MACHINE, "RAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)  # run() sets them; restored after the test
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(init=refuse))
    ray = executors.Ray(executors.Options(ray_address="127.0.0.1:6379"))
    with pytest.raises(ConfigError) as error:
        ray.run([], {}, lambda *_: None)
    assert str(error.value) == (
        "Ray: Failed to connect to Ray cluster at 127.0.0.1:6379: check that "
        "`ray status --address=127.0.0.1:6379` reaches it from here")


def test_slurm_runs_a_job_array_through_submitit(swept, tmp_path, data_flags, monkeypatch):
    pytest.importorskip("submitit")
    local, _, _ = swept
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(local / ".jax_cache"))
    assert cli.main(["sweep", f"--config={LM}:{BASE},study=smoke", f"--workdir={tmp_path}",
                     "--executor=slurm", "--slurm_cluster=local", "--only=encoding=rope",
                     *data_flags]) == 0
    assert final_losses(tmp_path) == {"encoding=rope": final_losses(local)["encoding=rope"]}
    assert list((tmp_path / "slurm").glob("*_log.out"))


@pytest.mark.parametrize(("flags", "message"), [
    (["--executor=mpi"], "unknown executor 'mpi'; valid: inprocess, local, ray, slurm"),
    (["--executor=ray", "--ray_address=127.0.0.1:1"], "cannot reach a Ray cluster at"),
    (["--executor=slurm"], "no SLURM here (sbatch not found)"),
    (["--parallel=0"], "--parallel"),
    (["--retries=2"], "--retries is not read by --executor=local: leave it out, or run with "
                      "--executor=ray or --executor=slurm"),
    (["--cpus_per_run=4"], "--cpus_per_run is not read by --executor=local"),
    (["--executor=inprocess", "--slurm_partition=gpu"],
     "--slurm_partition is not read by --executor=inprocess: leave it out, or run with "
     "--executor=slurm"),
    (["--executor=inprocess", "--parallel=2"], "--parallel is not read by --executor=inprocess"),
    (["--executor=inprocess", "--parallel=1"], "--parallel is not read by --executor=inprocess"),
    (["--retries=0"], "--retries is not read by --executor=local"),  # typed, at its default
    (["--print_commands", "--parallel=3"],
     "--parallel is not read with --print_commands, which runs nothing: leave it out"),
    (["--status", "--parallel=3"],
     "--parallel is not read with --status, which runs nothing: leave it out"),
    # each was ignored, exit 0
    (["--print_commands", "--executor=ray"],
     "--executor is not read with --print_commands, which runs nothing: leave it out"),
    (["--status", "--print_commands"],
     "--print_commands is not read with --status, which runs nothing: leave it out"),
    (["--status", "--only=encoding=rope"],  # it listed every run
     "--only is not read with --status, which runs nothing: leave it out"),
    (["--status", "--noextrapolate"], "--extrapolate is not read with --status"),
])
def test_a_bad_executor_setting_is_one_line(tmp_path, capsys, flags, message):
    assert cli.main(["sweep", f"--config={LM}:{BASE},study=smoke", f"--workdir={tmp_path}",
                     *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_a_missing_extra_names_the_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    assert cli.main(["sweep", f"--config={LM}:{BASE},study=smoke", f"--workdir={tmp_path}",
                     "--executor=ray"]) == 2
    assert "pip install 'posjax[ray]'" in capsys.readouterr().err


def test_runs_at_a_time_on_a_cpu_get_their_own_cores(swept):
    # The fixture's second sweep ran its two unfinished runs with --parallel=2: with no GPU,
    # each pinned itself to its half of the cores, and its device line says so.
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU pinning on this platform")
    assert executors.cpu_env(1, 2, gpus=0) == {
        "POSJAX_CPUS": ",".join(map(str, sweep_cores()[1]))}
    assert executors.cpu_env(0, 1, gpus=0) == {}  # one run at a time has every core
    assert executors.cpu_env(0, 2, gpus=1) == {}  # GPU runs get GPUs (device_env)
    if executors.gpu_count() or len(os.sched_getaffinity(0)) < 2:
        return  # a GPU machine's runs share no CPU cores; one core cannot be split
    sweepdir, _, _ = swept
    log = (sweepdir / "runs" / "encoding=alibi" / "log.txt").read_text()
    share = len(sweep_cores()[0]), len(sweep_cores()[1])
    assert any(f"{n} of {os.cpu_count()} CPU cores" in log for n in share), log[-2000:]


def sweep_cores() -> list[list[int]]:
    """This machine's cores as two runs at a time split them."""
    return hostenv.cpu_groups(sorted(os.sched_getaffinity(0)), 2)


def test_the_sweep_bar_shows_each_hidden_run_s_latest_step(tmp_path):
    fileio.write_jsonl(tmp_path / "encoding=rope" / "metrics.jsonl", [
        {"step": 25, "loss": 3.5, "tokens_per_sec": 7000.0},
        {"step": 50, "loss": 2.4567, "tokens_per_sec": 7312.0}])
    (tmp_path / "encoding=t5").mkdir()  # started, no row yet
    line = sweep.progress_line([tmp_path / "encoding=rope", tmp_path / "encoding=t5"])
    assert line == "encoding=rope: step 50, loss 2.457, 7.3k tok/s"
    # A row of the compiling step alone has no speed (the trainer writes null): the bar's
    # thread says so rather than dying on it.
    fileio.write_jsonl(tmp_path / "encoding=t5" / "metrics.jsonl", [
        {"step": 1, "loss": 5.25, "tokens_per_sec": None}])
    line = sweep.progress_line([tmp_path / "encoding=rope", tmp_path / "encoding=t5"])
    assert line.endswith(" | encoding=t5: step 1, loss 5.250, compiling")


def test_the_sweep_bar_ends_without_a_finished_run_s_last_polled_step(tmp_path,
                                                                       monkeypatch, capsys):
    """A run that finished between two polls left its "step 60" on the bar at 100%."""
    def trained(job, env):
        fileio.write_jsonl(sweep.run_dir(tmp_path, job.name) / "metrics.jsonl", [
            {"step": 60, "loss": 2.8, "tokens_per_sec": 5000.0}])
        time.sleep(0.3)  # polled at least once
        return executors.Outcome("done", None, 0.3)

    monkeypatch.setattr(executors, "run_here", trained)
    monkeypatch.setattr(sweep, "PROGRESS_EVERY_S", 0.05)
    sweep.run_cli(f"{LM}:study=theta,smoke", tmp_path, only="*theta=100.0",
                  executor="inprocess", extrapolate=False)
    err = capsys.readouterr().err
    assert "step 60, loss 2.800" in err  # the bar showed it while the run trained
    last = err.rstrip("\n").rsplit("\r", 1)[-1]
    assert "100%" in last and "step 60" not in last, last


def test_runs_get_their_own_gpus_and_share_them_without_preallocation():
    assert executors.device_env(0, 0, 1, 2) == {}
    assert executors.device_env(1, 4, 1, 2) == {"CUDA_VISIBLE_DEVICES": "1"}
    assert executors.device_env(1, 4, 2, 2) == {"CUDA_VISIBLE_DEVICES": "2,3"}
    shared = executors.device_env(2, 2, 1, 3)
    assert shared == {"CUDA_VISIBLE_DEVICES": "0", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def test_a_run_taken_as_finished_from_its_directory_keeps_no_seconds_of_another_attempt(
        tmp_path):
    # A run interrupted after 46 s, then finished elsewhere (or copied in): the sweep did not
    # time what the run took, so its seconds are unknown, not 46.
    state = sweep.SweepState(tmp_path, LM, "smoke", extrapolate=False)
    state.update("encoding=rope", status="interrupted", seconds=46.0)
    fileio.write_json(tmp_path / "runs" / "encoding=rope" / "stages.json",
                  {"stages": [{"final_loss": 2.0}], "final_step": 4})
    fileio.write_json(tmp_path / "runs" / "encoding=rope" / "config.json", {})
    state.refresh()
    entry = fileio.read_json(tmp_path / "sweep.json")["runs"]["encoding=rope"]
    assert (entry["status"], entry["seconds"]) == ("done", None)


def test_a_done_run_whose_folder_was_deleted_is_pending_again(tmp_path):
    state = sweep.SweepState(tmp_path, LM, "smoke", extrapolate=False)
    state.update("encoding=rope", status="done", seconds=5.0)
    state.refresh()
    assert fileio.read_json(tmp_path / "sweep.json")["runs"]["encoding=rope"]["status"] == \
        "pending"


def test_a_done_run_whose_config_json_was_deleted_is_pending_again(tmp_path):
    """It stayed done, in --status and in the plot, where train and extrapolate refuse it."""
    state = sweep.SweepState(tmp_path, LM, "smoke", extrapolate=False)
    run = tmp_path / "runs" / "encoding=rope"
    fileio.write_json(run / "stages.json", {"stages": [{"final_loss": 2.0}], "final_step": 4})
    fileio.write_json(run / "config.json", {})
    state.update("encoding=rope", status="done", seconds=5.0)
    state.refresh()
    assert state.runs["encoding=rope"]["status"] == "done"
    (run / "config.json").unlink()
    state.refresh()
    assert fileio.read_json(tmp_path / "sweep.json")["runs"]["encoding=rope"]["status"] == \
        "pending"


def test_a_run_killed_by_a_signal_is_named_so_not_by_its_last_progress_line(tmp_path):
    outcome = executors.run_job(
        executors.Job("encoding=rope", str(tmp_path), (("posjax", "list"),)), {},
        started=lambda proc: proc.kill())
    assert (outcome.status, outcome.error) == (
        "failed", "killed by SIGKILL: re-run the sweep to resume it from its last checkpoint")


def test_a_sweep_given_other_config_overrides_than_its_runs_is_one_line(swept, data_flags,
                                                                        capsys):
    """Not "done" over runs trained with the old values, nor the new values for the runs left
    to train: the sweep's runs would not share one config."""
    sweepdir, _, _ = swept
    config = sweepdir.parent / "sweep_config.py"
    recorded = (sweepdir / "sweep.json").read_bytes()
    capsys.readouterr()
    assert cli.main(["sweep", f"--config={config}:{BASE},study=smoke", f"--workdir={sweepdir}",
                     "--config.train.learning_rate=0.001", *data_flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.endswith(
        "trained with another config (train.learning_rate: 0.002 -> 0.001): use a new "
        "--workdir for a different sweep"), err
    assert (sweepdir / "sweep.json").read_bytes() == recorded
    # What a resumed run may change (how it is observed) is no other config.
    assert cli.main(["sweep", f"--config={config}:{BASE},study=smoke", f"--workdir={sweepdir}",
                     "--only=encoding=rope", "--config.train.log_every_steps=3",
                     *data_flags]) == 1  # nothing to run; the first sweep's failed run counts


def test_a_run_and_a_sweep_never_share_a_folder(swept, data_flags, one_error_line, tmp_path):
    sweepdir = swept[0].resolve()
    before = sorted(p.name for p in sweepdir.iterdir())
    assert cli.main(["train", f"--config={LM}:{BASE}", f"--workdir={sweepdir}", "--noprogress",
                     *data_flags]) == 2
    assert one_error_line().endswith(
        f"{sweepdir} is a sweep's folder (its sweep.json; its runs are in {sweepdir / 'runs'}): "
        "give the run a --workdir of its own")
    assert sorted(p.name for p in sweepdir.iterdir()) == before
    # nor do a run and a folder of runs (its runs/, a plot's copies), a checkout or a package
    runs = sweepdir / "runs"
    held = sorted(p.name for p in runs.iterdir() if (p / "config.json").is_file())
    checkout, package = tmp_path / "checkout", tmp_path / "package"
    (checkout / ".git").mkdir(parents=True)
    package.mkdir()
    (package / "__init__.py").write_text("")
    for folder, says in [(runs, f"{runs} holds runs ({', '.join(held[:3])}"),
                         (checkout, f"{checkout} is a checkout (its .git), not a run's folder: "
                                    "give the run a --workdir of its own, e.g. runs/NAME"),
                         (package, "is a Python package (its __init__.py)")]:
        inside = sorted(p.name for p in folder.iterdir())
        assert cli.main(["train", f"--config={LM}:{BASE}", f"--workdir={folder}",
                         "--noprogress", *data_flags]) == 2
        assert says in one_error_line()
        assert sorted(p.name for p in folder.iterdir()) == inside
    run = sweepdir / "runs" / "encoding=rope"
    assert cli.main(["sweep", f"--config={LM}:{BASE},study=smoke", f"--workdir={run}",
                     "--print_commands", *data_flags]) == 2
    assert one_error_line().endswith(f"{run} holds a run (its config.json), not a sweep: give "
                                      "the sweep a --workdir of its own")
    assert not (run / "sweep.json").exists()


def test_the_plot_hint_is_a_command_to_paste_for_a_folder_with_a_space(swept, tmp_path,
                                                                       data_flags, capsys):
    sweepdir = tmp_path / "my sweep"
    shutil.copytree(swept[0], sweepdir)
    config = swept[0].parent / "sweep_config.py"
    capsys.readouterr()
    assert cli.main(["sweep", f"--config={config}:{BASE},study=smoke", f"--workdir={sweepdir}",
                     "--only=encoding=rope", *data_flags]) == 1  # the copied failed run counts
    assert f"plots: posjax plot {shlex.quote(str(sweepdir))}\n" in capsys.readouterr().out


def test_a_run_whose_files_say_it_finished_is_done_whatever_its_process_reported(tmp_path):
    # Ctrl-C as the run's process exited: its files are complete, so it is done, not
    # interrupted until someone runs `posjax sweep --status`.
    state = sweep.SweepState(tmp_path, LM, "smoke", extrapolate=False)
    fileio.write_json(tmp_path / "runs" / "encoding=rope" / "stages.json",
                  {"stages": [{"final_loss": 2.0}], "final_step": 4})
    fileio.write_json(tmp_path / "runs" / "encoding=rope" / "config.json", {})
    state.report(["encoding=rope"], executors.Outcome("interrupted", None, 5.0))
    entry = fileio.read_json(tmp_path / "sweep.json")["runs"]["encoding=rope"]
    assert (entry["status"], entry["summary"]["final_loss"]) == ("done", 2.0)


def test_the_sweep_bar_counts_only_the_runs_that_finished(tmp_path, monkeypatch):
    outcomes = {"encoding=rope": "done", "encoding=alibi": "interrupted"}

    def run(self, jobs, env, report):
        for job in jobs:
            report(job.name, None)
            report(job.name, executors.Outcome(outcomes[job.name], None, 1.0))

    counts = []

    class RecordedBar(sweep.tqdm):
        def close(self):
            counts.append((self.n, self.total))
            super().close()

    monkeypatch.setattr(executors.Local, "run", run)
    monkeypatch.setattr(sweep, "tqdm", RecordedBar)
    index = sweep.run_cli(f"{LM}:{BASE},study=smoke", tmp_path, extrapolate=False)
    assert {name: r["status"] for name, r in index["runs"].items()} == outcomes
    assert counts[0] == (1, 2)


def test_a_run_stopped_alone_is_named_and_the_sweep_exits_1(tmp_path, monkeypatch, capsys):
    """A signal to one run's process (not to the sweep): the sweep ran the other to the end,
    then exited 0 with nothing said of the unfinished run."""
    outcomes = {"encoding=rope": "done", "encoding=alibi": "interrupted"}

    def run(self, jobs, env, report):
        for job in jobs:
            report(job.name, None)
            report(job.name, executors.Outcome(outcomes[job.name], None, 1.0))

    monkeypatch.setattr(executors.Local, "run", run)
    assert cli.main(["sweep", f"--config={LM}:{BASE},study=smoke", f"--workdir={tmp_path}",
                     "--noextrapolate"]) == 1
    assert "interrupted: encoding=alibi: its process was stopped while the sweep ran on: " \
        "re-run the sweep to resume it" in capsys.readouterr().err.splitlines()


@pytest.mark.parametrize(("flags", "message"), [
    (["--lengths=0"], "--lengths=0: '0' is not a whole number >= 1"),
    (["--lengths=128.5"], "'128.5' is not a whole number >= 1"),
    (["--lengths=32,abc"], "'abc' is not a whole number >= 1"),
    (["--max_tokens=0"], "flag --max_tokens=0: 0 is not a positive integer"),
    (["--protocol=sliding", "--stride=0"], "flag --stride=0: 0 is not a positive integer"),
    (["--learned_extension=bogus"], "unknown learned_extension 'bogus'"),
])
def test_bad_extrapolate_flags_are_one_line_before_any_work(swept, capsys, flags, message):
    sweepdir, _, _ = swept
    rope = sweepdir / "runs" / "encoding=rope"
    before = {p.name: p.stat().st_mtime_ns for p in rope.iterdir()}
    assert cli.main(["extrapolate", f"--workdir={rope}", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert {p.name: p.stat().st_mtime_ns for p in rope.iterdir()} == before


@pytest.mark.parametrize(("flags", "message"), [
    (["--theta=abc"], "--theta=abc: 'abc' is not a rotary base > 1"),
    (["--theta=10000,1"], "'1' is not a rotary base > 1"),
    (["--theta=inf"], "'inf' is not a rotary base > 1"),  # it wrote nonsense and a null
    (["--dim=0"], "flag --dim=0: 0 is not"),
    # An empty value meant no base (an empty table) and no file name ("..png").
    (["--theta="], "--theta= gives no value: give one, or leave the flag out"),
    (["--output="], "--output= gives no value"),
    (["--output=."], "--output='.' names no file: give a path such as --output=runs/decay"),
    (["--output=runs/"], "--output='runs/' names no file"),
])
def test_bad_analyze_flags_are_one_line(tmp_path, capsys, monkeypatch, flags, message):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["analyze", "decay", f"--output={tmp_path}/decay", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not list(tmp_path.iterdir())


def test_analyze_output_of_an_existing_folder_is_refused(tmp_path, capsys):
    """--output=dec, a folder, wrote dec.png, dec.md and dec.json beside it."""
    (tmp_path / "dec").mkdir()
    assert cli.main(["analyze", "decay", f"--output={tmp_path / 'dec'}"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"posjax analyze: error: --output={tmp_path / 'dec'} is a folder: give the files' "
        f"path without their suffix, e.g. --output={tmp_path / 'dec' / 'decay'}")
    assert [p.name for p in tmp_path.iterdir()] == ["dec"]


def test_analyze_output_onto_a_runs_own_files_is_refused(tmp_path, capsys):
    """--output=RUN/config replaced the run's config.json with the decay table, exit 0: every
    later command on the run failed with KeyError: 'model'."""
    (tmp_path / "config.json").write_text("{}")  # a run's folder
    assert cli.main(["analyze", "decay", "--dim=16", f"--output={tmp_path}/config"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"--output={tmp_path}/config would write {tmp_path}/config.json, a file of the run in "
        f"{tmp_path}: give another name or folder")
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]
    assert (tmp_path / "config.json").read_text() == "{}"


@pytest.mark.parametrize("folder", ["decay.png", "decay.md", "decay.json"])
def test_analyze_output_onto_a_folder_writes_none_of_the_three(tmp_path, capsys, folder):
    """A folder named decay.md failed only after decay.png was written over."""
    (tmp_path / folder).mkdir()
    assert cli.main(["analyze", "decay", "--dim=16", "--max_distance=8",
                     f"--output={tmp_path}/decay"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{tmp_path}/{folder} is a folder: give another --output"), err
    assert [p.name for p in tmp_path.iterdir()] == [folder]


def test_a_sweep_with_parallel_0_is_refused(tmp_path, capsys):
    assert cli.main(["sweep", f"--config={LM}:{BASE},study=smoke", f"--workdir={tmp_path}/s",
                     "--parallel=0"]) == 2
    assert "flag --parallel=0: 0 is not a positive integer" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_tensorboard_gets_training_evaluation_extrapolation_and_hparams(swept,
                                                                        tensorboard_events):
    sweepdir, _, _ = swept
    tags = {value.tag for event in tensorboard_events(
        sweepdir / "runs" / "encoding=rope" / "tensorboard") for value in event.summary.value}
    assert {"loss", "tokens_per_sec", "first_step_s", "eval_loss", "eval_acc"} <= tags
    assert {"extrapolation/ppl", "extrapolation/loss", "extrapolation/acc"} <= tags
    assert {"_hparams_/experiment", "final/final_loss", "final/eval_loss"} <= tags


def test_the_first_step_is_timed_apart_and_config_json_records_provenance(swept):
    sweepdir, _, _ = swept
    run = sweepdir / "runs" / "encoding=rope"
    first = fileio.read_jsonl(run / "metrics.jsonl")[0]
    assert first["step"] == 1 and first["first_step_s"] > 0
    assert first["tokens_per_sec"] is None  # the compiling step alone is not a speed
    assert fileio.read_json(run / "stages.json")["stages"][0]["first_step_s"] > 0
    provenance = fileio.read_json(run / "config.json")["provenance"]
    assert provenance["versions"]["jax"] and provenance["platform"] == "cpu"
    assert provenance["device_count"] >= 1 and "git_commit" in provenance


def test_each_run_records_where_its_time_went(swept):
    """stages.json's seconds: setup, first steps, steps, held-out evaluation, checkpoints
    and scoring; sweep.json's summary carries them and each scored length its own."""
    sweepdir, _, _ = swept
    run = sweepdir / "runs" / "encoding=rope"
    seconds = fileio.read_json(run / "stages.json")["seconds"]
    assert set(seconds) == {"setup", "first_steps", "steps", "heldout_eval", "checkpoints",
                            "score"}
    assert all(value > 0 for value in seconds.values())
    entry = fileio.read_json(sweepdir / "sweep.json")["runs"]["encoding=rope"]
    assert entry["summary"]["seconds"] == seconds
    assert sum(seconds.values()) < entry["seconds"]  # start-up is the rest
    rows = fileio.read_json(run / "extrapolation.json")["lengths"]
    assert all(row["seconds"] > 0 for row in rows)


def test_plot_draws_one_run_from_its_own_directory(swept, tmp_path, capsys):
    sweepdir, _, _ = swept
    rope = sweepdir / "runs" / "encoding=rope"
    assert cli.main(["plot", str(rope), f"--output={tmp_path}"]) == 0
    assert (tmp_path / "extrapolation.png").exists()
    assert "\n| rope | " in (tmp_path / "extrapolation.md").read_text()


def test_plot_of_a_folder_that_is_neither_is_one_line(tmp_path, capsys):
    assert cli.main(["plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "has neither sweep.json nor config.json" in err and len(err.splitlines()) == 1


def test_evaluating_other_lengths_adds_rows_instead_of_replacing_the_file(swept):
    sweepdir, _, _ = swept
    rope = sweepdir / "runs" / "encoding=rope"
    evaluate(rope, rope_scaling="linear:2", lengths=[32])
    evaluate(rope, rope_scaling="linear:2", lengths=[64])
    result = json.loads((rope / "extrapolation_linear-2.json").read_text())
    assert [row["length"] for row in result["lengths"]] == [32, 64]
    again = evaluate(rope, rope_scaling="linear:2", lengths=[64])
    assert [row["length"] for row in again["lengths"]] == [32, 64]  # 64 replaced, 32 kept


def test_extrapolating_a_read_only_run_is_one_line_before_any_work(swept, capsys,
                                                                  monkeypatch):
    sweepdir, _, _ = swept
    rope = sweepdir / "runs" / "encoding=rope"
    before = {p.name: p.stat().st_mtime_ns for p in rope.iterdir()}
    real_access = fileio.os.access
    monkeypatch.setattr(fileio.os, "access",
                        lambda path, mode: Path(path) != rope and real_access(path, mode))
    assert cli.main(["extrapolate", f"--workdir={rope}", "--lengths=32"]) == 2
    assert f"{rope} is not writable" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in rope.iterdir()} == before


def test_a_sweep_becomes_a_study_as_docs_sweeps_md_records_one(swept, tmp_path, monkeypatch,
                                                               capsys):
    """docs/sweeps.md's "Recording a study": collect_results.py copies the runs' small files
    (no checkpoints) and draws the plots, `posjax report` fills the README's table and quoted
    numbers from them, and `--check` passes until a raw file changes under a quote. The
    sweep's failed run, which has no folder to collect, is named as failed: report refused
    the study as missing a run folder."""
    sweepdir, _, _ = swept
    monkeypatch.chdir(tmp_path)
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "collect_results.py"),
                           str(sweepdir), "experiments/toy"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    study = tmp_path / "experiments" / "toy"
    assert (study / "extrapolation.png").exists() and (study / "results" / "sweep.json").exists()
    assert not list((study / "results").rglob("checkpoints"))
    readme = study / "README.md"
    readme.write_text("# toy\n\n<!-- posjax:table experiments/toy -->\n<!-- /posjax:table -->\n\n"
                      "## Findings\n\nAt 64 tokens rope reaches <!-- v rope:ppl@64 -->0.00 "
                      "(<!-- v rope:ppl@64:lo -->0.00 to <!-- v rope:ppl@64:hi -->0.00).\n")
    capsys.readouterr()
    assert cli.main(["report", "experiments/toy"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "warning: 1 run(s) of experiments/toy/results failed and are left out of the plots and "
        "table: encoding=alibi,batch_size=1073741824 (sweep.json keeps each one's error)"]
    text = readme.read_text()
    assert "| rope |" in text and "| alibi |" in text
    run = study / "results" / "encoding=rope" / "extrapolation.json"
    result = fileio.read_json(run)
    ppl = next(row["ppl"] for row in result["lengths"] if row["length"] == 64)
    assert f"<!-- v rope:ppl@64 -->{ppl:.2f} (<!-- v rope:ppl@64:lo -->{ppl:.2f}" in text
    assert cli.main(["report", "experiments/toy", "--check"]) == 0
    for row in result["lengths"]:  # a raw file changed under the quote
        row["ppl"] *= 2
    fileio.write_json(run, result)
    assert cli.main(["report", "experiments/toy", "--check"]) == 1


def test_status_lists_the_runs_only_left_out_and_no_stale_loss(tmp_path, data_flags, capsys):
    """`--status` of a sweep run with --only listed the one run it trained, as if the sweep
    held no other; a run to redo showed the loss of the run whose folder was deleted."""
    sweepdir = tmp_path / "only"
    assert cli.main(["sweep", f"--config={LM}:study=smoke,smoke,seq_len=32,steps=2",
                     f"--workdir={sweepdir}", "--only=encoding=alibi", *data_flags]) == 0
    capsys.readouterr()
    assert cli.main(["sweep", f"--workdir={sweepdir}", "--status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("done         encoding=alibi  final_loss=")
    assert lines[1:] == ["pending      encoding=rope  not started (--only left it out): "
                         "re-run the sweep without --only"]
    # a run whose entry left sweep.json (edited by hand) was "not started (--only ...)" too
    recorded = fileio.read_json(sweepdir / "sweep.json")
    fileio.write_json(sweepdir / "sweep.json", {**recorded, "runs": {}})
    assert cli.main(["sweep", f"--workdir={sweepdir}", "--status"]) == 0
    assert "pending      encoding=alibi  not in sweep.json, but its folder holds the run: " \
           "re-run the sweep to take it up" in capsys.readouterr().out.splitlines()
    metrics = sweepdir / "runs" / "encoding=alibi" / "metrics.jsonl"
    trained = metrics.stat().st_mtime_ns
    assert cli.main(["sweep", f"--config={LM}:study=smoke,smoke,seq_len=32,steps=2",
                     f"--workdir={sweepdir}", "--only=encoding=alibi", *data_flags]) == 0
    assert fileio.read_json(sweepdir / "sweep.json")["runs"]["encoding=alibi"]["status"] == "done"
    assert metrics.stat().st_mtime_ns == trained  # taken up as it was, not trained again
    capsys.readouterr()
    shutil.rmtree(sweepdir / "runs" / "encoding=alibi")
    assert cli.main(["sweep", f"--workdir={sweepdir}", "--status"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "pending      encoding=alibi"


def test_a_sweeps_closing_lines_are_its_unfinished_runs(tmp_path, data_flags, capsys):
    """docs/sweeps.md: a sweep ends with `failed: NAME: ...`; the line came before the
    table and the "results in" line, where a scheduler's log tail did not show it."""
    config = tmp_path / "sweep_config.py"
    config.write_text(SWEEP_CONFIG)
    assert cli.main(["sweep", f"--config={config}:{BASE},study=smoke",
                     f"--workdir={tmp_path / 'out'}", "--only=encoding=alibi,batch_size=1073741824",
                     *data_flags]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[-1].startswith("results in ")
    assert err.splitlines()[-1].startswith("failed: encoding=alibi,batch_size=1073741824: "), err


@pytest.mark.parametrize("text", ["{}", "[]", '{"config": "c.py", "arg": "", "runs": [1]}',
                                  # an AttributeError traceback
                                  '{"config": "c.py", "arg": "", "runs": {"encoding=rope": '
                                  '{"status": "done", "summary": "x"}}}'])
def test_a_sweep_json_edited_into_another_shape_is_one_line_naming_it(tmp_path, text,
                                                                     one_error_line):
    """`{}` gave a KeyError: 'config' traceback from --status."""
    (tmp_path / "sweep.json").write_text(text)
    assert cli.main(["sweep", f"--workdir={tmp_path}", "--status"]) == 2
    assert one_error_line() == (
        f"posjax sweep: error: {tmp_path / 'sweep.json'} is not a sweep's record (it holds "
        "config, arg, runs, the runs by name): restore it from a copy (git checkout, a "
        "backup), or delete it and re-run the sweep's command (its runs' folders show which "
        "finished)")


@pytest.mark.parametrize(("override", "message"), [
    ("--config.data.text_glob=/nowhere/*.txt", "data.text_glob='/nowhere/*.txt' matches no "
     "files"),
    ("--config.train.learning_rate=-1", "train.learning_rate=-1 must be > 0"),
])
def test_an_override_every_run_would_fail_on_is_refused_as_the_sweep_plans(
        tmp_path, capsys, override, message):
    """The plan checked the runs' files and settings without the --config overrides, so a
    glob matching nothing or a bad rate failed each run in turn, 2 of 2 runs started."""
    extra = ["--config.data.dataset=local_text"] * ("text_glob" in override)
    assert cli.main(["sweep", f"--config={LM}:smoke", f"--workdir={tmp_path / 's'}", *extra,
                     override]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"posjax sweep: error: {message}") and "\n" not in err, err
    assert not (tmp_path / "s").exists()


def test_plot_of_a_sweep_planned_only_says_to_run_the_sweep(tmp_path, capsys):
    """`posjax plot` of a sweep folder written by --print_commands said to run `posjax
    extrapolate --workdir=RUNDIR`, for runs that do not exist."""
    folder = tmp_path / "planned"
    assert cli.main(["sweep", f"--config={LM}:smoke", f"--workdir={folder}",
                     "--print_commands"]) == 0
    capsys.readouterr()
    assert cli.main(["plot", str(folder)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"posjax plot: error: {folder} has no evaluation results yet: train and score its runs "
        f"with its sweep, `posjax sweep --config={LM}:smoke --workdir={folder}`")
    # a run trained, not scored: it said `--workdir=RUNDIR`, the folder just given
    run = tmp_path / "run"
    fileio.write_json(run / "config.json", config_json(configured(f"{LM}:smoke", [])))
    assert cli.main(["plot", str(run)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"has no evaluation results yet: run `posjax extrapolate --workdir={run}` first")


def test_a_sweep_that_plans_no_run_is_refused(tmp_path):
    """configs/text_image.py:encodings=rope_mixed planned 0 runs: rc 0 and "results in"."""
    config = tmp_path / "picky.py"
    config.write_text("from configs.lm import DEFAULTS, get_config\n\n\n"
                      "def sweep(add, arg=''):\n"
                      "    for encoding in ('rope', 'alibi'):\n"
                      "        if encoding in arg:\n"
                      "            add(encoding=encoding)\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(config))}'s sweep plans no run for "
                       r"the arg 'smoke': give values its sweep\(\) has points for \(see its "
                       r"docstring\)$"):
        sweep.expand(str(config), "smoke")


def test_slurms_local_cluster_keeps_at_most_parallel_tasks_running():
    """--executor=slurm --slurm_cluster=local --parallel=2 ran 4 runs at once: submitit's
    local executor ignores slurm_array_parallelism. Each run is reported running when it is
    submitted, not while it waits."""
    from posjax.launch import executors

    class Handle:
        def __init__(self, name):
            self.name, self.polls = name, 0

        def done(self):
            self.polls += 1
            return self.polls >= 2

        def result(self):
            return executors.Outcome("done", "", 0.0)

    jobs = [executors.Job(f"run{k}", f"/w/runs/run{k}", ()) for k in range(5)]
    events, running = [], set()

    def report(name, outcome):
        (running.add if outcome is None else running.discard)(name)
        events.append((name, None if outcome is None else outcome.status, len(running)))

    executors._submit_windowed(Handle, jobs, 2, report, poll_s=0)
    assert max(count for _, _, count in events) == 2
    assert [name for name, status, _ in events if status is None] == [j.name for j in jobs]
    assert sorted(name for name, status, _ in events if status == "done") == [
        j.name for j in jobs]
