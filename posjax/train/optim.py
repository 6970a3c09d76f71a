"""Learning-rate schedules and the optimizer: an optax optimizer by name (`train.optimizer`,
default AdamW with b2 0.98) after global-norm clipping."""

from __future__ import annotations

import functools
import inspect
import json
import math
import types
from collections.abc import Mapping

import jax
import optax

from posjax import config as configlib
from posjax.errors import ConfigError, unknown


def _cosine(lr: float, warmup: int, total: int) -> optax.Schedule:
    return optax.warmup_cosine_decay_schedule(0.0, lr, warmup, max(total, warmup + 1), 0.0)


def _constant(lr: float, warmup: int, total: int) -> optax.Schedule:
    del total
    return optax.join_schedules(
        [optax.linear_schedule(0.0, lr, max(warmup, 1)), optax.constant_schedule(lr)], [warmup]
    )


SCHEDULES = {"cosine": _cosine, "constant": _constant}

# The optax optimizers `train.optimizer` names: each takes the learning rate (the schedule)
# first; those taking `weight_decay` and `mask` get train.weight_decay decoupled, the others
# have it added to the gradient first (L2), matrices only either way.
OPTIMIZERS = tuple(name for name in (
    "adabelief", "adafactor", "adagrad", "adam", "adamax", "adamaxw", "adamw", "adan",
    "amsgrad", "lamb", "lion", "nadam", "nadamw", "novograd", "radam", "rmsprop", "sgd",
    "sign_sgd", "sm3", "yogi") if hasattr(optax, name))
# Arguments posjax sets from other train fields, never from train.optimizer_args.
_SET_ELSEWHERE = {"learning_rate": "train.learning_rate", "weight_decay": "train.weight_decay",
                  "mask": "the matrices-only decay mask"}


