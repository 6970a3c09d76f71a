"""End-to-end training through `posjax train` on tiny configs: what a run writes, length
stages, resuming (after completion, after SIGKILL or a stop signal: bit for bit),
faults (torn metrics, an unreadable checkpoint, a full disk, a locked run, a failed start),
config changes, and divergence (data parallelism over devices and processes: test_distributed.py).

Runs call `posjax.launch.cli.main` in-process (shared jit caches keep them to seconds); the kill
needs its own process. Every run reads a small slice of the stdlib corpus
built once per session (conftest.py).
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from posjax import fileio, provenance, runlock
from posjax.config import load_config
from posjax.errors import ConfigError
from posjax.experiment import Experiment
from posjax.launch import cli
from posjax.runlock import RunLock
from posjax.train import optim, trainer
from posjax.train.checkpoint import Checkpoints, restore_params
from posjax.train.steps import NEVER, initial_state

pytestmark = pytest.mark.slow

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
MLM = str(Path(__file__).resolve().parents[1] / "configs" / "mlm.py")
# Most runs share this setting (and so one compiled train step); 24 steps leave time to
# kill a run after its checkpoint at step 4.
TINY = "smoke,seq_len=32,batch_size=8,steps=24"
EVERY_STEP = ("--config.train.checkpoint_every_steps=4", "--config.train.log_every_steps=1")
STEPS = 24


def train_argv(workdir, data_flags, arg=TINY, *overrides, config=LM) -> list[str]:
    return ["train", f"--config={config}:{arg}", f"--workdir={workdir}", "--noprogress",
            *data_flags, *overrides]


def train(workdir, data_flags, arg=TINY, *overrides, config=LM) -> int:
    return cli.main(train_argv(workdir, data_flags, arg, *overrides, config=config))


def final_params(workdir):
    return restore_params(Experiment.from_workdir(workdir), workdir)[1]


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


@pytest.mark.parametrize("progress", ["--progress", "--noprogress"])
def test_extrapolate_noprogress_prints_only_the_table(smoke_run, tmp_path, monkeypatch, capsys,
                                                      progress):
    """`posjax extrapolate --noprogress`, as `posjax train` takes it, was an unknown flag; a
    script that wants the table alone now gets no line of where scoring is."""
    from posjax.eval import evaluation

    monkeypatch.setattr(evaluation, "SLOW_SCORING_S", 0.0)  # every evaluation is slow
    assert cli.main(["extrapolate", f"--workdir={smoke_run}", "--lengths=32", progress,
                     f"--output={tmp_path / 'quick.json'}"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines()
            if line.startswith("posjax: text: ")]
    assert bool(said) == (progress == "--progress"), said


# --- what a run writes ------------------------------------------------------------------


def test_smoke_run_writes_config_metrics_stages_checkpoints_and_events(smoke_run):
    config = fileio.read_json(smoke_run / "config.json")
    assert config["encoding"]["name"] == "rope"
    assert config["train"]["stages"] == [[32, 8, STEPS]]
    rows = fileio.read_jsonl(smoke_run / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    for row in rows:
        assert {"step", "stage", "seq_len", "loss", "acc", "lr", "tokens_per_sec"} <= set(row)
        assert row["stage"] == 1 and row["seq_len"] == 32
        assert np.isfinite(row["loss"]) and 0.0 <= row["acc"] <= 1.0 and row["lr"] >= 0.0
    stages = fileio.read_json(smoke_run / "stages.json")
    assert stages["final_step"] == STEPS
    assert [(s["stage"], s["seq_len"], s["steps"]) for s in stages["stages"]] == [(1, 32, STEPS)]
    assert stages["stages"][0]["final_loss"] == rows[-1]["loss"]
    assert checkpoint_steps(smoke_run)[-1] == STEPS
    assert list((smoke_run / "tensorboard").glob("events.out.tfevents.*"))


def test_dropout_trains_and_a_rerun_draws_the_same_masks(tmp_path, data_flags, smoke_run):
    # The step's dropout stream is made inside value_and_grad: advancing the model's own
    # streams there was flax's TraceContextError (every run with model.dropout > 0 failed).
    def losses(name, *overrides):
        assert train(tmp_path / name, data_flags, TINY, EVERY_STEP[1], *overrides) == 0
        return [r["loss"] for r in fileio.read_jsonl(tmp_path / name / "metrics.jsonl")]

    dropped = losses("a", "--config.model.dropout=0.1")
    assert dropped == losses("b", "--config.model.dropout=0.1")  # the same masks again
    assert dropped != [r["loss"] for r in fileio.read_jsonl(smoke_run / "metrics.jsonl")]


@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_hugging_face_family_blocks_train_from_scratch(tmp_path, data_flags, arch):
    # The blocks posjax.pretrained loads checkpoints into, as a config of their own.
    workdir = tmp_path / arch
    assert train(workdir, data_flags, f"{TINY},arch={arch},layout=half",
                 "--config.train.log_every_steps=1") == 0
    losses = [row["loss"] for row in fileio.read_jsonl(workdir / "metrics.jsonl")]
    assert len(losses) == STEPS and np.isfinite(losses).all() and losses[-1] < losses[0]
    params = final_params(workdir)
    attn = params["backbone"]["layers"][0]["attn"]
    assert ("bias" in attn["query"]) == (arch == "gpt_neox")
    assert attn["key"]["kernel"].shape[-2] == (1 if arch == "llama" else 2)


def test_another_optimizer_by_name_trains_and_resumes(tmp_path, data_flags, smoke_run):
    # train.optimizer and its JSON arguments reach the train step and its checkpoints
    workdir = tmp_path / "sgd"
    chosen = ("--config.train.optimizer=sgd", '--config.train.optimizer_args={"momentum": 0.9}',
              "--config.train.log_every_steps=1")
    assert train(workdir, data_flags, TINY, *chosen) == 0
    losses = [row["loss"] for row in fileio.read_jsonl(workdir / "metrics.jsonl")]
    assert len(losses) == STEPS and np.isfinite(losses).all()
    assert losses != [r["loss"] for r in fileio.read_jsonl(smoke_run / "metrics.jsonl")]
    assert load_config(workdir).train.optimizer == "sgd"
    assert train(workdir, data_flags, TINY, *chosen) == 0  # the same command resumes it


def test_rerun_after_completion_takes_no_more_steps(smoke_run, data_flags):
    before = (smoke_run / "metrics.jsonl").read_text()
    params = final_params(smoke_run)
    assert train(smoke_run, data_flags, TINY, *EVERY_STEP) == 0
    assert (smoke_run / "metrics.jsonl").read_text() == before
    assert checkpoint_steps(smoke_run)[-1] == STEPS
    assert_params_equal(final_params(smoke_run), params)


def test_a_resumed_run_says_from_which_step(smoke_run, tmp_path, data_flags, capsys):
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run)
    shutil.rmtree(run / "checkpoints" / str(STEPS))
    assert train(run, data_flags, TINY, *EVERY_STEP) == 0
    out = capsys.readouterr().out
    assert f"posjax train: resumed from step {STEPS - 4} of {STEPS}\n" in out
    assert out.endswith(f"posjax train: results in {run} (config.json, metrics.jsonl, "
                        f"stages.json, checkpoints/); evaluate with posjax extrapolate "
                        f"--workdir={run} (or train with --extrapolate), then compare runs "
                        f"with posjax plot {run} OTHER_RUNDIR...\n")
    assert train(run, data_flags, TINY, *EVERY_STEP, "--extrapolate",
                 "--config.eval.lengths=(32,)") == 0
    out = capsys.readouterr().out
    assert f"posjax train: resumed from step {STEPS} of {STEPS} (training had finished)\n" in out
    # the table, as posjax extrapolate prints it (it wrote the file and said nothing of it)
    assert "| length | loss | ppl | acc |\n|---|---|---|---|\n| 32 | " in out
    assert f"posjax train: wrote {run / 'extrapolation.json'}\n" in out
    assert out.endswith(f"; compare runs with posjax plot {run} OTHER_RUNDIR...\n")


def test_a_repeated_command_on_a_finished_run_keeps_its_record_and_scores_once(
        smoke_run, tmp_path, data_flags, capsys):
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run)
    trained = fileio.read_json(run / "stages.json")
    argv = (data_flags, TINY, *EVERY_STEP, "--extrapolate", "--config.eval.lengths=(32,)")
    assert train(run, *argv) == 0  # finished unscored: scored now, its training record kept
    scored = fileio.read_json(run / "stages.json")
    assert scored["seconds"] == {**trained["seconds"], "score": scored["seconds"]["score"]}
    assert f"posjax train: wrote {run / 'extrapolation.json'}\n" in capsys.readouterr().out
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and "lock" not in p.name}
    assert train(run, *argv) == 0  # the same command again: nothing redone
    out = capsys.readouterr().out
    assert (f"posjax train: {run} was scored when it finished; posjax extrapolate "
            f"--workdir={run} scores it again\n") in out
    assert "wrote" not in out
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and "lock" not in p.name}
    assert sorted(map(str, set(after) ^ set(files))) == []
    assert [str(p) for p in files if files[p] != after[p]] == []
    # trained on with --force: its result scored an earlier step, and is scored again (it
    # said "was scored when it finished" and kept the old numbers)
    longer = f"--config.train.stages=((32,8,{STEPS + 4}),)"
    assert train(run, data_flags, TINY, longer, "--force") == 0
    assert train(run, data_flags, TINY, longer, "--extrapolate",
                 "--config.eval.lengths=(32,)") == 0
    assert f"posjax train: wrote {run / 'extrapolation.json'}\n" in capsys.readouterr().out
    assert fileio.read_json(run / "extrapolation.json")["step"] == STEPS + 4


def test_the_progress_bar_is_timed_from_after_the_first_steps_compilation(
        tmp_path, data_flags, monkeypatch, capsys):
    compile_s, bars, first_call = 2.0, [], []
    real_step = trainer.train_step

    def slow_first_step(*args, **kwargs):  # as a long compilation of the first step would be
        if not first_call:
            first_call.append(time.sleep(compile_s))
        return real_step(*args, **kwargs)

    class RecordedBar(trainer.tqdm):
        def close(self):
            bars.append(self.format_dict["elapsed"])
            super().close()

    monkeypatch.setattr(trainer, "train_step", slow_first_step)
    monkeypatch.setattr(trainer, "tqdm", RecordedBar)
    begin = time.perf_counter()
    argv = [arg for arg in train_argv(tmp_path / "run", data_flags) if arg != "--noprogress"]
    assert cli.main(argv) == 0
    wall = time.perf_counter() - begin
    assert bars and bars[0] < wall - compile_s, (bars, wall)
    assert "the bar's rate and tokens/s are timed from the next step" in capsys.readouterr().out


def test_a_stage_of_one_step_says_no_rate_is_timed(tmp_path, data_flags, capsys):
    assert train(tmp_path / "run", data_flags, "smoke,seq_len=32,batch_size=8,steps=1") == 0
    assert "s (with the compilation of its program, where no earlier stage of its shape " \
        "compiled it)" in (out := capsys.readouterr().out)
    assert "it was the stage's last, so no rate is timed" in out and "next step" not in out


def test_a_damaged_metrics_line_is_refused_and_no_row_after_it_is_lost(
        smoke_run, tmp_path, data_flags, capsys):
    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy)
    lines = (copy / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines[1] = lines[1][:12] + "\n"
    damaged = "".join(lines)
    (copy / "metrics.jsonl").write_text(damaged)
    assert train(copy, data_flags, TINY, *EVERY_STEP) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"line 2 of {len(lines)} is not valid JSON" in err
    assert (copy / "metrics.jsonl").read_text() == damaged


def test_a_finished_run_whose_stages_json_was_deleted_is_one_line_and_stays_unfinished(
        smoke_run, tmp_path, data_flags, capsys):
    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy)
    (copy / "stages.json").unlink()
    assert train(copy, data_flags, TINY, *EVERY_STEP) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.endswith(
        f"{copy / 'stages.json'} has no record of stage 1, which its checkpoint at step "
        f"{STEPS} finished (the file was deleted or edited): restore it from a copy, or "
        "train the run again in a new --workdir"), err
    assert "final_step" not in fileio.read_json(copy / "stages.json", {})


def test_a_damaged_result_is_one_line_that_says_to_delete_it_not_taken_for_a_score(
        smoke_run, tmp_path, data_flags, capsys):
    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy)
    (copy / "extrapolation.json").write_text('{"lengths": [{"len')
    argv = (data_flags, TINY, *EVERY_STEP, "--extrapolate", "--config.eval.lengths=(32,)")
    assert train(copy, *argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "extrapolation.json is not valid JSON" in err
    assert err.endswith("or delete it and re-run the command that wrote it"), err
    (copy / "extrapolation.json").unlink()  # as the line says: then scored again
    assert train(copy, *argv) == 0
    assert fileio.read_json(copy / "extrapolation.json")["lengths"][0]["length"] == 32


def test_a_damaged_config_json_says_how_to_resume_and_doing_so_resumes(
        smoke_run, tmp_path, data_flags, capsys):
    """It said to delete it and re-run the command; the re-run then refused: "holds a run's
    checkpoints but no config.json ... or --force"."""
    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy)
    (copy / "config.json").write_text('{"encoding": {"na')
    assert train(copy, data_flags, TINY) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.endswith(
        "or delete it and re-run the train command with --force to resume its checkpoints with "
        "that command's config (a run that had finished: train it again in a new --workdir)"), err
    (copy / "config.json").unlink()
    longer = f"--config.train.stages=((32,8,{STEPS + 4}),)"  # a run with steps left to train
    assert train(copy, data_flags, TINY, longer, "--force") == 0
    assert fileio.read_json(copy / "stages.json")["final_step"] == STEPS + 4


