"""config.evals: evaluations scored on schedule while a run trains (posjax.eval.during)."""

import pytest

from posjax import config as configlib
from posjax import fileio
from posjax.data import retrieval
from posjax.errors import ConfigError
from posjax.eval.during import DuringTraining
from posjax.experiment import Experiment
from posjax.launch import cli

LM = "configs/lm.py"


def _train(workdir, arg: str, data_flags, *extra) -> int:
    return cli.main(["train", f"--config={LM}:smoke,eval_max_factor=2,{arg}",
                     f"--workdir={workdir}", "--noprogress", *data_flags, *extra])


def test_entries_are_scored_on_schedule_into_the_metrics_rows(tmp_path, data_flags,
                                                              tensorboard_events):
    assert _train(tmp_path, "evals=text@4", data_flags,
                  "--config.train.log_every_steps=5", "--config.evals.text.max_tokens=512") == 0
    rows = {row["step"]: row for row in fileio.read_jsonl(tmp_path / "metrics.jsonl")}
    # every 4 steps and at the last (6); the training row of step 5 has no evaluation
    scored = {step for step, row in rows.items() if "text/loss@256" in row}
    assert scored == {4, 6}
    assert set(rows) == {4, 5, 6}
    assert rows[6]["text/ppl@128"] == pytest.approx(2.718281828 ** rows[6]["text/loss@128"],
                                                    rel=1e-4)
    # TensorBoard's tag for text/ppl@128 (docs/cli.md): its writer turns "@" into "_"
    tags = {value.tag for event in tensorboard_events(tmp_path / "tensorboard")
            for value in event.summary.value}
    assert {"text/ppl_128", "text/loss_256"} <= tags
    # not a result file: `posjax extrapolate` scores the final parameters
    assert not (tmp_path / "extrapolation.json").exists()
    # a resumed run may change what it evaluates while training
    assert _train(tmp_path, "evals=text@2", data_flags) == 0


@pytest.mark.parametrize("override, message", [
    ("--config.evals.text.type=nope", "unknown evaluation 'nope'"),
    ("--config.evals.text.every_steps=0", "config.evals.text.every_steps=0: give a whole"),
    ("--config.evals.text.type=task", "scores a run's own data"),
])
def test_an_entry_that_cannot_run_is_one_line_before_anything_is_written(
        tmp_path, data_flags, capsys, override, message):
    assert _train(tmp_path, "evals=text@2", data_flags, override) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "config.json").exists()


@pytest.mark.parametrize("arg, extra", [
    ("attention=dense,evals=text@3", ["--config.evals.text.lengths=131072",
                                      "--config.evals.text.max_tokens=131073"]),
    ("attention=dense,evals=passkey@3", ["--config.evals.passkey.lengths=131072"]),
    ("attention=dense,lengths=128+131072", ["--config.eval.max_tokens=131073",
                                            "--extrapolate"]),
])
def test_an_evaluation_whose_step_cannot_fit_is_refused_before_training(
        tmp_path, data_flags, capsys, arg, extra):
    """A dense run evaluated at 131072 tokens trained (checkpoints and metrics written), then
    ran out of memory at its first evaluation, or after the whole run."""
    assert _train(tmp_path, arg, data_flags, *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "posjax train: error: scoring length 131072 at batch "), err
    assert not (tmp_path / "config.json").exists()


def test_an_option_the_evaluation_does_not_take_is_refused(tmp_path, data_flags):
    config = configlib.configured(f"{LM}:smoke,evals=text@2", data_flags)
    with config.unlocked():
        config.evals.text.trials = 3

    with pytest.raises(ConfigError, match="config.evals.text.trials does not apply to this run"):
        DuringTraining(config).check(Experiment.from_config(config))


@pytest.mark.parametrize("spec", ["text", "text@x", "text@2+passkey",
                                  "passkey@2+"])  # an empty entry after "+"
def test_a_malformed_evals_arg_names_the_form(spec):
    with pytest.raises(ConfigError, match="TYPE@EVERY_STEPS"):
        configlib.load_config_module(LM).get_config(f"smoke,evals={spec}")


def test_evals_every_0_steps_names_the_count():
    """evals=text@0 was told to write TYPE@EVERY_STEPS, the form it had."""
    with pytest.raises(ConfigError, match=r"^evals='text@0': text@0 scores every 0 steps: "
                       r"give a whole number of steps >= 1$"):
        configlib.load_config_module(LM).get_config("smoke,evals=text@0")


def test_an_evaluation_given_twice_in_the_evals_arg_is_refused():
    """evals=text@2+text@3 kept only text@3, without a word."""
    with pytest.raises(ConfigError, match=r"^evals='text@2\+text@3' gives text twice: give "
                       "each evaluation once"):
        configlib.load_config_module(LM).get_config("smoke,evals=text@2+text@3")


