"""Experiment.from_config: what a config resolves to, once, and the runs on record still load."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import jax
import numpy as np
import pytest

from posjax import config as configlib
from posjax import models
from posjax.config import load_config
from posjax.data import algorithmic, builders, grid2d
from posjax.encoders.rotary import RoPE
from posjax.errors import ConfigError
from posjax.experiment import Experiment
from posjax.models import CausalLM, MLMEncoder, PatchModel

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
RECORDED_RUNS = sorted(p.parent for p in (ROOT / "experiments").glob("*/results/*/config.json"))


def get_config(name: str, arg: str):
    return configlib.load_config_module(str(CONFIGS / f"{name}.py")).get_config(arg)


@pytest.mark.parametrize(("name", "arg", "model", "data", "input_key", "mlm"), [
    ("lm", "smoke", CausalLM, builders.StdlibTextData, "inputs", False),
    ("mlm", "smoke", MLMEncoder, builders.StdlibTextData, "inputs", True),
    ("algorithmic", "smoke", CausalLM, algorithmic.AlgorithmicData, "inputs", False),
    ("patch2d", "smoke", PatchModel, grid2d.Grid2dData, "patches", False),
])
def test_kinds_resolve_to_their_registered_classes(name, arg, model, data, input_key, mlm):
    experiment = Experiment.from_config(get_config(name, arg))
    assert experiment.model_class is model and type(experiment.data) is data
    assert experiment.input_key == input_key and (experiment.mlm is not None) == mlm


def test_max_len_covers_every_position_training_reads():
    plain = Experiment.from_config(get_config("lm", "smoke,seq_len=32"))
    assert plain.dims.max_len == plain.train_len == 32
    randomized = Experiment.from_config(get_config("lm", "smoke,seq_len=32,randomize_positions=96"))
    assert randomized.dims.max_len == 96  # draws reach M - 1
    # A 1-D encoding's attention sites read raster indices row * grid_width + col of 8x8 grids.
    raster = Experiment.from_config(get_config("patch2d", "smoke,encoding=rope"))
    assert raster.dims.max_len == 7 * 16 + 8
    axial = Experiment.from_config(get_config("patch2d", "smoke,encoding=rope2d"))
    assert axial.dims.max_len == 64


def test_abstract_model_has_the_built_models_shapes_without_initialising():
    experiment = Experiment.from_config(get_config("lm", "smoke,encoding=t5"))
    built, abstract = experiment.build(), experiment.abstract()
    assert built.graphdef == abstract.graphdef
    assert jax.tree.map(lambda a: (a.shape, a.dtype), built.params) == jax.tree.map(
        lambda a: (a.shape, a.dtype), abstract.params)
    assert all(isinstance(a, jax.ShapeDtypeStruct) for a in jax.tree.leaves(abstract.params))


def test_bad_configs_fail_in_one_line_before_any_work():
    config = get_config("lm", "smoke")
    config.train.stages = ((32, 3, 10), (0, 4, 1))
    with pytest.raises(ConfigError, match=r"\(0, 4, 1\) is not \(seq_len, batch_size, steps\)"):
        Experiment.from_config(config)
    config = get_config("lm", "smoke")
    config.model.kind = "causal"
    with pytest.raises(ConfigError, match="unknown model.kind 'causal'.*valid: causal_lm"):
        Experiment.from_config(config)


@pytest.mark.parametrize("run", RECORDED_RUNS, ids=lambda p: f"{p.parts[-3]}/{p.name}")
def test_every_recorded_run_resolves_in_todays_layout(run):
    """config.json files written before keys moved (DeBERTa's absolute_last_layers, the
    evaluation's dense_max_len) load as the same run."""
    experiment = Experiment.from_config(load_config(run))
    model = experiment.model_config
    if experiment.config.model.attention != "linear":
        assert model.attention == "auto" and model.dense_max_len == 1024
    assert "dense_max_len" not in experiment.config.eval
    if isinstance(experiment.encoding, RoPE):
        assert experiment.encoding.rerope_window == 0


@pytest.mark.parametrize("encoding", ["sinusoidal", "deberta", "rope"])
def test_a_run_written_before_keys_were_added_resumes_with_todays_config(tmp_path, encoding):
    # config.json of the extrapolation study's first, single-seed runs (2026-11-21, kept in
    # tests/golden since the study was re-run): they predate model.embed_scale, sinusoidal's
    # layout, DeBERTa's p2c_index and the move of absolute_last_layers; their defaults are the
    # old behaviour.
    import shutil

    from posjax.train import trainer

    recorded = ROOT / "tests" / "golden" / "old_run_configs" / f"{encoding}.json"
    shutil.copy(recorded, tmp_path / "config.json")
    config = get_config("lm", f"study=extrapolation,encoding={encoding}")
    trainer.check_resume(tmp_path, config, force=False)


@pytest.mark.parametrize(("name", "arg", "bidirectional"), [
    ("lm", "smoke,encoding=t5", False),  # T5's decoder: every bucket serves the past
    ("mlm", "smoke,encoding=t5", True),
    ("lm", "smoke,encoding=t5,bidirectional=true", True),  # the config says otherwise
    ("lm", "smoke,encoding=tupe", False),
    ("lm", "smoke,encoding=alibi", False),
    ("mlm", "smoke,encoding=alibi", True),  # symmetric slopes in an encoder
    ("mlm", "smoke,encoding=alibi,bidirectional=false", False),
])
def test_t5_tupe_and_alibi_follow_the_models_causality(name, arg, bidirectional):
    config = get_config(name, arg)
    experiment = Experiment.from_config(config)
    assert experiment.encoding.bidirectional is bidirectional
    if arg.endswith("bidirectional=false") and name == "mlm":
        with pytest.raises(ConfigError, match="causal"):
            experiment.abstract()
    else:
        experiment.abstract()  # builds


def test_runs_recorded_with_an_explicit_direction_keep_it():
    config = get_config("lm", "smoke,encoding=t5")
    config.encoding.bidirectional = True  # what config.json held before the default followed
    assert Experiment.from_config(config).encoding.bidirectional is True


@pytest.mark.parametrize("kernel", ["dense", "fused"])
def test_dense_attention_past_memory_is_one_line_naming_chunked_attention(tmp_path, capsys,
                                                                           kernel):
    """seq_len=200000 with dense attention: [4, 2, L, L] float32 scores and their gradients
    (2.4 TiB) are refused before compiling, and the fix names chunked attention, with which
    the step would fit. Fused attention through XLA (a CPU, or float32) holds the same
    scores: it compiled, then ran out of memory in a 24-line traceback."""
    import re

    from posjax.launch import cli

    workdir = tmp_path / "run"
    lm = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
    assert cli.main(["train", f"--config={lm}:smoke,seq_len=200000,dtype=float32",
                     f"--config.model.attention={kernel}", f"--workdir={workdir}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1, captured.err
    assert re.fullmatch(
        r"posjax train: error: seq_len=200000 at batch 4 needs at least 2386\.1 GiB per step, "
        r"more than the [\d.]+ GiB of this \w+: set model\.attention=chunked \(O\(L\) memory: "
        r"no \[L, L\] scores\), or lower the length or the batch size\n", captured.err)
    assert not workdir.exists()


def test_num_params_counts_the_built_model_once_per_structure():
    first = Experiment.from_config(get_config("lm", "smoke,encoding=t5,seed=3"))
    built = sum(x.size for x in jax.tree.leaves(first.build().params))
    assert first.num_params == built
    reseeded = Experiment.from_config(get_config("lm", "smoke,encoding=t5,seed=4"))
    wider = Experiment.from_config(get_config("lm", "smoke,encoding=t5,seed=4,seq_len=48"))
    with mock.patch("posjax.experiment.nnx.eval_shape", side_effect=AssertionError("traced")):
        assert reseeded.num_params == built  # the seed changes values only: counted before
    assert wider.num_params == built  # T5's table does not grow with the length
    learned = [Experiment.from_config(get_config("lm", f"smoke,encoding=learned,seq_len={n}"))
               for n in (32, 48)]
    assert learned[1].num_params - learned[0].num_params == 16 * learned[0].model_config.d_model


@pytest.mark.parametrize("stages, message", [
    ("((64,4))", "train.stages=(64, 4) is not a tuple of (seq_len, batch_size, steps) entries: "
                 "one stage is written ((64,4,100),), with the comma"),
    ("((64,4,2.5),)", "train.stages entry (64, 4, 2.5) is not (seq_len, batch_size, steps) of "
                      "positive integers"),
])
def test_a_malformed_stage_schedule_is_one_line(stages, message):
    """`--config.train.stages="((64,4))"` (one tuple, its stage's comma missing) was a
    TypeError with exit code 1."""
    config = configlib.configured(f"{CONFIGS / 'lm.py'}:smoke", [f"--config.train.stages={stages}"])
    with pytest.raises(ConfigError) as refused:
        Experiment.from_config(config)
    assert str(refused.value) == message


def test_a_length_too_long_to_score_at_batch_1_says_to_lower_the_length_alone():
    """Scoring 10^8 tokens said "lower the length or the batch size" at batch 1, where the
    text evaluation takes no --batch_size."""
    lm = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
    experiment = Experiment.from_config(configlib.configured(f"{lm}:smoke", []))
    with pytest.raises(ConfigError) as refused:
        experiment.check_memory(10**8, 1, training=False)
    assert str(refused.value).endswith(": lower the length"), str(refused.value)
    with pytest.raises(ConfigError, match=r"lower the length or the batch size$"):
        experiment.check_memory(10**8, 2, training=False)


def _first_batch(arg: str, stage: int) -> np.ndarray:
    experiment = Experiment.from_config(get_config("lm", arg))
    return np.asarray(next(experiment.train_iterator(experiment.stages[stage]))["inputs"])


def test_every_stage_of_every_seed_reads_its_own_data_order():
    """A later stage was seeded train.seed + its index, so DroPE's recalibration of seed 0
    read the batches seed 1 began with, in the same shape."""
    two_stages = "smoke,drope=0.5,steps=8"
    seed0_stage1 = _first_batch(f"{two_stages},seed=0", 1)
    assert not np.array_equal(seed0_stage1, _first_batch(f"{two_stages},seed=1", 0))
    assert not np.array_equal(seed0_stage1, _first_batch(f"{two_stages},seed=0", 0))
    # A run's first stage keeps the order it has always read: single-stage runs are unchanged.
    np.testing.assert_array_equal(_first_batch(f"{two_stages},seed=1", 0),
                                  _first_batch("smoke,seed=1", 0))


def test_the_abstract_model_is_built_once_per_structure_and_not_for_stages_that_switch_nothing():
    """Seeds change values, not shapes: two runs of one model share one abstract build, and
    a run whose stages keep the model's encoding checks them without building one."""
    with mock.patch.object(models, "abstract_model", wraps=models.abstract_model) as built:
        runs = [Experiment.from_config(get_config("lm", f"smoke,seed={s},d_model=48"))
                for s in (0, 1)]
        runs[0].check_stage_encodings()
        assert built.call_count == 0
        assert runs[0].abstract() is runs[1].abstract()
        assert runs[0].num_params == runs[1].num_params
        assert built.call_count == 1
        other = Experiment.from_config(get_config("lm", "smoke,encoding=alibi,d_model=48"))
        assert other.abstract() is not runs[0].abstract() and built.call_count == 2