def test_a_config_json_with_text_for_a_number_is_one_line(smoke_run, tmp_path, capsys):
    """`"num_heads": "two"`, edited by hand: a TypeError deep in the model."""
    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy)
    saved = fileio.read_json(copy / "config.json")
    saved["model"]["num_heads"] = "two"
    fileio.write_json(copy / "config.json", saved)
    assert cli.main(["extrapolate", f"--workdir={copy}", "--lengths=32"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"posjax extrapolate: error: {copy / 'config.json'}'s model.num_heads='two' is text "
        "where posjax writes a number (edited by hand): restore it from a copy (git checkout, "
        "a backup)")


def _extrapolate_stopped_in(module, name: str, after: bool, smoke_run, tmp_path, data_flags,
                            capsys, monkeypatch) -> Path:
    """`train --extrapolate` (exit 130) on a copy of the smoke run, stopped by a
    KeyboardInterrupt in module.name: in place of it, or `after` it ran; the copy."""
    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy)
    original = getattr(module, name)

    def stopped(*args, **kwargs):
        if after:
            original(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(module, name, stopped)
    capsys.readouterr()
    argv = (data_flags, TINY, *EVERY_STEP, "--extrapolate", "--config.eval.lengths=(32,)")
    assert train(copy, *argv) == 130
    return copy


def test_a_stop_after_training_and_scoring_finished_says_nothing_is_left_to_resume(
        smoke_run, tmp_path, data_flags, capsys, monkeypatch):
    """A stop that landed after `train --extrapolate` had written its result (while the
    summary printed) said "re-run the same command to resume"."""
    copy = _extrapolate_stopped_in(trainer, "train", True, smoke_run, tmp_path, data_flags,
                                   capsys, monkeypatch)
    assert capsys.readouterr().err.strip() == (
        "posjax train: interrupted after training finished and scored: nothing is left to "
        f"resume; results in {copy}")
    assert (copy / "extrapolation.json").is_file()


def test_a_stop_while_scoring_a_finished_run_says_the_re_run_scores_it(
        smoke_run, tmp_path, data_flags, capsys, monkeypatch):
    """A stop during `train --extrapolate`'s scoring, its training finished, said "re-run
    the same command to resume" (docs/sweeps.md: it says nothing of it was written)."""
    from posjax.eval import evaluation

    copy = _extrapolate_stopped_in(evaluation, "evaluate_trained", False, smoke_run, tmp_path,
                                   data_flags, capsys, monkeypatch)
    assert capsys.readouterr().err.strip() == (
        f"posjax train: interrupted while scoring {copy}, whose training had finished: "
        "nothing of its evaluation was written; re-run the same command to score it")
    assert not (copy / "extrapolation.json").exists()


def test_a_stop_after_the_result_was_written_says_nothing_is_left_to_resume(
        smoke_run, tmp_path, data_flags, capsys, monkeypatch):
    """A stop that landed inside the scoring after its result file was written said "nothing
    of its evaluation was written; re-run the same command to score it", and the re-run then
    said it was scored already."""
    from posjax.eval import evaluation

    copy = _extrapolate_stopped_in(evaluation, "evaluate_trained", True, smoke_run, tmp_path,
                                   data_flags, capsys, monkeypatch)
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "posjax train: interrupted after training finished and scored: nothing is left to "
        f"resume; results in {copy}")
    assert (copy / "extrapolation.json").is_file()


def test_a_failed_scoring_of_a_finished_run_says_its_training_is_kept(
        smoke_run, tmp_path, data_flags, capsys, monkeypatch):
    """`train --extrapolate` whose scoring failed (an encoding's bias of the wrong size past
    the training length) printed only the scoring's error, read as training's failure."""
    from posjax.eval import evaluation

    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy)

    def refused(*args, **kwargs):
        raise ConfigError("encoding 'tbl_bias': bias returned shape [2, 128, 128], expected "
                          "[2, 512, 512]")

    monkeypatch.setattr(evaluation, "evaluate_trained", refused)
    capsys.readouterr()
    argv = (data_flags, TINY, *EVERY_STEP, "--extrapolate", "--config.eval.lengths=(32,)")
    assert train(copy, *argv) == 2
    step = fileio.read_json(copy / "stages.json")["final_step"]
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"posjax train: error: {copy} finished training (its checkpoint at step {step} is "
        "saved), then scoring it failed: encoding 'tbl_bias': bias returned shape [2, 128, "
        f"128], expected [2, 512, 512]; score it with `posjax extrapolate --workdir={copy}` "
        "and the flags that fix that")