def test_an_evals_arg_adds_light_entries_over_the_run_lengths():
    config = configlib.load_config_module(LM).get_config("smoke,evals=text@50+passkey@100")
    assert dict(config.evals.text) == {"type": "text", "every_steps": 50, "max_tokens": 4096,
                                       "lengths": tuple(config.eval.lengths)}
    assert config.evals.passkey.trials == 4
    # every retrieval task's entry has its trials, so --config.evals.TASK.trials=N sets them
    for task in retrieval.PROBES:
        entry = configlib.load_config_module(LM).get_config(f"smoke,evals={task}@100").evals
        assert entry[task].trials == 4
    assert not configlib.load_config_module(LM).get_config("smoke").evals


@pytest.mark.parametrize("stop_at", [4, 6])  # 6: the run's last step
def test_a_stop_during_an_evaluation_saves_the_step_and_the_rerun_writes_its_row(
        tmp_path, data_flags, monkeypatch, capsys, stop_at):
    """A stop signal during config.evals' evaluation lost the steps since the last
    checkpoint (a smoke run's: none). The step is saved with its row still due; the re-run
    evaluates and writes that row first, and every row equals an uninterrupted run's."""
    import signal

    import jax
    import numpy as np

    from posjax.train.checkpoint import restore_params

    flags = ("--config.train.log_every_steps=5", "--config.evals.text.max_tokens=512")
    assert _train(tmp_path / "whole", "evals=text@4", data_flags, *flags) == 0
    score, calls = DuringTraining.__call__, []

    def stopped(self, *args, **kwargs):
        calls.append(args[3])  # the step
        if args[3] == stop_at:
            signal.raise_signal(signal.SIGTERM)  # noted, raised inside the evaluation
        return score(self, *args, **kwargs)

    monkeypatch.setattr(DuringTraining, "__call__", stopped)
    run = tmp_path / "stopped"
    assert _train(run, "evals=text@4", data_flags, *flags) == 128 + signal.SIGTERM
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"posjax train: interrupted at step {stop_at}: re-run the same command to resume "
        f"from its checkpoint at step {stop_at}" if stop_at < 6 else
        "posjax train: interrupted after its last step, 6, was saved: re-run the same command "
        "to finish what comes after training")  # here the evaluation of step 6
    # no row of the step without its scores
    assert [r["step"] for r in fileio.read_jsonl(run / "metrics.jsonl")] == [
        step for step in (4, 5) if step < stop_at]
    assert [p.name for p in (run / "checkpoints").iterdir() if p.name.isdigit()] == [
        str(stop_at)]
    monkeypatch.undo()
    assert _train(run, "evals=text@4", data_flags, *flags) == 0
    rows = fileio.read_jsonl(run / "metrics.jsonl")
    whole = fileio.read_jsonl(tmp_path / "whole" / "metrics.jsonl")
    untimed = ("tokens_per_sec", "first_step_s")
    assert [{k: v for k, v in r.items() if k not in untimed} for r in rows] == [
        {k: v for k, v in r.items() if k not in untimed} for r in whole]
    assert [r["step"] for r in rows if "text/ppl@256" in r] == [4, 6]
    stages = [[{k: v for k, v in stage.items() if k not in untimed}
               for stage in fileio.read_json(w / "stages.json")["stages"]]
              for w in (run, tmp_path / "whole")]
    assert stages[0] == stages[1]
    for a, b in zip(*(jax.tree.leaves(restore_params(Experiment.from_workdir(w), w)[1])
                      for w in (run, tmp_path / "whole")), strict=True):
        np.testing.assert_array_equal(a, b)
    # a finished run's re-run writes the row no second time
    assert _train(run, "evals=text@4", data_flags, *flags) == 0
    assert fileio.read_jsonl(run / "metrics.jsonl") == rows


@pytest.mark.parametrize(("arg", "overrides", "lengths"), [
    ("evals=text@3,lengths=128+256", [], (128, 256)),
    ("evals=text@3", ["--config.eval.lengths=(128,256)"], (128, 256)),
    ("evals=text@3", ["--config.eval.lengths=(128,256)", "--config.evals.text.lengths=(512,)"],
     (512,)),
])
def test_evals_score_the_eval_lengths_the_arg_or_an_override_gives(arg, overrides, lengths):
    """evals=text@3 beside lengths=128+256 scored 128..2048 at every third step."""
    from posjax.config.files import configured

    config = configured(f"{LM}:encoding=rope,smoke,{arg}", overrides)
    assert tuple(config.evals.text.lengths) == lengths
