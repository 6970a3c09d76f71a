"""The optimizer by name (`train.optimizer`, `train.optimizer_args`): the default is today's
AdamW bit for bit, another optax optimizer is one config change, a bad name or argument is a
one-line error naming the valid ones."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from posjax import config as configlib
from posjax.errors import ConfigError
from posjax.train import optim

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
PARAMS = {"w": jnp.arange(6.0).reshape(2, 3) / 7, "b": jnp.linspace(-1.0, 1.0, 3)}
GRADS = jax.tree.map(lambda p: jnp.cos(3 * p) - 0.3, PARAMS)


def _train_cfg(**changes) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({**configlib.TRAIN_DEFAULTS, **changes})


def _updates(tx, steps: int) -> list:
    state, out = tx.init(PARAMS), []
    for _ in range(steps):
        updates, state = tx.update(GRADS, state, PARAMS)
        out.append(updates)
    return out


def _equal(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b),
                                                    strict=True))


def test_the_default_is_todays_adamw_with_b2_098_bit_for_bit():
    cfg = _train_cfg(warmup_steps=2)
    assert (cfg.optimizer, cfg.optimizer_args) == ("adamw", '{"b1": 0.9, "b2": 0.98}')
    before = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(
        optim.schedule(cfg, 10), b1=0.9, b2=0.98, weight_decay=0.01, mask=optim._decay_mask))
    ours = optim.optimizer(cfg, 10)
    assert (jax.tree.structure(ours.init(PARAMS)) == jax.tree.structure(before.init(PARAMS)))
    assert _equal(_updates(ours, 4), _updates(before, 4))


def test_equal_settings_give_the_same_optimizer_object():
    # the jitted train step takes it as a static argument: one compile per setting
    reordered = _train_cfg(optimizer_args='{"b2": 0.98, "b1": 0.9}')
    assert optim.optimizer(_train_cfg(), 10) is optim.optimizer(reordered, 10)
    # a config without the keys (a run from before they existed) is the default
    old = ml_collections.ConfigDict({k: v for k, v in configlib.TRAIN_DEFAULTS.items()
                                     if not k.startswith("optimizer")})
    assert optim.optimizer(old, 10) is optim.optimizer(_train_cfg(), 10)


def test_sgd_with_momentum_by_name_keeps_a_trace_and_accumulates_it():
    cfg = _train_cfg(optimizer="sgd", optimizer_args='{"momentum": 0.9}', weight_decay=0.0,
                     grad_clip=100.0, schedule="constant", warmup_steps=0)
    tx = optim.optimizer(cfg, 10)
    traces = [s for s in jax.tree.leaves(tx.init(PARAMS),
                                         is_leaf=lambda s: isinstance(s, optax.TraceState))
              if isinstance(s, optax.TraceState)]
    assert len(traces) == 1
    first, second = _updates(tx, 2)
    lr = cfg.learning_rate
    for key in PARAMS:
        np.testing.assert_allclose(first[key], -lr * GRADS[key], rtol=1e-6)
        np.testing.assert_allclose(second[key], -lr * 1.9 * GRADS[key], rtol=1e-6)


def test_weight_decay_reaches_an_optimizer_without_its_own_as_l2_on_matrices_only():
    cfg = _train_cfg(optimizer="sgd", optimizer_args="{}", grad_clip=100.0,
                     schedule="constant", warmup_steps=0, weight_decay=0.5)
    (update,) = _updates(optim.optimizer(cfg, 10), 1)
    lr = cfg.learning_rate
    np.testing.assert_allclose(update["w"], -lr * (GRADS["w"] + 0.5 * PARAMS["w"]), rtol=1e-6)
    np.testing.assert_allclose(update["b"], -lr * GRADS["b"], rtol=1e-6)


def test_adamw_arguments_are_the_configs():
    cfg = _train_cfg(optimizer_args='{"b2": 0.95}', warmup_steps=0)
    reference = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(
        optim.schedule(cfg, 10), b2=0.95, weight_decay=0.01, mask=optim._decay_mask))
    ours = _updates(optim.optimizer(cfg, 10), 3)
    assert _equal(ours, _updates(reference, 3))
    assert not _equal(ours[2], _updates(optim.optimizer(_train_cfg(warmup_steps=0), 10), 3)[2])


@pytest.mark.parametrize(("changes", "message"), [
    (dict(optimizer="sdg"), "unknown train.optimizer 'sdg' (did you mean 'sgd'?); valid: "
                            "adabelief, adafactor, adagrad, adam,"),
    (dict(optimizer="sgd"), "optax.sgd takes no argument 'b1' (it takes momentum, nesterov, "
                            "accumulator_dtype): set --config.train.optimizer_args"),
    (dict(optimizer_args='{"learning_rate": 1}'), "learning_rate is set by "
                                                  "train.learning_rate"),
    (dict(optimizer_args="b2=0.9"), "train.optimizer_args='b2=0.9' is not a JSON object"),
])
def test_a_bad_optimizer_or_argument_is_one_line_naming_the_valid_ones(changes, message):
    with pytest.raises(ConfigError) as info:
        optim.optimizer(_train_cfg(**changes), 10)
    assert isinstance(info.value, ValueError)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_optimizer_is_chosen_on_the_command_line():
    config = configlib.configured(f"{LM}:smoke", ["--config.train.optimizer=sgd",
                                            '--config.train.optimizer_args={"momentum": 0.9}'])
    assert config.train.optimizer == "sgd"
    state = optim.optimizer(config.train, 6).init(PARAMS)
    assert any(isinstance(s, optax.TraceState) for s in jax.tree.leaves(
        state, is_leaf=lambda s: isinstance(s, optax.TraceState)))


def test_a_warmup_that_does_not_end_before_the_run_is_refused():
    optim.check(_train_cfg(warmup_steps=5), 6)
    with pytest.raises(ConfigError, match=r"train.warmup_steps=6 does not end before the "
                                          r"run's 6 steps: set --config.train.warmup_steps "
                                          r"below 6"):
        optim.check(_train_cfg(warmup_steps=6), 6)


@pytest.mark.parametrize(("field", "value", "says"), [
    ("learning_rate", -1.0, "train.learning_rate=-1 must be > 0: give a positive rate"),
    ("learning_rate", 0.0, "train.learning_rate=0 must be > 0"),
    ("grad_clip", -1.0, "train.grad_clip=-1 must be > 0: give a positive global norm"),
    ("grad_clip", 0.0, "train.grad_clip=0 must be > 0"),
    ("weight_decay", -0.1, "train.weight_decay=-0.1 must be >= 0: give 0 for no decay"),
    ("weight_decay", float("nan"), "train.weight_decay=nan must be >= 0")])
def test_a_rate_clipping_norm_or_decay_out_of_range_is_refused(field, value, says):
    """A negative clipping norm reversed every update and trained with rc 0; a negative
    rate was caught only as divergence, with the advice to lower it."""
    optim.check(_train_cfg(warmup_steps=1, **{field: 0.5}), 6)
    with pytest.raises(ConfigError, match=re.escape(says)):
        optim.check(_train_cfg(warmup_steps=1, **{field: value}), 6)


def test_a_restart_starts_the_schedule_again_with_its_own_warmup_and_decay():
    """schedule_restarts=(80,) over 100 steps: the first part is the plain schedule over 80
    steps (to 0 at its end), the second warms up over a tenth of its 20 steps to the peak
    and decays to 0 at the run's end."""
    plain = optim.schedule(_train_cfg(learning_rate=1e-3, warmup_steps=10), 80)
    restarted = optim.schedule(_train_cfg(learning_rate=1e-3, warmup_steps=10,
                                          schedule_restarts=(80,)), 100)
    for step in (0, 5, 10, 40, 79):
        assert float(restarted(step)) == pytest.approx(float(plain(step)), abs=1e-12)
    assert float(restarted(80)) == 0.0  # the restart's warm-up begins
    assert float(restarted(82)) == pytest.approx(1e-3)  # its peak after 2 steps
    assert float(restarted(91)) == pytest.approx(0.5e-3, rel=1e-2)  # half-way down
    assert float(restarted(100)) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("restarts", [(0,), (100,), (50, 40), (30, 30)])
def test_restarts_outside_the_run_or_out_of_order_are_refused(restarts):
    with pytest.raises(ConfigError, match=re.escape(f"train.schedule_restarts={restarts!r}: "
                                                    "give increasing steps between 1 and 99")):
        optim.check(_train_cfg(warmup_steps=5, schedule_restarts=restarts), 100)