def test_a_read_only_run_is_scored_into_a_writable_output_and_left_untouched(
        smoke_run, tmp_path, data_flags, monkeypatch):
    """A run on a read-only mount, scored with --output elsewhere, failed on its .lock and
    told the user to point --output at a writable folder, which they had. (As root, where
    permissions do not bind, the run reads as unwritable through os.access.)"""
    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy, ignore=shutil.ignore_patterns(".lock"))
    before = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    for path in [copy, *copy.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: access(path, mode) and not (
        mode & os.W_OK and Path(path).resolve().is_relative_to(copy)))
    try:
        assert cli.main(["extrapolate", f"--workdir={copy}", "--lengths=32,64",
                         f"--output={tmp_path / 'scored.json'}"]) == 0
    finally:
        for path in [copy, *copy.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
    result = fileio.read_json(tmp_path / "scored.json")
    assert [row["length"] for row in result["lengths"]] == [32, 64]
    assert result["tensorboard_events"] == []
    after = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    assert after == before


def test_resume_with_a_changed_config_is_refused_unless_forced(smoke_run, tmp_path, data_flags,
                                                               capsys):
    """--force replaced config.json with no trace of the earlier one and resumed on another
    learning-rate schedule without a word."""
    config = load_config(smoke_run)
    config.train.learning_rate *= 10
    with pytest.raises(ConfigError, match="different config.*learning_rate.*--force"):
        trainer.train(config, smoke_run, progress=False)
    # The same through the CLI: exit code 2, one line, nothing changed.
    assert train(smoke_run, data_flags, TINY + ",learning_rate=0.1", *EVERY_STEP) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert fileio.read_json(smoke_run / "config.json")["train"]["learning_rate"] == 2e-3
    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy)
    # --force on the finished run, with no step to train: it relabelled the weights
    with pytest.raises(ConfigError, match=f"^{copy} has trained {STEPS} steps, and the new "
                       r"config \(train.learning_rate: 0.002 -> 0.02\) trains none past them: "
                       "--force would only relabel its weights with that config: use a new "
                       "--workdir, or give the new config more steps$"):
        trainer.train(config, copy, force=True, progress=False)
    assert fileio.read_json(copy / "config.json") == fileio.read_json(smoke_run / "config.json")
    # with more steps, it resumes with the new config, says so with the learning rate's jump,
    # and keeps the config.json it replaced in forced.json
    before = fileio.read_json(copy / "config.json")
    config.train.stages = ((*config.train.stages[0][:2], STEPS + 2),)
    capsys.readouterr()
    trainer.train(config, copy, force=True, progress=False)
    assert fileio.read_json(copy / "config.json")["train"]["learning_rate"] == pytest.approx(2e-2)
    assert checkpoint_steps(copy)[-1] == STEPS + 2
    out = capsys.readouterr().out
    new_rate = float(optim.schedule(config.train, STEPS + 2)(STEPS))
    assert (f"posjax train: resumed from step {STEPS} of {STEPS + 2} with --force's changed "
            f"config (train.learning_rate: 0.002 -> 0.02, train.stages: [[32, 8, {STEPS}]] "
            f"-> [[32, 8, {STEPS + 2}]]): the learning rate at step {STEPS} is {new_rate:.3g} "
            "(the old schedule's: 0); the old config.json is kept in "
            f"{copy / 'forced.json'}\n") in out
    forced = fileio.read_json(copy / "forced.json")
    assert [(f["step"], f["config"]) for f in forced] == [(STEPS, before)]
    assert forced[0]["changes"][0] == "train.learning_rate: 0.002 -> 0.02"


@pytest.mark.parametrize("change", ["encoding=learned", "mlp_dim=80"])
def test_force_with_a_model_its_checkpoint_cannot_hold_is_refused_and_loses_nothing(
        smoke_run, tmp_path, data_flags, capsys, change):
    """--force with another model's shapes took the whole checkpoint for unreadable: moved
    it aside, trained from step 0 and wrote the new config.json, exit 0."""
    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy)
    before = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    arg = f"smoke,seq_len=32,batch_size=8,steps={STEPS + 2},{change}"
    assert train(copy, data_flags, arg, "--force") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"posjax train: error: checkpoint step {STEPS} in {copy}/checkpoints "
                          "is whole, but its training state is shaped otherwise than this "
                          "config's ("), err
    assert err.endswith("): a changed model or optimizer cannot resume it: use a new --workdir")
    assert "Truncating" not in err  # Orbax's first sentence only
    assert len(err.splitlines()) == 1
    after = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    assert {k: v for k, v in after.items() if k.name != ".lock"} == {
        k: v for k, v in before.items() if k.name != ".lock"}


def test_a_changed_encoding_is_named_first_among_the_differences(smoke_run, capsys):
    """rope -> alibi listed rope's hyperparameters going to None and left the name out."""
    config = load_config(smoke_run)
    config.encoding = {"name": "alibi"}
    with pytest.raises(ConfigError) as refused:
        trainer.check_resume(smoke_run, config, force=False)
    assert f"{smoke_run} holds a run with a different config (encoding.name: 'rope' -> " \
           "'alibi', " in str(refused.value)
    assert str(refused.value).endswith(
        "more): use a new --workdir, or --force to resume it with the new config")


def test_a_path_recorded_relative_resumes_from_the_folder_it_was_started_in(
        smoke_run, tmp_path, monkeypatch):
    """Runs trained before paths were recorded absolute keep a relative text_glob: resumed
    from their folder (the same files) they continue; from another folder they are refused,
    as the files would differ."""
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run)
    saved = fileio.read_json(run / "config.json")
    fileio.write_json(run / "config.json", {
        **saved, "data": {**saved["data"], "text_glob": "BOOKS/*.txt"}})
    monkeypatch.chdir(tmp_path)
    config = load_config(smoke_run)
    config.data.text_glob = str(tmp_path / "BOOKS" / "*.txt")
    trainer.check_resume(run, config, force=False)  # the same files: resumes
    monkeypatch.chdir(run)
    with pytest.raises(ConfigError, match="different config .data.text_glob"):
        trainer.check_resume(run, config, force=False)


def test_two_stages_run_in_order_and_are_summarised(tmp_path, data_flags):
    # The second stage has TINY's shapes and schedule, so it reuses smoke_run's compile.
    stages = "--config.train.stages=((16,8,12),(32,8,12))"
    assert train(tmp_path, data_flags, TINY, stages, *EVERY_STEP) == 0
    rows = fileio.read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [(r["stage"], r["seq_len"]) for r in rows] == [(1, 16)] * 12 + [(2, 32)] * 12
    summary = fileio.read_json(tmp_path / "stages.json")
    assert [(s["stage"], s["seq_len"], s["steps"]) for s in summary["stages"]] == [
        (1, 16, 12), (2, 32, 12)]
    for stage in summary["stages"]:
        assert np.isfinite(stage["final_loss"]) and 0.0 <= stage["final_acc"] <= 1.0
        assert np.isfinite(stage["eval_loss"])
    assert summary["final_step"] == STEPS


# --- resuming after SIGKILL -------------------------------------------------------------


def session_starts(events) -> list[int]:
    """Steps of the SessionLog START events (TensorBoard's purge markers) among `events`."""
    return [event.step for event in events
            if event.HasField("session_log") and event.session_log.status == 1]  # START


def test_writers_opened_in_the_same_second_keep_each_others_events(tmp_path, monkeypatch,
                                                                    tensorboard_events):
    # tensorboardX names event files by the second and the host: a resumed run's writer and
    # the hparams writer at its finish, both within one second, shared one file and the
    # second emptied it (the resumed run's purge marker vanished).
    from tensorboardX import event_file_writer

    monkeypatch.setattr(event_file_writer.time, "time", lambda: 1700000000.0)
    for purge_step in (1, 9):
        with fileio.summary_writer(tmp_path, purge_step=purge_step) as writer:
            writer.add_scalar("loss", 1.0, purge_step)
    assert sorted(session_starts(tensorboard_events(tmp_path))) == [1, 9]


