"""Learning-rate schedules and the optimizer (AdamW with global-norm clipping)."""

from __future__ import annotations

import functools
import types

import jax
import optax

from posjax.errors import unknown


def _cosine(lr: float, warmup: int, total: int) -> optax.Schedule:
    return optax.warmup_cosine_decay_schedule(0.0, lr, warmup, max(total, warmup + 1), 0.0)


def _constant(lr: float, warmup: int, total: int) -> optax.Schedule:
    del total
    return optax.join_schedules(
        [optax.linear_schedule(0.0, lr, max(warmup, 1)), optax.constant_schedule(lr)], [warmup]
    )


SCHEDULES = {"cosine": _cosine, "constant": _constant}


def schedule(train_cfg, total_steps: int) -> optax.Schedule:
    """Linear warmup over `warmup_steps`, then cosine decay to 0 at `total_steps` or constant."""
    if train_cfg.schedule not in SCHEDULES:
        raise unknown("train.schedule", train_cfg.schedule, SCHEDULES)
    warmup = min(train_cfg.warmup_steps, max(total_steps - 1, 0))
    return SCHEDULES[train_cfg.schedule](train_cfg.learning_rate, warmup, total_steps)


def _decay_mask(params):
    # Weight decay on matrices only: biases, norm scales and 1-D encoder parameters
    # (KERPLE's p and a, learned RoPE frequencies) are left alone, as in GPT-2 / BERT practice.
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def optimizer(train_cfg, total_steps: int) -> optax.GradientTransformation:
    """AdamW (b2 0.98 as in RoFormer/BERT-style pretraining) after global-norm clipping."""
    return _optimizer(train_cfg.schedule, float(train_cfg.learning_rate),
                      int(train_cfg.warmup_steps), float(train_cfg.weight_decay),
                      float(train_cfg.grad_clip), int(total_steps))


# One object per distinct setting: the jitted train step takes the optimizer as a static
# argument, so equal settings must give an equal (here: the same) object to reuse its compile.
@functools.cache
def _optimizer(schedule_name, learning_rate, warmup_steps, weight_decay, grad_clip,
               total_steps) -> optax.GradientTransformation:
    train_cfg = types.SimpleNamespace(schedule=schedule_name, learning_rate=learning_rate,
                                      warmup_steps=warmup_steps)
    return optax.chain(
        optax.clip_by_global_norm(grad_clip),
        optax.adamw(
            schedule(train_cfg, total_steps),
            b1=0.9,
            b2=0.98,
            weight_decay=weight_decay,
            mask=_decay_mask,
        ),
    )
