"""train.stage_encodings: a stage trains with another encoding (DroPE: RoPE, then NoPE)."""

import pytest

from posjax import config as configlib
from posjax import fileio
from posjax.errors import ConfigError
from posjax.experiment import Experiment
from posjax.launch import cli
from posjax.train.steps import step_options

LM = "configs/lm.py"


def _losses(workdir) -> dict[int, float]:
    return {row["step"]: row["loss"] for row in fileio.read_jsonl(workdir / "metrics.jsonl")}


def test_drope_trains_rope_then_recalibrates_without_positions(tmp_path, data_flags):
    common = ["--noprogress", "--config.train.log_every_steps=1", *data_flags]
    assert cli.main(["train", f"--config={LM}:smoke,steps=8,drope=0.375",
                     f"--workdir={tmp_path / 'drope'}", *common]) == 0
    # NoPE throughout on the same stages: the same initialisation and batches, so the first
    # step's loss differs by the encoding alone
    assert cli.main(["train", f"--config={LM}:smoke,steps=8,encoding=none",
                     "--config.train.stages=((128,4,5),(128,4,3))",
                     f"--workdir={tmp_path / 'nope'}", *common]) == 0
    drope, nope = _losses(tmp_path / "drope"), _losses(tmp_path / "nope")
    assert drope[1] != pytest.approx(nope[1], rel=1e-4)
    stages = fileio.read_json(tmp_path / "drope" / "stages.json")["stages"]
    assert [s.get("encoding") for s in stages] == ["rope", "none"]  # each stage names its own
    assert all("encoding" not in s for s in fileio.read_json(tmp_path / "nope" / "stages.json")
               ["stages"])  # one encoding throughout: no stage names it
    # what the run is scored with is its own encoding: none
    assert configlib.load_config(tmp_path / "drope").encoding.name == "none"


def test_the_rope_stage_steps_rope_with_its_own_position_options():
    experiment = _experiment("steps=8,drope=0.375")
    first, second = experiment.stages
    assert experiment.stage_encoding(first).name == "rope"
    assert experiment.stage_encoding(second) is experiment.encoding
    experiment.check_stage_encodings()
    # NoPE reads no distance, RoPE rotates by each position: its stage keeps per-row positions
    assert step_options(experiment, None, None, second)["shared_positions"]
    assert not step_options(experiment, None, None, first)["shared_positions"]


def _experiment(arg: str, *overrides: str) -> Experiment:
    return Experiment.from_config(configlib.configured(f"{LM}:smoke,{arg}", list(overrides)))


@pytest.mark.parametrize("arg, overrides, message", [
    ("encoding=none", ["--config.train.stage_encodings=('learned',)"],
     "stage 1's 'learned' has other parameters than the model's encoding 'none'"),
    ("encoding=none", ["--config.train.stage_encodings=('rope','')"],
     "names 2 stages but train.stages has 1"),
    ("encoding=none", ["--config.train.stage_encodings=('ropes',)"],
     "unknown encoding in train.stage_encodings 'ropes'"),
])
def test_a_stage_encoding_that_cannot_train_is_one_line(arg, overrides, message):
    with pytest.raises(ConfigError, match=message):
        _experiment(arg, *overrides).check_stage_encodings()


@pytest.mark.parametrize("arg, message", [
    ("encoding=rope,drope=0.1", "drope=0.1 trains RoPE, then no positions, and takes no "
                                 "encoding=: drop encoding=rope, from the arg or the config"),
    ("drope=1.0", "drope=1.0: give the share of the run's 6 steps"),
    ("drope=0.99", "drope=0.99: give the share of the run's 6 steps"),
    ("drope_restart=True", "drope_restart=True restarts DroPE's recalibration: give drope=F"),
])
def test_drope_args_that_make_no_drope_are_refused(arg, message):
    with pytest.raises(ConfigError, match=message):
        configlib.load_config_module(LM).get_config(f"smoke,{arg}")


def test_drope_restart_gives_the_recalibration_its_own_schedule():
    """drope_restart restarts the learning-rate schedule where the recalibration stage
    begins (posjax.train.optim.schedule); without it the recalibration is the tail of one."""
    restarted = configlib.load_config_module(LM).get_config("steps=100,drope=0.2,"
                                                            "drope_restart=True")
    assert tuple(restarted.train.schedule_restarts) == (80,)
    assert restarted.train.stages[0][2] == 80
    plain = configlib.load_config_module(LM).get_config("steps=100,drope=0.2")
    assert tuple(plain.train.schedule_restarts) == ()