def stop_after_checkpoint(workdir, argv, signum, storm_s: float = 0) -> tuple[int, str]:
    """Run `argv` in its own process and send it `signum` between checkpoints: after step
    4's is complete (orbax renames it into place), once, or with `storm_s` again and again
    for that many seconds or until it ends; its exit code and stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "posjax", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while proc.poll() is None:
            rows = fileio.read_jsonl(workdir / "metrics.jsonl")
            if (workdir / "checkpoints" / "4").is_dir() and rows and rows[-1]["step"] >= 5:
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the run ended before it could be stopped"
        proc.send_signal(signum)
        storm_end = time.monotonic() + storm_s
        while time.monotonic() < storm_end and proc.poll() is None:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert fileio.read_jsonl(workdir / "metrics.jsonl")[-1]["step"] < STEPS
    return proc.returncode, err


def assert_resumes_like_an_uninterrupted_run(workdir, argv, smoke_run, tensorboard_events):
    """`argv` re-run in `workdir` resumes it to the parameters and rows of `smoke_run`
    (tensorboard_events: the fixture)."""
    restored = max(checkpoint_steps(workdir))
    assert cli.main(argv) == 0  # the same command again
    # TensorBoard is told to hide the stopped run's events past the restored step.
    assert restored + 1 in session_starts(tensorboard_events(workdir / "tensorboard"))
    assert_params_equal(final_params(workdir), final_params(smoke_run))
    # Rows past the restored checkpoint were dropped and redone on the same batches.
    assert (workdir / "metrics.jsonl").read_text().endswith("\n")
    rows = fileio.read_jsonl(workdir / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in rows] == [
        r["loss"] for r in fileio.read_jsonl(smoke_run / "metrics.jsonl")]


def test_resume_after_sigkill_and_a_torn_line_matches_an_uninterrupted_run(
        tmp_path, data_flags, smoke_run, tensorboard_events):
    argv = train_argv(tmp_path, data_flags, TINY, *EVERY_STEP)
    code, _ = stop_after_checkpoint(tmp_path, argv, signal.SIGKILL)
    assert code == -signal.SIGKILL
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 9, "stage": 1, "lo')  # a write the kill tore
    assert_resumes_like_an_uninterrupted_run(tmp_path, argv, smoke_run, tensorboard_events)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_each_stop_signal_raises_one_keyboard_interrupt_and_later_ones_are_ignored(signum):
    """Ctrl-C, SIGTERM and SIGHUP take one path (runlock.interruptible), so the end-to-end
    tests below send one signal each and stand for all three. The exit code is the shell's
    for the first signal (SIGTERM gave 130, as Ctrl-C, where a scheduler expects 143)."""
    other = signal.SIGINT if signum != signal.SIGINT else signal.SIGTERM
    with runlock.interruptible("stopped"):
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signum)
        signal.raise_signal(other)  # while stopping: ignored
        with pytest.raises(KeyboardInterrupt):
            runlock.check_stop()
    assert signal.getsignal(signum) is not runlock._stop  # the handler before it is back
    runlock.check_stop()
    assert runlock.stopped_code() == 128 + signum
    with runlock.interruptible("stopped"):  # a new command: no signal taken yet
        assert runlock.stopped_code() == runlock.INTERRUPTED


def test_sigterm_stops_a_run_in_one_line_and_the_command_resumes_it(
        tmp_path, data_flags, smoke_run, tensorboard_events):
    argv = train_argv(tmp_path, data_flags, TINY, *EVERY_STEP)
    code, err = stop_after_checkpoint(tmp_path, argv, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM
    stopped = re.fullmatch(r"posjax train: interrupted at step (\d+): re-run the same command "
                           r"to resume from its checkpoint at step (\d+)",
                           err.strip().splitlines()[-1])
    assert stopped, err
    # Stopped between two steps, it saved the step it had reached: the re-run loses none.
    assert int(stopped[2]) == max(checkpoint_steps(tmp_path)) == int(stopped[1])
    assert "Traceback" not in err
    assert_resumes_like_an_uninterrupted_run(tmp_path, argv, smoke_run, tensorboard_events)


def test_a_storm_of_stop_signals_stops_a_run_in_the_line_of_the_first(tmp_path, data_flags):
    """Ctrl-C held down, or a scheduler's SIGTERMs: the signals after the first are ignored
    until the process ends, so its line and exit code are the first stop's. The start-up's
    handler came back once the command's block ended, and a later signal printed
    "interrupted while starting, before any work" for a run that had trained and saved."""
    code, err = stop_after_checkpoint(tmp_path, train_argv(tmp_path, data_flags, TINY,
                                                           *EVERY_STEP), signal.SIGTERM, 3)
    assert code == 128 + signal.SIGTERM
    stopped = re.fullmatch(r"posjax train: interrupted at step (\d+): re-run the same command "
                           r"to resume from its checkpoint at step (\d+)", err.strip())
    assert stopped, err
    assert int(stopped[2]) == max(checkpoint_steps(tmp_path)) == int(stopped[1])


def test_stop_signals_while_the_command_loads_print_its_line_once():
    """The start-up's handler ends the process in one line; a second signal landing inside
    its print printed the line again, glued to the first."""
    storm = ("import os, signal, threading\nfrom posjax import runlock\n"
             "runlock.stop_while_starting('train')\n"
             "threading.Thread(target=lambda: [os.kill(os.getpid(), signal.SIGTERM)\n"
             "                                 for _ in range(10 ** 6)]).start()\n"
             "threading.Event().wait(60)\n")
    done = subprocess.run([sys.executable, "-c", storm], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 128 + signal.SIGTERM
    assert done.stderr == ("posjax train: interrupted while starting, before any work: "
                           "re-run the command\n")


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="a CPU run's count of cores")
def test_a_run_resumed_on_another_number_of_cores_says_its_numbers_agree_to_rounding(
        tmp_path, data_flags, monkeypatch, capsys):
    """XLA:CPU splits its work by its threads: a run trained on 1 core and resumed on 2 (a
    sweep's re-run gives its last run every core) is not bit for bit its uninterrupted run."""
    argv = train_argv(tmp_path, data_flags, TINY, *EVERY_STEP)
    monkeypatch.setattr(provenance, "allowed_cores", lambda: 1)
    assert cli.main(argv) == 0
    shutil.rmtree(tmp_path / "checkpoints" / str(STEPS))
    monkeypatch.setattr(provenance, "allowed_cores", lambda: 2)
    capsys.readouterr()
    assert cli.main(argv) == 0
    assert (f"posjax train: resumed from step 20 of {STEPS}, on 2 CPU cores where it trained "
            "on 1: its numbers from here agree with an uninterrupted run's to float32 "
            "rounding, not bit for bit") in capsys.readouterr().out.splitlines()


def test_a_stop_signal_is_noted_within_a_training_loop_and_raised_by_the_next_check():
    with runlock.interruptible("stopped"), runlock.noted_until_checked():
        signal.raise_signal(signal.SIGTERM)  # mid-step: noted, not raised
        with pytest.raises(KeyboardInterrupt):
            runlock.check_stop()  # between two steps
    with runlock.interruptible("stopped"), pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGTERM)  # outside the loop: raised at once, as before


def test_a_checkpoint_between_two_rows_resumes_to_the_rows_of_an_uninterrupted_run(
        tmp_path, data_flags):
    """A checkpoint inside a metrics window (rows every 4 steps, checkpoints every 6; a
    wall-time or stop-signal checkpoint falls anywhere) keeps the window's sums: the row
    after the resumed step sums the same steps as before, not only those since the
    resumption."""
    argv = train_argv(tmp_path, data_flags, TINY, "--config.train.log_every_steps=4",
                      "--config.train.checkpoint_every_steps=6")
    assert cli.main(argv) == 0
    uninterrupted = fileio.read_jsonl(tmp_path / "metrics.jsonl")
    shutil.rmtree(tmp_path / "checkpoints" / str(STEPS))  # as a kill before its save left it
    assert max(checkpoint_steps(tmp_path)) == 18  # two steps into the window of row 20
    assert cli.main(argv) == 0
    rows = fileio.read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(4, STEPS + 1, 4))
    for key in ("loss", "acc", "grad_norm"):
        assert [r[key] for r in rows] == [r[key] for r in uninterrupted], key


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_while_the_command_loads_ends_it_in_one_line(tmp_path, data_flags,
                                                                   signum, catches_signal):
    """The `posjax` command takes its first second or two importing JAX, flax and grain;
    a stop then printed a traceback (Ctrl-C) or nothing at all (SIGTERM, rc 143)."""
    argv = train_argv(tmp_path / "run", data_flags)
    proc = subprocess.Popen([sys.executable, "-m", "posjax", *argv], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # Python itself catches SIGINT from its start; SIGTERM once posjax's entry point
        # runs, which then imports the command line for seconds.
        while not catches_signal(proc.pid, signal.SIGTERM):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.005)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum
    assert err.splitlines() == [
        "posjax train: interrupted while starting, before any work: re-run the command"]
    assert not (tmp_path / "run").exists()


