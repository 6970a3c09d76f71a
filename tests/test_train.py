"""End-to-end training through `posjax train` on tiny configs: what a run writes, length
stages, resuming (after completion, after SIGKILL: bit for bit), config changes, divergence,
and data parallelism over 8 simulated devices.

Runs call `posjax.cli.main` in-process (shared jit caches keep them to seconds); the kill and
the 8-device run need their own processes. Every run reads a small slice of the stdlib corpus
built once per session (conftest.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from posjax import cli, io
from posjax.errors import ConfigError
from posjax.experiment import Experiment, load_config
from posjax.train import trainer

pytestmark = pytest.mark.slow

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
MLM = str(Path(__file__).resolve().parents[1] / "configs" / "mlm.py")
# Most runs share this setting (and so one compiled train step): batch 8 also splits over
# 8 simulated devices; 24 steps leave time to kill a run after its checkpoint at step 4.
TINY = "smoke,seq_len=32,batch_size=8,steps=24"
EVERY_STEP = ("--config.train.checkpoint_every_steps=4", "--config.train.log_every_steps=1")
STEPS = 24


def train_argv(workdir, data_flags, arg=TINY, *overrides, config=LM) -> list[str]:
    return ["train", f"--config={config}:{arg}", f"--workdir={workdir}", "--noprogress",
            *data_flags, *overrides]


def train(workdir, data_flags, arg=TINY, *overrides, config=LM) -> int:
    return cli.main(train_argv(workdir, data_flags, arg, *overrides, config=config))


def final_params(workdir):
    return Experiment.from_workdir(workdir).restore(workdir)


def assert_params_equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def checkpoint_steps(workdir) -> list[int]:
    return sorted(int(p.name) for p in (Path(workdir) / "checkpoints").iterdir()
                  if p.name.isdigit())


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, data_flags) -> Path:
    """A finished run of TINY, logged every step, checkpointed every 4 steps."""
    workdir = tmp_path_factory.mktemp("smoke") / "run"
    assert train(workdir, data_flags, TINY, *EVERY_STEP) == 0
    return workdir


# --- what a run writes ------------------------------------------------------------------


def test_smoke_run_writes_config_metrics_stages_checkpoints_and_events(smoke_run):
    config = io.read_json(smoke_run / "config.json")
    assert config["encoding"]["name"] == "rope"
    assert config["train"]["stages"] == [[32, 8, STEPS]]
    rows = io.read_jsonl(smoke_run / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    for row in rows:
        assert {"step", "stage", "seq_len", "loss", "acc", "lr", "tokens_per_sec"} <= set(row)
        assert row["stage"] == 1 and row["seq_len"] == 32
        assert np.isfinite(row["loss"]) and 0.0 <= row["acc"] <= 1.0 and row["lr"] >= 0.0
    stages = io.read_json(smoke_run / "stages.json")
    assert stages["final_step"] == STEPS
    assert [(s["stage"], s["seq_len"], s["steps"]) for s in stages["stages"]] == [(1, 32, STEPS)]
    assert stages["stages"][0]["final_loss"] == rows[-1]["loss"]
    assert checkpoint_steps(smoke_run)[-1] == STEPS
    assert list((smoke_run / "tensorboard").glob("events.out.tfevents.*"))


def test_rerun_after_completion_takes_no_more_steps(smoke_run, data_flags):
    before = (smoke_run / "metrics.jsonl").read_text()
    params = final_params(smoke_run)
    assert train(smoke_run, data_flags, TINY, *EVERY_STEP) == 0
    assert (smoke_run / "metrics.jsonl").read_text() == before
    assert checkpoint_steps(smoke_run)[-1] == STEPS
    assert_params_equal(final_params(smoke_run), params)


def test_resume_with_a_changed_config_is_refused_unless_forced(smoke_run, tmp_path, data_flags,
                                                               capsys):
    config = load_config(smoke_run)
    config.train.learning_rate *= 10
    with pytest.raises(ConfigError, match="different config.*learning_rate.*--force"):
        trainer.train(config, smoke_run, progress=False)
    # The same through the CLI: exit code 2, one line, nothing changed.
    assert train(smoke_run, data_flags, TINY + ",learning_rate=0.1", *EVERY_STEP) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert io.read_json(smoke_run / "config.json")["train"]["learning_rate"] == 2e-3
    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy)
    trainer.train(config, copy, force=True, progress=False)
    assert io.read_json(copy / "config.json")["train"]["learning_rate"] == pytest.approx(2e-2)


def test_two_stages_run_in_order_and_are_summarised(tmp_path, data_flags):
    # The second stage has TINY's shapes and schedule, so it reuses smoke_run's compile.
    stages = "--config.train.stages=((16,8,12),(32,8,12))"
    assert train(tmp_path, data_flags, TINY, stages, *EVERY_STEP) == 0
    rows = io.read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [(r["stage"], r["seq_len"]) for r in rows] == [(1, 16)] * 12 + [(2, 32)] * 12
    summary = io.read_json(tmp_path / "stages.json")
    assert [(s["stage"], s["seq_len"], s["steps"]) for s in summary["stages"]] == [
        (1, 16, 12), (2, 32, 12)]
    for stage in summary["stages"]:
        assert np.isfinite(stage["final_loss"]) and 0.0 <= stage["final_acc"] <= 1.0
        assert np.isfinite(stage["eval_loss"])
    assert summary["final_step"] == STEPS


# --- resuming after SIGKILL -------------------------------------------------------------


def tensorboard_session_starts(logdir: Path) -> list[int]:
    """Steps of the SessionLog START events (TensorBoard's purge markers) in a log dir's
    event files, read as TFRecords: uint64 length, uint32 crc, the Event proto, uint32 crc."""
    from tensorboardX.proto import event_pb2

    steps = []
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        raw, offset = path.read_bytes(), 0
        while offset < len(raw):
            length = int.from_bytes(raw[offset:offset + 8], "little")
            event = event_pb2.Event.FromString(raw[offset + 12:offset + 12 + length])
            offset += 16 + length
            if event.HasField("session_log") and event.session_log.status == 1:  # START
                steps.append(event.step)
    return steps


def test_resume_after_sigkill_matches_an_uninterrupted_run_exactly(tmp_path, data_flags,
                                                                   smoke_run):
    argv = train_argv(tmp_path, data_flags, TINY, *EVERY_STEP)
    proc = subprocess.Popen([sys.executable, "-m", "posjax.cli", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Kill between checkpoints: after step 4's is complete (orbax renames it into place).
        while proc.poll() is None:
            rows = io.read_jsonl(tmp_path / "metrics.jsonl")
            if (tmp_path / "checkpoints" / "4").is_dir() and rows and rows[-1]["step"] >= 5:
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert io.read_jsonl(tmp_path / "metrics.jsonl")[-1]["step"] < STEPS
    restored = max(checkpoint_steps(tmp_path))
    assert cli.main(argv) == 0  # the same command again
    # TensorBoard is told to hide the killed run's events past the restored step.
    assert restored + 1 in tensorboard_session_starts(tmp_path / "tensorboard")

    assert_params_equal(final_params(tmp_path), final_params(smoke_run))
    # Rows past the restored checkpoint were dropped and redone on the same batches.
    rows = io.read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in rows] == [
        r["loss"] for r in io.read_jsonl(smoke_run / "metrics.jsonl")]


# --- divergence -------------------------------------------------------------------------


def test_nan_stops_the_run_naming_the_step_and_keeps_the_last_good_checkpoint(
        tmp_path, data_flags, capsys):
    argv = train_argv(tmp_path, data_flags, "smoke,seq_len=32,steps=6,learning_rate=1e30")
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nan/inf at step" in err, err
    bad_step = int(err.split("at step ")[1].split(";")[0])
    saved = checkpoint_steps(tmp_path)
    assert all(step < bad_step for step in saved)
    if saved:
        assert f"the last good checkpoint (step {max(saved)}) is kept" in err
        for leaf in jax.tree.leaves(final_params(tmp_path)):
            assert np.all(np.isfinite(leaf))
    else:
        assert "no checkpoint had been saved" in err
    config = cli._flags(argv[1:], cli._define_train, config=True).config
    with pytest.raises(trainer.TrainingDiverged, match=f"at step {bad_step};"):
        trainer.train(config, tmp_path, progress=False)


# --- data parallelism -------------------------------------------------------------------


def test_eight_simulated_devices_match_one_device(tmp_path, data_flags, smoke_run):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu")
    script = ("import jax, sys; from posjax import cli; assert jax.device_count() == 8; "
              "sys.exit(cli.main(sys.argv[1:]))")
    result = subprocess.run(
        [sys.executable, "-c", script, *train_argv(tmp_path, data_flags, TINY, *EVERY_STEP)],
        env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    # Data-parallel gradient sums may add in another order: close, not equal.
    for a, b in zip(jax.tree.leaves(final_params(tmp_path)),
                    jax.tree.leaves(final_params(smoke_run)), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        [r["loss"] for r in io.read_jsonl(tmp_path / "metrics.jsonl")],
        [r["loss"] for r in io.read_jsonl(smoke_run / "metrics.jsonl")], rtol=1e-5)


def test_batch_not_divisible_by_the_devices_is_a_config_error(tmp_path, data_flags,
                                                              monkeypatch, capsys):
    monkeypatch.setattr(jax, "device_count", lambda: 8)
    assert train(tmp_path / "run", data_flags, "smoke,batch_size=4") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "batch_size 4 is not divisible by the 8 devices" in err
    assert not (tmp_path / "run").exists()
