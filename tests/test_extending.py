"""docs/extending.md's "Adding a dataset" and "Adding a model kind", followed once each: a class
and a registration, then a run trained and evaluated end to end through the trainer."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import data, io, models, sweep
from posjax.errors import ConfigError
from posjax.eval import evaluate
from posjax.experiment import Experiment
from posjax.train import trainer

pytestmark = pytest.mark.slow

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")


@data.register("toy_counting")
class ToyCounting(data.TextData):
    """Text kept in memory: each document counts up from a different start. No TFDS builder:
    the kind serves its splits itself by overriding `source`."""

    def source(self, split):
        starts = range(40) if split == self.cfg.train_split else range(100, 104)
        return [{"text": " ".join(str(n) for n in range(s, s + 60))} for s in starts]


@models.register("toy_lm")
class ToyLM(nnx.Module):
    """A causal LM without the shared token-model base: embeddings, the shared backbone, an
    untied head."""

    input_key = "inputs"
    causal = True
    masked_lm = False
    sizes = ("vocab_size",)

    def __init__(self, cfg, encoding, *, max_len, rngs, vocab_size):
        self.embed = nnx.Embed(vocab_size, cfg.d_model, rngs=rngs)
        self.backbone = models.Backbone(cfg, encoding, causal=True, max_len=max_len,
                                        input_axes=None, rngs=rngs)
        self.head = nnx.Linear(cfg.d_model, vocab_size, rngs=rngs)

    def __call__(self, tokens, positions, segment_ids, *, deterministic=True, rngs=None):
        h = self.backbone(self.embed(tokens), positions, positions, segment_ids,
                          deterministic=deterministic, rngs=rngs)
        return self.head(h).astype(jnp.float32)


def _config(**model):
    config = sweep.load_config_module(LM).get_config("smoke,encoding=alibi,seq_len=32")
    config.data.dataset = "toy_counting"
    config.model.update(model)
    return config


def test_a_registered_dataset_trains_and_is_evaluated(tmp_path):
    config = _config()
    experiment = Experiment.from_config(config)
    assert isinstance(experiment.data, ToyCounting) and experiment.data.evaluation == "text"
    batch = next(experiment.train_iterator(experiment.stages[0]))
    spec = experiment.batch_spec()
    assert {k: (v.shape, v.dtype) for k, v in batch.items()} == {
        k: (s.shape, s.dtype) for k, s in spec.arrays.items()}

    summary = trainer.train(config, tmp_path, progress=False)
    assert np.isfinite(summary["stages"][0]["final_loss"])
    result = evaluate(tmp_path, lengths=(32, 64))
    assert [r["length"] for r in result["lengths"]] == [32, 64]
    assert all(np.isfinite(r["loss"]) for r in result["lengths"])
    assert io.read_json(tmp_path / "extrapolation.json") == result


def test_a_registered_model_kind_trains(tmp_path):
    config = _config(kind="toy_lm")
    assert Experiment.from_config(config).model_class is ToyLM
    summary = trainer.train(config, tmp_path, progress=False)
    assert np.isfinite(summary["stages"][0]["final_loss"])


def test_registering_a_name_twice_is_refused_and_unknown_kinds_list_the_valid_ones():
    with pytest.raises(ValueError, match="registered twice"):
        data.register("toy_counting")(ToyCounting)
    with pytest.raises(ValueError, match="registered twice"):
        models.register("toy_lm")(ToyLM)
    config = _config(kind="toy_lmm")
    with pytest.raises(ConfigError, match="did you mean 'toy_lm'"):
        Experiment.from_config(config)