# A run whose first step takes long (compiled, then run at 64k tokens: over a minute on 2 CPU
# cores); the notice of a slow first step comes after half a second, so the test knows the
# step has begun.
_SLOW_FIRST_STEP = """
import sys
from posjax.launch import cli
from posjax.train import trainer
trainer.SLOW_FIRST_STEP_S = 0.5
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_stop_signal_during_the_first_step_ends_the_run_at_once(tmp_path, data_flags):
    """Until the first step is done nothing is worth saving: the signal (Ctrl-C here; every
    stop signal wakes the same watcher) ends the process at once with the one line, where
    the process used to wait for the step in flight (minutes for a long sequence) or crash
    in the interpreter's exit."""
    argv = train_argv(tmp_path, data_flags, "smoke,seq_len=65536,batch_size=1,steps=1000",
                      "--config.train.eval_batches=0")
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_FIRST_STEP, *argv], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        notice = ""
        while "first step" not in notice:
            notice = proc.stdout.readline()
            assert notice or proc.poll() is None, proc.stderr.read()
        assert notice.startswith("stage 1: compiling the first step (seq_len 65536, batch 1)")
        time.sleep(3)  # past the compilation: the step runs, which the exit used to wait for
        signalled = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        stopped_after = time.perf_counter() - signalled
    finally:
        proc.kill()
    assert proc.returncode == runlock.INTERRUPTED
    assert err.strip().splitlines()[-1] == (
        "posjax train: interrupted at step 0, before its first checkpoint: the same command "
        "trains it again from step 0"), err
    assert err.count("interrupted") == 1 and "Traceback" not in err, err
    assert "" not in err.splitlines(), err  # no bar on a pipe: no new line before the line
    assert stopped_after < 5, stopped_after


def test_a_stop_signal_while_the_process_is_already_ending_returns_instead_of_hanging(
        monkeypatch):
    """The first signal's handler (or the watcher thread) holds the exit while it prints the
    line; a second signal's handler ran inside that print and waited on it forever (a sweep
    child, its sweep killed, hung with every thread asleep). Now it returns, raising
    nothing into the print, and the first caller ends the process."""
    exits = []
    monkeypatch.setattr(runlock.os, "_exit", exits.append)  # this test's process lives on
    runlock._AT_ONCE.set()
    try:
        with runlock._EXITING:  # the first caller, mid-print
            second = threading.Thread(target=runlock._stop, args=(signal.SIGTERM, None),
                                      daemon=True)
            second.start()
            second.join(timeout=10)
            assert not second.is_alive()
        assert exits == []
        assert not runlock._STOP.is_set()  # no KeyboardInterrupt under way either
    finally:
        runlock._AT_ONCE.clear()
        runlock._STOP.clear()


SIGNAL_STORM = """
import os, signal, threading, time
from posjax import runlock

def storm():
    end = time.monotonic() + 2
    while time.monotonic() < end:
        os.kill(os.getpid(), signal.SIGTERM)

sender = threading.Thread(target=storm, daemon=True)
with runlock.interruptible("stopped"), runlock.noted_until_checked():
    sender.start()
    while sender.is_alive():  # each command's block clears the stop: signals set it anew
        with runlock.interruptible("stopped"):
            pass
    time.sleep(0.2)
print("every signal handled")
"""


def test_stop_signals_landing_inside_each_others_handlers_never_hang_the_process():
    """A signal's handler runs between two bytecodes of whatever the main thread runs, its
    own handler included. The stop flag was a threading.Event, whose set() and clear() take
    a lock: a second SIGTERM landing while the first handler held it waited forever (a
    sweep's child, the sweep SIGKILLed, slept on with its run locked). Two seconds of
    SIGTERMs as fast as a thread sends them, while commands start and end: the process
    takes every one and goes on."""
    done = subprocess.run([sys.executable, "-c", SIGNAL_STORM], capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "every signal handled\n"), done.stderr


def test_a_stop_line_that_cannot_be_written_still_ends_the_process(monkeypatch):
    """A sweep child whose sweep was killed may find its stderr's reader gone: the failed
    print must not leave the process running with the exit taken."""
    class Gone:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    exits = []
    monkeypatch.setattr(runlock.os, "_exit", exits.append)
    monkeypatch.setattr(runlock, "_STOP_SIGNAL", [signal.SIGTERM])
    monkeypatch.setattr(sys, "stderr", Gone())
    try:
        with pytest.raises(BrokenPipeError):
            runlock._exit_at_once()
        assert exits == [128 + signal.SIGTERM]
    finally:
        runlock._EXITING.release()  # taken by the exit, which this test's process survived


class _SwallowsASignal:
    """Raises SIGTERM in its finaliser, where Python drops the handler's KeyboardInterrupt
    (as JAX's gc callback did to a sweep child's SIGTERM)."""

    def __del__(self):
        signal.raise_signal(signal.SIGTERM)


def test_a_stop_signal_dropped_by_a_finaliser_is_raised_again_by_check_stop():
    with runlock.interruptible():
        _SwallowsASignal()
        with pytest.raises(KeyboardInterrupt):
            runlock.check_stop()
        signal.raise_signal(signal.SIGTERM)  # later signals are ignored while stopping
    runlock.check_stop()  # leaving the block forgets the stop


def _after_steps(monkeypatch, count: int, then) -> list:
    """Call `then()` once the trainer has taken `count` steps (its window's `add`); the list
    that counts the steps taken."""
    calls = []
    add = trainer._Window.add

    def add_then(self, batch_sums):
        add(self, batch_sums)
        calls.append(1)
        if len(calls) == count:
            then()

    monkeypatch.setattr(trainer._Window, "add", add_then)
    return calls


def test_a_run_whose_sigterm_was_dropped_still_stops_at_the_next_step(
        tmp_path, data_flags, smoke_run, monkeypatch, capsys, tensorboard_events):
    calls = _after_steps(monkeypatch, 10, _SwallowsASignal)
    assert train(tmp_path, data_flags, TINY, *EVERY_STEP) == 128 + signal.SIGTERM
    assert len(calls) == 10
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        "posjax train: interrupted at step 10: re-run the same command to resume from its "
        "checkpoint at step 10")
    assert "Exception ignored" not in err and "Traceback" not in err, err
    monkeypatch.undo()
    assert_resumes_like_an_uninterrupted_run(
        tmp_path, train_argv(tmp_path, data_flags, TINY, *EVERY_STEP), smoke_run,
        tensorboard_events)


def test_a_run_stopped_before_its_first_checkpoint_saves_the_step_it_reached(
        tmp_path, data_flags, monkeypatch, capsys):
    """A stop between two steps saves the step reached, also before the run's first
    scheduled checkpoint (before, the re-run trained it again from step 0)."""
    _after_steps(monkeypatch, 5, lambda: signal.raise_signal(signal.SIGTERM))
    assert train(tmp_path, data_flags, TINY, "--config.train.checkpoint_every_steps=20",
                 "--config.train.log_every_steps=1") == 128 + signal.SIGTERM
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "posjax train: interrupted at step 5: re-run the same command to resume from its "
        "checkpoint at step 5")
    assert checkpoint_steps(tmp_path) == [5]


def test_a_run_stopped_after_its_last_step_says_its_training_is_saved(
        tmp_path, data_flags, monkeypatch, capsys):
    """A stop after the last step said "interrupted at step 24: re-run ... to resume from its
    checkpoint at step 24", where the re-run then said training had finished."""
    _after_steps(monkeypatch, STEPS, lambda: signal.raise_signal(signal.SIGTERM))
    assert train(tmp_path, data_flags, TINY, *EVERY_STEP) == 128 + signal.SIGTERM
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"posjax train: interrupted after its last step, {STEPS}, was saved: re-run the same "
        "command to finish what comes after training")
    assert checkpoint_steps(tmp_path)[-1] == STEPS
    monkeypatch.undo()
    assert train(tmp_path, data_flags, TINY, *EVERY_STEP) == 0
    assert "(training had finished)" in capsys.readouterr().out


def test_a_run_whose_folder_is_deleted_while_it_trains_stops_in_one_line(
        tmp_path, data_flags, monkeypatch, capsys):
    """`rm -rf RUN` mid-run: training went on into a folder the writers made again, exited 0
    and listed config.json among its results; the re-run refused the folder."""
    run = tmp_path / "run"
    _after_steps(monkeypatch, 5, lambda: shutil.rmtree(run))  # no checkpoint in flight
    assert train(run, data_flags, TINY, "--config.train.checkpoint_every_steps=20",
                 "--config.train.log_every_steps=1") == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"posjax train: error: {run} lost its config.json while the run trained (the folder "
        "was deleted or moved): stopped, to write no more into it; put the folder back and "
        "re-run the same command to resume, or train again with a new --workdir")


