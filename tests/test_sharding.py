"""Meshes from the config, the fsdp sharding rule, data shards per process and
model.dtype="auto": the pure rules, on any device count (the runs that use them are in
test_distributed.py)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec

from posjax import config as configlib
from posjax import fileio
from posjax.config import load_config_module
from posjax.data import training
from posjax.errors import ConfigError
from posjax.experiment import shards_of_process
from posjax.models.layers import ModelConfig, resolve_dtype
from posjax.train import distributed, sharding, trainer

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("axes, devices, shape", [
    ((("data", -1), ("fsdp", 1)), 8, {"data": 8, "fsdp": 1}),
    ((("data", 2), ("fsdp", -1)), 8, {"data": 2, "fsdp": 4}),
    ((("data", -1),), 1, {"data": 1}),
    ([["data", 1], ["fsdp", 4]], 4, {"data": 1, "fsdp": 4}),  # as config.json lists it
])
def test_mesh_shape_fills_the_free_axis(axes, devices, shape):
    assert sharding.mesh_shape(axes, devices) == shape


@pytest.mark.parametrize("axes, message", [
    ((("data", -1), ("model", 2)), "axis 'model' is unknown: use data and fsdp"),
    ((("data", -1), ("fsdp", -1)), "more than one axis of size -1"),
    ((("data", 3), ("fsdp", -1)), "fixes 3 devices, which does not divide the 8 devices"),
    ((("data", 2), ("fsdp", 2)), "spans 4 devices but there are 8"),
    ((("data", 0),), "size 0"),
    ((("data", -1), ("data", 1)), "names axis 'data' twice"),
    ((("data",),), "is not (name, size)"),
])
def test_a_mesh_that_cannot_be_built_is_one_line(axes, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sharding.mesh_shape(axes, 8)


@pytest.mark.parametrize("shape, fsdp, spec", [
    ((256, 1024), 4, PartitionSpec(None, "fsdp")),   # the largest divisible dimension
    ((1024, 256), 4, PartitionSpec("fsdp", None)),
    ((256, 256), 4, PartitionSpec(None, "fsdp")),    # equals: the last
    ((260, 256), 8, PartitionSpec(None, "fsdp")),    # 260 is not divisible by 8
    ((3, 5), 4, PartitionSpec()),                    # nothing divisible: a full copy
    ((), 4, PartitionSpec()),                        # scalars (step, counts)
    ((256, 1024), 1, PartitionSpec()),               # no fsdp axis to shard along
])
def test_the_fsdp_rule_shards_the_largest_divisible_dimension(shape, fsdp, spec):
    assert sharding.leaf_spec(shape, "fsdp", fsdp) == spec
    assert sharding.leaf_spec(shape, "replicate", fsdp) == PartitionSpec()


def test_rules_match_leaf_paths_and_the_first_match_wins():
    mesh = jax.sharding.AbstractMesh((1, 4), ("data", "fsdp"))
    state = {"params": {"embed": jnp.zeros((8, 4)), "kernel": jnp.zeros((4, 8))},
             "step": jnp.zeros((), jnp.int32)}
    placed = sharding.state_shardings(state, mesh, (("embed", "replicate"), (".*", "fsdp")))
    assert placed["params"]["embed"].spec == PartitionSpec()
    assert placed["params"]["kernel"].spec == PartitionSpec(None, "fsdp")
    assert placed["step"].spec == PartitionSpec()


@pytest.mark.parametrize("rules, message", [
    ((("[", "fsdp"),), "regex '[' is invalid"),
    (((".*", "tensor"),), "strategy 'tensor' is unknown: use fsdp or replicate"),
    (((".*",),), "is not (regex, strategy)"),
])
def test_bad_sharding_rules_are_one_line(rules, message):
    with pytest.raises(ConfigError) as error:
        sharding.compile_rules(rules)
    assert message in str(error.value)


@pytest.mark.parametrize("key, value, message", [
    ("mesh", (("data", 3),), "train.mesh spans 3 devices but there are 1"),
    ("sharding_rules", ((".*", "shard"),), "strategy 'shard' is unknown"),
])
def test_a_placement_the_devices_cannot_hold_stops_training_before_any_write(
        tmp_path, key, value, message):
    # The Experiment knows nothing of meshes (it is below posjax.train); the trainer checks
    # them right after resolving it, as Experiment.from_config did before.
    config = load_config_module(str(CONFIGS / "lm.py")).get_config("smoke")
    config.train[key] = value
    with pytest.raises(ConfigError, match=message) as error:
        trainer.train(config, tmp_path / "run", progress=False)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "run").exists()


def test_a_batch_the_devices_do_not_divide_is_one_line(monkeypatch):
    config = load_config_module(str(CONFIGS / "lm.py")).get_config("smoke")
    monkeypatch.setattr(jax, "device_count", lambda: 3)
    with pytest.raises(ConfigError, match="batch_size 8 is not divisible by the 3 devices: "
                                          "use a multiple of 3"):
        sharding.check(config, [6, 8])


def test_each_shard_holds_every_count_th_example_and_the_shards_cover_the_source():
    source = list(range(10))
    shards = [sorted(training.shuffled_forever(source, 0, (i, 3))[:len(range(i, 10, 3))])
              for i in range(3)]
    assert shards == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]


def test_one_process_reads_every_shard():
    assert shards_of_process(0) == range(0, 1)
    assert shards_of_process(4) == range(0, 4)


@pytest.mark.parametrize("cluster, message", [
    (dict(coordinator="127.0.0.1:1234"), "go together: give all three"),
    (dict(coordinator="localhost", num_processes=2, process_id=0), "is not HOST:PORT"),
    (dict(coordinator="h:1", num_processes=2, process_id=2), "ids run from 0 to"),
])
def test_a_bad_cluster_is_one_line(cluster, message):
    with pytest.raises(ConfigError, match=message):
        distributed.Cluster(**cluster)


def test_auto_dtype_is_bfloat16_on_accelerators_and_float32_on_cpu():
    assert resolve_dtype("auto", "gpu") == resolve_dtype("auto", "tpu") == "bfloat16"
    assert resolve_dtype("auto", "cpu") == "float32"
    assert resolve_dtype("bfloat16", "cpu") == "bfloat16"
    assert ModelConfig().dtype == "auto"
    assert ModelConfig().compute_dtype == jnp.dtype(resolve_dtype("auto"))
    assert ModelConfig().weight_dtype == jnp.float32
    with pytest.raises(ConfigError, match="model.param_dtype"):
        ModelConfig(param_dtype="auto")


def test_a_run_saved_with_float32_resumes_under_auto_where_auto_means_float32(tmp_path):
    config = load_config_module(str(CONFIGS / "lm.py")).get_config("smoke")
    saved = configlib.config_json(config)
    (tmp_path / "checkpoints" / "4").mkdir(parents=True)
    saved["model"]["dtype"] = resolve_dtype("auto")
    fileio.write_json(tmp_path / "config.json", saved)
    trainer.check_resume(tmp_path, config, force=False)  # the same computation: no error
    saved["model"]["dtype"] = "bfloat16" if resolve_dtype("auto") == "float32" else "float32"
    fileio.write_json(tmp_path / "config.json", saved)
    with pytest.raises(ConfigError, match="model.dtype"):
        trainer.check_resume(tmp_path, config, force=False)
