"""A stage's memory: the formula's floor first, then XLA's compiled step where that is close."""

import pytest

from posjax import config as configlib
from posjax import experiment as experiment_module
from posjax.errors import ConfigError
from posjax.experiment import Experiment
from posjax.launch import cli
from posjax.train import optim, trainer
from posjax.train.steps import compiled_step_bytes

LM = "configs/lm.py"


@pytest.fixture(scope="module")
def smoke():
    experiment = Experiment.from_config(configlib.load_config_module(LM).get_config("smoke"))
    tx = optim.optimizer(experiment.config.train, experiment.total_steps)
    stage = experiment.stages[0]
    return experiment, tx, stage, compiled_step_bytes(experiment, tx, stage)


def _device_memory(monkeypatch, size: int) -> None:
    for module in (trainer, experiment_module):
        monkeypatch.setattr(module, "device_memory", lambda: size)


def test_xla_counts_more_than_the_formula_s_floor(smoke):
    experiment, _, stage, compiled = smoke
    assert compiled > experiment.memory_floor(stage.seq_len, stage.batch_size)


def test_a_stage_the_floor_passes_and_xla_does_not_is_refused_in_one_line(
        smoke, monkeypatch, tmp_path, data_flags, capsys):
    experiment, tx, stage, compiled = smoke
    floor = experiment.memory_floor(stage.seq_len, stage.batch_size)
    assert floor < compiled - 1
    _device_memory(monkeypatch, (floor + compiled) // 2)
    with pytest.raises(ConfigError, match="XLA's compiled train step needs"):
        trainer.check_step_memory(experiment, tx, stage)
    assert cli.main(["train", f"--config={LM}:smoke", f"--workdir={tmp_path}",
                     "--noprogress", *data_flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lower the length or the batch size" in err[0], err
    assert not (tmp_path / "config.json").exists()


def test_room_for_the_compiled_step_passes_and_far_from_the_limit_nothing_compiles(
        smoke, monkeypatch):
    experiment, tx, stage, compiled = smoke
    _device_memory(monkeypatch, compiled + 1)
    trainer.check_step_memory(experiment, tx, stage)
    monkeypatch.setattr(trainer, "compiled_step_bytes",
                        lambda *a: pytest.fail("compiled far from the limit"))
    _device_memory(monkeypatch, 100 * compiled)
    trainer.check_step_memory(experiment, tx, stage)