def test_an_unreadable_checkpoint_is_set_aside_with_one_warning_and_the_one_before_used(
        torn_copy, data_flags, smoke_run, capfd):
    run = torn_copy(smoke_run, STEPS)
    capfd.readouterr()
    assert train(run, data_flags, TINY, *EVERY_STEP) == 0
    err = capfd.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning: checkpoint")]
    assert len(warnings) == 1 and f"step {STEPS} is unreadable" in warnings[0], err
    assert "Traceback" not in err
    assert (run / "checkpoints.unreadable" / str(STEPS)).is_dir()
    assert_params_equal(final_params(run), final_params(smoke_run))
    assert (run / "metrics.jsonl").read_text() != ""
    assert [r["loss"] for r in fileio.read_jsonl(run / "metrics.jsonl")] == [
        r["loss"] for r in fileio.read_jsonl(smoke_run / "metrics.jsonl")]


# `posjax` whose restore of step 24 fails part-way as orbax's does: its reads run in a fresh
# event loop, closed as soon as the first read fails; each read re-raises every exception, its
# cancellation included, as orbax's _read_array_index_and_device_put does.
RESTORE_FAILING_PART_WAY = """
import asyncio, sys
import orbax.checkpoint as ocp
from posjax.launch import cli

async def read(fails):
    try:
        await asyncio.sleep(0 if fails else 60)
        raise ValueError("torn")
    except BaseException as error:
        raise Exception("Encountered error while reading array index") from error

async def reads():
    return await asyncio.gather(read(True), read(False), read(False))

def restore(self, step, args, restore=ocp.CheckpointManager.restore):
    if step != 24:
        return restore(self, step, args=args)
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(reads())
    finally:
        loop.close()

ocp.CheckpointManager.restore = restore
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_checkpoint_failing_part_way_through_its_reads_costs_one_warning_line_only(
        tmp_path, data_flags, smoke_run):
    # The reads left pending printed hundreds of lines: "Exception ignored in: <coroutine
    # object _read_array_index_and_device_put>", "Event loop is closed".
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run)
    done = subprocess.run([sys.executable, "-c", RESTORE_FAILING_PART_WAY,
                           *train_argv(run, data_flags, TINY, *EVERY_STEP)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == (f"warning: checkpoint step {STEPS} is unreadable (Exception: "
                           "Encountered error while reading array index); moved to "
                           f"{run / 'checkpoints.unreadable' / str(STEPS)}, using the one "
                           "before\n")
    assert_params_equal(final_params(run), final_params(smoke_run))


DISK_FULL = ValueError(  # TensorStore's words for it, as orbax raises them
    'RESOURCE_EXHAUSTED: Error writing "params.0/0" in OCDBT database at local file '
    '"/w/checkpoints/8.orbax-checkpoint-tmp/state.orbax-checkpoint-tmp/ocdbt.process_0/": '
    'Failed writing: "/w/checkpoints/8.orbax-checkpoint-tmp/state.orbax-checkpoint-tmp/'
    'ocdbt.process_0/d/4ca2": Failed to write 4069 bytes to file 19: No space left on device '
    "[os_error_code='28']")


FILE_TOO_LARGE = ValueError(  # `ulimit -f` under a save: 470 lines of orbax's tracebacks
    'OUT_OF_RANGE: Error writing "opt_state.1.0.count/0" in OCDBT database at local file '
    '"/w/checkpoints/6.orbax-checkpoint-tmp/state.orbax-checkpoint-tmp/ocdbt.process_0/": '
    'Failed to write 180561 bytes to file 19: File too large [os_error_code=\'27\']')


@pytest.mark.parametrize("error, words", [(DISK_FULL, "No space left on device"),
                                          (FILE_TOO_LARGE, "File too large")])
def test_a_disk_filling_up_during_a_checkpoint_is_one_line_naming_it_and_the_run_resumes(
        tmp_path, data_flags, smoke_run, monkeypatch, capfd, tensorboard_events, error, words):
    save = ocp.CheckpointManager.save

    def save_until_the_disk_is_full(self, step, *args, **kwargs):
        if step == 8:
            (tmp_path / "checkpoints" / "8.orbax-checkpoint-tmp" / "state").mkdir(parents=True)
            logging.getLogger("absl").error("save thread failed", exc_info=error)
            raise error
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", save_until_the_disk_is_full)
    argv = train_argv(tmp_path, data_flags, TINY, *EVERY_STEP)
    assert cli.main(argv) == 2
    (line,) = capfd.readouterr().err.strip().splitlines()
    assert line.startswith(f"posjax train: error: {words}"), line
    assert f"({tmp_path / 'checkpoints'})" in line, line
    monkeypatch.undo()
    assert checkpoint_steps(tmp_path) == [4]
    assert_resumes_like_an_uninterrupted_run(tmp_path, argv, smoke_run, tensorboard_events)
    assert capfd.readouterr().err == ""  # the torn save's folder went without a word
    assert not list((tmp_path / "checkpoints").glob("*.orbax-checkpoint-tmp"))


def test_a_checkpoint_failing_in_its_thread_stops_training_at_the_next_row(
        tmp_path, data_flags, smoke_run, monkeypatch, capfd, tensorboard_events):
    """A save that failed after it was handed over (a file size limit, a failing disk) was
    raised only at the next save, a quarter of the run later, or at the end."""
    check = ocp.CheckpointManager.check_for_errors

    def failed_after_step_4(self):
        check(self)
        if self.latest_step() == 4:
            raise DISK_FULL

    monkeypatch.setattr(ocp.CheckpointManager, "check_for_errors", failed_after_step_4)
    argv = train_argv(tmp_path, data_flags, TINY, *EVERY_STEP)
    assert cli.main(argv) == 2
    (line,) = capfd.readouterr().err.strip().splitlines()
    assert line.startswith("posjax train: error: No space left on device"), line
    steps = [row["step"] for row in fileio.read_jsonl(tmp_path / "metrics.jsonl")]
    assert steps[-1] == 5  # the row after the save, not the next save's step 8
    monkeypatch.undo()
    assert_resumes_like_an_uninterrupted_run(tmp_path, argv, smoke_run, tensorboard_events)


def test_a_disk_full_found_when_the_last_checkpoint_finishes_starts_its_own_line(
        tmp_path, data_flags, monkeypatch, capfd):
    """The disk filling under a checkpoint still being written: its error came after the
    progress bar's line, on it, and the bar was drawn again below it."""
    wait = ocp.CheckpointManager.wait_until_finished

    def full_when_finished(self):
        wait(self)
        raise DISK_FULL

    monkeypatch.setattr(ocp.CheckpointManager, "wait_until_finished", full_when_finished)
    argv = [a for a in train_argv(tmp_path, data_flags, TINY) if a != "--noprogress"]
    assert cli.main(argv) == 2
    err = capfd.readouterr().err
    last = err.rstrip("\n").rsplit("\n", 1)[-1]
    assert last.startswith("posjax train: error: No space left on device"), err[-600:]


def test_a_result_posted_to_a_checkpoint_loop_after_it_closed_is_dropped():
    """A TensorStore write finishing after its save failed on a full disk posted its result
    to orbax's closed event loop: RuntimeError('Event loop is closed') in TensorStore's
    thread, printed as two tracebacks after the command's one line (1 run in ~30)."""
    import asyncio
    import threading

    from posjax.train import checkpoint  # noqa: F401 (its event loop policy)

    loop = asyncio.new_event_loop()
    loop.close()
    raised = []

    def post():  # as TensorStore's own thread does
        try:
            loop.call_soon_threadsafe(lambda: None)
        except RuntimeError as e:
            raised.append(e)

    thread = threading.Thread(target=post)
    thread.start()
    thread.join()
    assert raised == []
    open_loop, ran = asyncio.new_event_loop(), []  # an open loop runs what is posted
    open_loop.call_soon_threadsafe(ran.append, 1)
    open_loop.run_until_complete(asyncio.sleep(0))
    open_loop.close()
    assert ran == [1]


def test_resuming_with_another_process_count_is_refused_in_one_line(
        tmp_path, data_flags, smoke_run, capsys):
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run)
    shutil.rmtree(run / "checkpoints" / str(STEPS))  # resume mid-stage, from step 20
    positions = run / "checkpoints" / str(STEPS - 4) / "iterator"
    (positions / "process_0-of-1.json").rename(positions / "process_0-of-2.json")
    assert train(run, data_flags, TINY, *EVERY_STEP) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert ("holds the data positions of process_0-of-2.json, not of process 0 of 1: resume "
            "with the process count it was saved with") in err
    assert (positions / "process_0-of-2.json").exists()
    # with --force and another config: config.json was rewritten and forced.json written
    # before the refusal, so the run's own command was then refused for a changed config
    config = (run / "config.json").read_bytes()
    assert train(run, data_flags, "smoke,seq_len=32,batch_size=8,steps=28", *EVERY_STEP,
                 "--force") == 2
    assert "not of process 0 of 1" in capsys.readouterr().err
    assert (run / "config.json").read_bytes() == config
    assert not (run / "forced.json").exists()