def schedule(train_cfg, total_steps: int) -> optax.Schedule:
    """Linear warmup over `warmup_steps`, then cosine decay to 0 at `total_steps` or constant.
    With `schedule_restarts` (steps), the schedule starts again at each: a warm-up of
    min(warmup_steps, a tenth of the part), then its decay to the next restart or the end
    (DroPE's recalibration gets its own). (A warm-up as long as the run is refused by
    `check`; here, for old runs, it is cut to the first part.)"""
    if train_cfg.schedule not in SCHEDULES:
        raise unknown("train.schedule", train_cfg.schedule, SCHEDULES)
    bounds = [0, *restarts(train_cfg), total_steps]
    warmups = [min(train_cfg.warmup_steps, max(bounds[1] - 1, 0)),
               *(min(train_cfg.warmup_steps, max((end - start) // 10, 1))
                 for start, end in zip(bounds[1:], bounds[2:], strict=False))]
    parts = [SCHEDULES[train_cfg.schedule](train_cfg.learning_rate, warmup, end - start)
             for warmup, start, end in zip(warmups, bounds, bounds[1:], strict=False)]
    return parts[0] if len(parts) == 1 else optax.join_schedules(parts, bounds[1:-1])


def _decay_mask(params):
    # Weight decay on matrices only: biases, norm scales and 1-D encoder parameters
    # (KERPLE's p and a, learned RoPE frequencies) are left alone, as in GPT-2 / BERT practice.
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def optimizer_args(train_cfg) -> str:
    """train.optimizer_args as canonical JSON text (a mapping or JSON text; absent: the
    default); a one-line ConfigError for text that is not a JSON object."""
    value = train_cfg.get("optimizer_args", configlib.TRAIN_DEFAULTS["optimizer_args"])
    if isinstance(value, Mapping) or hasattr(value, "to_dict"):
        args = dict(value.to_dict() if hasattr(value, "to_dict") else value)
    else:
        try:
            args = json.loads(value or "{}")
        except json.JSONDecodeError:
            args = None
        if not isinstance(args, dict):
            raise ConfigError(f"train.optimizer_args={value!r} is not a JSON object: write "
                              """e.g. --config.train.optimizer_args='{"momentum": 0.9}'""")
    return json.dumps(args, sort_keys=True)


def optimizer(train_cfg, total_steps: int) -> optax.GradientTransformation:
    """`train.optimizer` with `train.optimizer_args` and the schedule, after global-norm
    clipping; an unknown name or argument is a one-line ConfigError."""
    name = train_cfg.get("optimizer", configlib.TRAIN_DEFAULTS["optimizer"])
    return _optimizer(name, optimizer_args(train_cfg), train_cfg.schedule,
                      float(train_cfg.learning_rate), int(train_cfg.warmup_steps),
                      float(train_cfg.weight_decay), float(train_cfg.grad_clip),
                      int(total_steps), restarts(train_cfg))


def restarts(train_cfg) -> tuple[int, ...]:
    """train.schedule_restarts as a tuple of steps (absent in an old run's config: none)."""
    return tuple(int(r) for r in getattr(train_cfg, "schedule_restarts", ()))


def check(train_cfg, total_steps: int) -> None:
    """Refuse, before a run starts, what it could not honour: an unknown optimizer or
    argument, a rate, decay or clipping norm out of range (a negative rate or norm reverses
    the updates, a norm of 0 zeroes them, a negative decay grows the weights), or a
    warm-up that does not end before the run does."""
    optimizer(train_cfg, total_steps)
    for field, value, low, fix in (
            ("learning_rate", train_cfg.learning_rate, "> 0", "a positive rate"),
            ("grad_clip", train_cfg.grad_clip, "> 0",
             "a positive global norm (a large one, e.g. 1e9, clips nothing)"),
            ("weight_decay", train_cfg.weight_decay, ">= 0", "0 for no decay, or more")):
        value = float(value)
        if not math.isfinite(value) or (value <= 0 if low == "> 0" else value < 0):
            raise ConfigError(f"train.{field}={value:g} must be {low}: give {fix} "
                              f"(--config.train.{field}=...)")
    if total_steps and train_cfg.warmup_steps >= total_steps:
        raise ConfigError(f"train.warmup_steps={train_cfg.warmup_steps} does not end before "
                          f"the run's {total_steps} steps: set --config.train.warmup_steps "
                          f"below {total_steps}")
    points = restarts(train_cfg)
    if points and (list(points) != sorted(set(points)) or points[0] <= 0
                   or points[-1] >= total_steps):
        raise ConfigError(f"train.schedule_restarts={points}: give increasing steps between 1 "
                          f"and {total_steps - 1} (the run has {total_steps} steps)")


def _checked_args(name: str, args: dict) -> inspect.Signature:
    """The signature of optax's `name`, after refusing an unknown name or argument."""
    if name not in OPTIMIZERS:
        raise unknown("train.optimizer", name, OPTIMIZERS)
    signature = inspect.signature(getattr(optax, name))
    takes = [p for p in list(signature.parameters)[1:] if p not in _SET_ELSEWHERE]
    for key in args:
        if key in _SET_ELSEWHERE:
            raise ConfigError(f"train.optimizer_args: {key} is set by {_SET_ELSEWHERE[key]}, "
                              f"not here; drop it from optimizer_args")
        if key not in takes:
            raise ConfigError(f"train.optimizer_args: optax.{name} takes no argument "
                              f"{key!r} (it takes {', '.join(takes) or 'none'}): set "
                              "--config.train.optimizer_args to its arguments as JSON ('{}' "
                              "for optax's defaults)")
    return signature


# One object per distinct setting: the jitted train step takes the optimizer as a static
# argument, so equal settings must give an equal (here: the same) object to reuse its compile.
@functools.cache
def _optimizer(name, args_json, schedule_name, learning_rate, warmup_steps, weight_decay,
               grad_clip, total_steps, schedule_restarts=()) -> optax.GradientTransformation:
    args = json.loads(args_json)
    signature = _checked_args(name, args)
    train_cfg = types.SimpleNamespace(schedule=schedule_name, learning_rate=learning_rate,
                                      warmup_steps=warmup_steps,
                                      schedule_restarts=schedule_restarts)
    decay = []
    if {"weight_decay", "mask"} <= signature.parameters.keys():
        args = {**args, "weight_decay": weight_decay, "mask": _decay_mask}
    elif weight_decay:
        decay = [optax.add_decayed_weights(weight_decay, mask=_decay_mask)]
    try:
        chosen = getattr(optax, name)(schedule(train_cfg, total_steps), **args)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"train.optimizer_args {args_json} for optax.{name}: {e}") from None
    return optax.chain(optax.clip_by_global_norm(grad_clip), *decay, chosen)