def test_a_run_in_use_by_another_process_is_refused_naming_it_until_that_process_dies(
        smoke_run, data_flags, capsys, lock_held_elsewhere):
    with lock_held_elsewhere(smoke_run) as holder:
        assert train(smoke_run, data_flags, TINY, *EVERY_STEP) == 2
        assert cli.main(["extrapolate", f"--workdir={smoke_run}"]) == 2
        out, err = capsys.readouterr()
        errors = err.strip().splitlines()
        assert len(errors) == 2
        assert all(f"is in use by PID {holder.pid}" in line for line in errors), errors
        assert out == ""  # the refusal alone: no device line before it
    with RunLock(smoke_run):  # the dead holder's lock is taken over
        assert f"PID {os.getpid()}" in (smoke_run / ".lock").read_text()


def test_a_start_that_fails_writes_nothing_and_does_not_block_the_corrected_command(
        tmp_path, data_flags, smoke_run):
    assert train(tmp_path, data_flags, "smoke,seq_len=1,batch_size=8,steps=24") == 2
    assert not (tmp_path / "config.json").exists()
    # A config.json left by a start that failed before any checkpoint is not a run to keep.
    shutil.copy(smoke_run / "config.json", tmp_path / "config.json")
    assert train(tmp_path, data_flags, TINY, "--config.train.learning_rate=0.1") == 0
    assert fileio.read_json(tmp_path / "config.json")["train"]["learning_rate"] == 0.1


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


def test_an_exploded_loss_stops_the_run_before_its_checkpoint_is_kept():
    uniform = math.log(256)
    run = dict(uniform_loss=uniform, last_good=8, workdir=Path("run"), step=12)
    window = {"diverged_at": NEVER, "weight_sum": 4.0, "correct_sum": 0.0}
    trainer.check_healthy({**window, "loss_sum": 4 * trainer.EXPLODED * uniform}, **run)
    with pytest.raises(trainer.TrainingDiverged,
                       match=r"exploded to 1e\+13 by step 12 .*last good checkpoint \(step 8\)"):
        trainer.check_healthy({**window, "loss_sum": 4e13}, **run)


def test_checkpoints_without_their_config_json_are_not_resumed_as_another_config(
        smoke_run, tmp_path, data_flags, one_error_line):
    """config.json deleted: `train --config=...:encoding=alibi` resumed RoPE's weights as
    'training had finished' and wrote an ALiBi config.json over them."""
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run)
    (run / "config.json").unlink()
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    assert train(run, data_flags, TINY + ",encoding=alibi") == 2
    assert one_error_line().endswith(
        f"{run} holds a run's checkpoints but no config.json: what it trained with is unknown, "
        "and it would resume as this config: put its config.json back, use a new --workdir, "
        "or --force to resume it with this config")
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
    assert train(run, data_flags, TINY, "--force") == 2  # finished: --force would relabel it
    assert "trains none past them" in one_error_line()
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32"]) == 2
    assert one_error_line().endswith(
        f"{run} holds a run's checkpoints but no config.json, so what it trained with is "
        "unknown: put its config.json back")


def test_nan_at_step_1_points_at_the_forward_pass_before_the_learning_rate():
    """A bias that is nan everywhere stopped at step 1 with "lower train.learning_rate", but
    step 1's loss and gradients are the initial parameters': no learning rate made them."""
    run = dict(uniform_loss=math.log(256), last_good=None, workdir=Path("run"), step=1)
    window = {"weight_sum": 4.0, "correct_sum": 0.0, "loss_sum": float("nan")}
    with pytest.raises(trainer.TrainingDiverged) as first:
        trainer.check_healthy({**window, "diverged_at": 1}, **run)
    assert str(first.value) == (
        "loss, gradients or parameters became nan/inf at step 1; stopped, no checkpoint had "
        "been saved: step 1's loss and gradients come from the initial parameters, so look "
        "first at the model's forward pass (an encoding's sites, model.dtype); if it is "
        "finite there, lower train.learning_rate or raise train.warmup_steps")
    with pytest.raises(trainer.TrainingDiverged) as later:
        trainer.check_healthy({**window, "diverged_at": 2}, **run)
    assert str(later.value).endswith(
        "at step 2; stopped, no checkpoint had been saved: lower train.learning_rate or raise "
        "train.warmup_steps")


def test_evaluation_refuses_a_run_whose_weights_are_not_finite(tmp_path, smoke_run, capsys):
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run)
    experiment = Experiment.from_workdir(run)
    tx = optim.optimizer(experiment.config.train, experiment.total_steps)
    broken = jax.tree.map(lambda x: jnp.full_like(x, jnp.nan), experiment.build().params)
    checkpoints = Checkpoints(run / "checkpoints")
    checkpoints.save(STEPS + 1, initial_state(broken, tx, experiment.config.train.seed),
                     {"stage": 0})
    checkpoints.close()
    assert cli.main(["extrapolate", f"--workdir={run}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"weights of checkpoint step {STEPS + 1} are not finite" in err
    assert not (run / "extrapolation.json").exists()


def test_batch_not_divisible_by_the_devices_is_a_config_error(tmp_path, data_flags,
                                                              monkeypatch, capsys):
    monkeypatch.setattr(jax, "device_count", lambda: 8)
    assert train(tmp_path / "run", data_flags, "smoke,batch_size=4") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "batch_size 4 is not divisible by the 8 devices" in err
    assert not (tmp_path / "run").exists()


def test_the_checkpoint_phase_starts_when_the_queued_steps_are_done(tmp_path, data_flags,
                                                                    monkeypatch):
    """Steps are dispatched ahead; a checkpoint between two logged rows (here at step 6,
    rows every 8) would otherwise wait for the queued ones inside its own timer, and
    stages.json would count step time as checkpoint time."""
    ready = []
    timed = trainer._Program.timed

    def checked(program, phase):
        if phase == "checkpoints":
            ready.append(all(leaf.is_ready() for leaf in jax.tree.leaves(program.state)))
        return timed(program, phase)

    monkeypatch.setattr(trainer._Program, "timed", checked)
    assert train(tmp_path, data_flags, TINY, "--config.train.checkpoint_every_steps=6",
                 "--config.train.log_every_steps=8") == 0
    assert ready == [True] * 5  # steps 6, 12, 18 and 24, then the closing wait for the saves


def test_the_bars_rate_and_eta_leave_out_the_compiled_first_step(tmp_path, monkeypatch,
                                                                  capsys):
    """Steps of 116 s, the first with its compilation: the bar read `2/6 [01:56<03:52,
    58.08s/step]`, the first step's count over the time of the second."""
    import tqdm.std

    clock = [0.0]
    monkeypatch.setattr(tqdm.std, "time", lambda: clock[0])
    log = trainer._Log(tmp_path, 0, 6, show=True)
    clock[0] = 300.0  # the first step, compiling
    log.bar.update(1)
    log.compiled()
    log.bar.refresh()  # the postfix a metrics row sets: a rate of -1.70 step/s was shown
    assert "1/6 [00:00<?, ?step/s]" in capsys.readouterr().err.split("\r")[-1]
    for _ in range(2):
        clock[0] += 116.0
        log.bar.update(1)
    log.bar.refresh()
    shown = capsys.readouterr().err.split("\r")[-1]
    assert "3/6 [03:52<05:48, 116.00s/step]" in shown, shown
    # a second stage (compiling 60 s, then 10 s a step): its own rate, not its steps over
    # the whole run's time (DroPE's 230 step/s read 4.39)
    clock[0] += 60.0
    log.bar.update(1)
    log.compiled()
    clock[0] += 20.0
    log.bar.update(2)
    log.bar.refresh()
    shown = capsys.readouterr().err.split("\r")[-1]
    assert "6/6 [00:20<00:00, 10.00s/step]" in shown, shown
    log.close()


def test_a_later_steps_result_is_kept_when_only_an_earlier_checkpoint_reads(
        tmp_path, data_flags, smoke_run, capfd):
    """A finished run's last checkpoint torn: extrapolate scored the one before and replaced
    the finished run's extrapolation.json with it, rc 0."""
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run)
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32"]) == 0
    before = (run / "extrapolation.json").read_text()
    for path in (run / "checkpoints" / str(STEPS)).rglob("*"):
        if path.is_file():
            path.write_bytes(b"torn")
    capfd.readouterr()
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32"]) == 2
    assert capfd.readouterr().err.strip().splitlines()[-1] == (
        f"posjax extrapolate: error: {run / 'extrapolation.json'} holds the scores of step "
        f"{STEPS}, and the newest readable checkpoint is step {STEPS - 4}: the file is kept; "
        f"train the run to step {STEPS} again (posjax train, the same command), or write these "
        "scores elsewhere with --output")
    assert (run / "extrapolation.json").read_text() == before


def test_an_empty_folder_named_like_a_step_is_one_warning_line(tmp_path, data_flags, smoke_run,
                                                               capfd):
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run)
    (run / "checkpoints" / "900").mkdir()
    capfd.readouterr()
    assert train(run, data_flags, TINY, *EVERY_STEP) == 0
    err = capfd.readouterr().err
    assert "WARNING:absl" not in err and "Metadata file" not in err, err
    assert [line for line in err.splitlines() if "900" in line] == [
        f"warning: checkpoint step 900 is unreadable (KeyError: 'Item \"data\" was not found in "
        f"the checkpoint. Available items: []'); moved to {run / 'checkpoints.unreadable' / '900'}"
        ", using the one before"]


def test_rows_cut_from_metrics_before_the_checkpoint_are_named_in_one_warning(
        smoke_run, tmp_path, data_flags, capsys):
    """metrics.jsonl cut at row 10 of a run checkpointed at step 24: the re-run said
    "resumed from step 24" and the rows of steps 11 to 24 were gone with no word."""
    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy)
    lines = (copy / "metrics.jsonl").read_text().splitlines(keepends=True)
    (copy / "metrics.jsonl").write_text("".join(lines[:10]) + lines[10][:7])  # torn row 11
    assert train(copy, data_flags, TINY, *EVERY_STEP) == 0
    assert [line for line in capsys.readouterr().err.splitlines() if "warning" in line] == [
        f"warning: {copy / 'metrics.jsonl'} holds rows up to step 10, short of step {STEPS} "
        f"that the run's checkpoint passed: the rows of steps 11 to {STEPS} were cut from the "
        "file and are not written again"]
    assert train(copy, data_flags, TINY, *EVERY_STEP) == 0  # and on each re-run: still lost
    assert "warning" in capsys.readouterr().err


def test_a_damaged_stages_json_says_to_restore_it_not_to_delete_it(smoke_run, tmp_path,
                                                                   data_flags, capsys):
    """Its "delete it and re-run" led to a refusal: a re-run cannot write the records of
    stages that ended before its checkpoint."""
    copy = tmp_path / "run"
    shutil.copytree(smoke_run, copy)
    (copy / "stages.json").write_text("")
    assert train(copy, data_flags, TINY, *EVERY_STEP) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"posjax train: error: {copy / 'stages.json'} is not valid JSON (Expecting value: line "
        "1): it was damaged; restore it from a copy (git checkout, a backup), or train the run "
        "again in a new --workdir: the records of its ended stages are not written again"]


def test_a_rerun_after_a_kill_before_the_first_checkpoint_says_it_starts_again(tmp_path,
                                                                              capsys):
    """kill -9 before the first save: the re-run trained from step 0 without a word, its
    metrics rows dropped."""
    fileio.write_jsonl(tmp_path / "metrics.jsonl", [{"step": n, "loss": 3.0} for n in (1, 2)])
    trainer._Log(tmp_path, 0, 6, show=False).close()
    assert capsys.readouterr().out == (
        f"posjax train: {tmp_path} stopped before its first checkpoint: training again from "
        "step 0 (2 metrics rows of that attempt dropped)\n")
    assert fileio.read_jsonl(tmp_path / "metrics.jsonl") == []


def test_the_bar_of_several_seeds_names_whose_loss_it_shows(tmp_path, capsys):
    """With --seeds the bar's loss and tokens/s were seed 0's, unlabelled; then the name
    was said twice, before each ("seed=0 loss=2.257, stage=1, seed=0 tok_s=1000")."""
    for shown_as, expected in (("seed=0", "seed=0: loss=2.257, stage=1, tok_s=1000"),
                               ("", "?step/s, loss=2.257")):
        (tmp_path / f"run{shown_as}").mkdir()
        log = trainer._Log(tmp_path / f"run{shown_as}", 0, 6, show=True, shown_as=shown_as)
        log.write({"step": 1, "loss": 2.257, "stage": 1, "tokens_per_sec": 1000.0})
        log.bar.refresh()
        shown = capsys.readouterr().err.split("\r")[-1]
        assert expected in shown and shown.count("seed=0") == (1 if shown_as else 0), shown
        assert "loss=2.257, stage=1, tok_s=1000" in shown, shown
        log.close()


def test_a_sentencepiece_run_keeps_its_model_when_its_corpus_changes(tmp_path, monkeypatch,
                                                                     capsys):
    """A file added to a SentencePiece run's folder of text trained a second model on the
    next `extrapolate`, which scored the run with pieces its embeddings never saw (rc 0, a
    perplexity of noise); its resume would have trained on with them."""
    monkeypatch.setenv("POSJAX_DATA_DIR", str(tmp_path / "data"))
    books, library = tmp_path / "books", Path(os.__file__).parent
    books.mkdir()
    for name in ("os.py", "random.py", "argparse.py", "typing.py"):
        shutil.copy(library / name, books / f"{name}.txt")
    run = tmp_path / "run"
    argv = ["train", f"--config={LM}:smoke,seq_len=32,batch_size=4,steps=2,dataset=local_text,"
            f"text_glob={books}/*.txt", "--config.data.tokenizer=sentencepiece",
            "--config.data.sentencepiece_vocab_size=600", f"--workdir={run}", "--noprogress"]
    assert cli.main(argv) == 0
    recorded = fileio.read_json(run / "config.json")["provenance"]["tokenizer_model"]
    models = sorted((tmp_path / "data").rglob("*.model"))
    assert [str(m) for m in models] == [recorded]
    shutil.copy(library / "shutil.py", books / "shutil.py.txt")
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32"]) == 0
    assert sorted((tmp_path / "data").rglob("*.model")) == models  # none trained again
    capsys.readouterr()
    argv[1] = argv[1].replace("steps=2", "steps=4")
    assert cli.main([*argv, "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"posjax train: error: {run} was trained with the SentencePiece "
                          f"model {recorded}, and its corpus as it is now gives another (")
    assert err.endswith("whose pieces its embeddings do not index: restore the corpus, or "
                        "train in a new --workdir")


def test_a_stop_line_starts_a_line_of_its_own_after_a_bar_drawn_into_a_file(capsys):
    """Stopped during compilation with stderr to a file, the line was glued onto the bar's:
    `0/6 [00:00<?, ?step/s]posjax train: interrupted at step 0, ...`."""
    from tqdm.auto import tqdm

    assert not runlock._mid_line()  # pytest's stderr is no terminal
    with tqdm(total=3, file=sys.stderr):
        assert runlock._mid_line()  # a bar draws its line there all the same
    assert not runlock._mid_line()


def test_a_resumed_stage_keeps_the_first_step_its_first_process_timed(tmp_path):
    """Stopped during its last step's evaluation, the re-run (which steps no more) wrote the
    stage's record without first_step_s, which the stopped process had timed; resumed
    mid-stage, the re-run's own first step (0.75 s from the compilation cache) replaced the
    stage's (7.3 s)."""
    from types import SimpleNamespace

    fileio.write_jsonl(tmp_path / "metrics.jsonl", [
        {"step": 1, "stage": 1, "loss": 5.0, "first_step_s": 2.5},
        {"step": 2, "stage": 1, "loss": 4.0},
        {"step": 3, "stage": 2, "loss": 3.0, "first_step_s": 1.5}])
    seat = SimpleNamespace(workdir=tmp_path)
    resumed = SimpleNamespace(first_step_s={})  # a process that took no first step
    assert trainer._first_step_s(resumed, seat, SimpleNamespace(index=0)) == 2.5
    assert trainer._first_step_s(resumed, seat, SimpleNamespace(index=1)) == 1.5
    assert trainer._first_step_s(resumed, seat, SimpleNamespace(index=2)) is None
    timed = SimpleNamespace(first_step_s={0: 0.03, 2: 0.7})  # its own first steps
    assert trainer._first_step_s(timed, seat, SimpleNamespace(index=0)) == 2.5  # a resume's
    assert trainer._first_step_s(timed, seat, SimpleNamespace(index=2)) == 0.7  # its stage


@pytest.mark.parametrize("slowed, flags", [
    ("save", ("--config.train.checkpoint_every_steps=2",)),
    ("evaluate", ("--config.train.eval_every_steps=2", "--seeds=0,1")),
])
def test_tokens_per_second_leaves_out_checkpoints_and_the_other_seeds_evaluations(
        tmp_path, data_flags, monkeypatch, slowed, flags):
    """A row after a checkpoint paid for the save (4x too slow), and with --seeds each later
    seed's row paid for the earlier seeds' evaluations: each is held here for a second, and
    no row's timed step may take it."""
    held = 1.0
    original = getattr(trainer._Seat, slowed)

    def slow(self, *args, **kwargs):
        time.sleep(held)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(trainer._Seat, slowed, slow)
    workdir = tmp_path / ("run,seed={seed}" if "--seeds=0,1" in flags else "run")
    assert train(workdir, data_flags, "smoke,seq_len=32,batch_size=8,steps=6",
                 "--config.train.log_every_steps=1", *flags) == 0
    for run in tmp_path.iterdir():
        rows = fileio.read_jsonl(run / "metrics.jsonl")
        seconds = [32 * 8 / row["tokens_per_sec"] for row in rows if row["tokens_per_sec"]]
        assert len(seconds) == 5 and max(seconds) < held, (run.name, seconds)
