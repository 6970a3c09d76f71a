"""Pure train and evaluation steps, jitted once per batch shape.

The model lives as `nnx.split` state: a static graphdef, its parameters (trained) and the
rest (constant: dropout draws from a stream seeded by the step number inside the step, so the
step is a pure function of (state, batch) and a resumed run repeats the same randomness).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from posjax.attention import fused
from posjax.encoders.positions import pose_positions, randomize_positions
from posjax.models import moe

# `diverged_at` of a step whose loss, gradients and new parameters are all finite.
NEVER = 2**31 - 1
# Where `shared_positions` takes effect: on an accelerator, building a bias once per batch
# saves more than its gradient's sum over the batch costs; on a CPU it does not
# (experiments/bench/shared_positions_cpu).
SHARED_POSITIONS_PLATFORMS = frozenset({"gpu", "tpu"})


class TrainState(NamedTuple):
    """Everything a step changes; saved whole in each checkpoint."""

    step: jax.Array  # int32 scalar: optimizer steps taken
    params: Any  # nnx.State of the model's nnx.Param variables
    opt_state: Any  # optax state
    rng: jax.Array  # uint32[2]: raw key data; per-step keys are fold_in(rng, step)


def initial_state(params, tx: optax.GradientTransformation, seed: int) -> TrainState:
    """The state before step 0: `params`, `tx`'s fresh optimizer state and the rng of
    `seed` (the run's train.seed)."""
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=tx.init(params),
        rng=jax.random.key_data(jax.random.key(seed)),
    )


def step_options(experiment, graphdef, tx, stage=None) -> dict:
    """The static arguments of `train_step(s)` for an Experiment, built once per stage: the
    model's graphdef, the optimizer, the input field, randomized or PoSE positions, whether
    the data's rows are whole (BatchSpec.whole_rows: no mask, position terms once) and
    whether one row of positions serves the batch (Experiment.shares_positions, for the
    encoding `stage` trains with; train_step applies it only on the platforms where it pays,
    SHARED_POSITIONS_PLATFORMS: on a CPU it changes nothing)."""
    encoding = experiment.stage_encoding(stage) if stage else experiment.encoding
    return dict(graphdef=graphdef, tx=tx, input_key=experiment.input_key,
                randomize_positions_to=experiment.randomize_positions_to,
                whole_rows=experiment.whole_rows,
                shared_positions=experiment.shares_positions(encoding), pose=experiment.pose)


def argmax_is(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """`jnp.argmax(logits, -1) == targets`, exactly (ties go to the first class, a NaN counts
    as the maximum), as the first class at the maximum: a max and a min over the classes,
    which XLA:CPU vectorises, where argmax's two-operand reduction runs as a scalar loop
    (experiments/bench, "Token correctness without argmax").

    logits: [..., C], targets: int[...] -> bool[...].
    """
    at_top = (logits == jnp.max(logits, axis=-1, keepdims=True)) | jnp.isnan(logits)
    classes = jnp.arange(logits.shape[-1], dtype=jnp.int32)
    first = jnp.min(jnp.where(at_top, classes, logits.shape[-1]), axis=-1)
    return first == targets


def token_losses(logits: jax.Array, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-token cross-entropy and correctness.

    logits: [..., C] (any dtype; computed in float32), targets: int[...]
    -> (float32[...], bool[...]).
    """
    logits = logits.astype(jnp.float32)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    return loss, argmax_is(logits, targets)


def weighted_sums(logits, targets, weights) -> dict[str, jax.Array]:
    """Sums a batch contributes to its metrics: loss, correct and weight totals (float32)."""
    loss, correct = token_losses(logits, targets)
    weights = weights.astype(jnp.float32)
    return {
        "loss_sum": jnp.sum(loss * weights),
        "correct_sum": jnp.sum(correct * weights),
        "weight_sum": jnp.sum(weights),
    }


def _apply(model: nnx.Module, batch, input_key: str, positions, segment_ids,
           deterministic: bool, rngs: nnx.Rngs | None = None):
    return model(batch[input_key], positions, segment_ids, deterministic=deterministic,
                 rngs=rngs)


def model_segments(batch, whole_rows: bool, positions_vary: bool):
    """The segment ids the model is called with: None (no mask, position terms built once
    for the batch; posjax.attention.whole_rows) where the data's rows are whole and keep
    their shared positions (positions_vary: a transform draws each row's own), else the
    batch's own."""
    return None if whole_rows and not positions_vary else batch["segment_ids"]


def train_positions(key, batch, randomize_positions_to: int, pose: tuple[int, int]):
    """The positions a training step feeds the model: the batch's, or a fresh draw of
    randomized positions (M = randomize_positions_to > 0) or of PoSE's skipped chunks
    (pose = (target length, chunks), target > 0)."""
    positions = batch["positions"]
    if randomize_positions_to:
        positions = randomize_positions(key, positions, randomize_positions_to,
                                        batch["segment_ids"])
    if pose[0]:
        positions = pose_positions(key, positions, pose[0], pose[1], batch["segment_ids"])
    return positions


@functools.partial(
    jax.jit,
    static_argnames=("graphdef", "tx", "input_key", "randomize_positions_to", "whole_rows",
                     "shared_positions", "pose"),
    donate_argnames=("state",),
)
def train_step(
    state: TrainState,
    rest,
    batch: dict[str, jax.Array],
    *,
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    input_key: str,
    randomize_positions_to: int = 0,
    whole_rows: bool = False,
    shared_positions: bool = False,
    pose: tuple[int, int] = (0, 2),
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimizer step on `batch`; returns the new state and the batch's metric sums
    (loss_sum, correct_sum, weight_sum, grad_norm, and diverged_at: this step's 1-based number
    if its loss, gradients or new parameters are not finite, else NEVER).

    rest: the model's non-parameter state (rng streams), constant across steps: dropout is
    drawn from a stream seeded by the step number, so a resumed run draws the same masks.

    randomize_positions_to: M > 0 replaces each packed segment's positions by sorted distinct
    draws from [0, M) (Ruoss et al. 2023), a fresh draw every step.

    pose: (L_t, N) with L_t > 0 gives each packed segment PoSE's positions, N chunks with
    random skips reaching across L_t (Zhu et al. 2024), a fresh draw every step.

    whole_rows: the data's BatchSpec.whole_rows (every row one segment at positions
    0..L-1): the model gets no segment ids (`model_segments`), so attention needs no mask.

    shared_positions: on an accelerator (SHARED_POSITIONS_PLATFORMS) the model gets one row
    of positions, int32[1, L] = 0..L-1, for every example (`Experiment.shared_positions`: an
    encoding that reads only k_pos - q_pos, on segments whose positions count up by one), so
    its bias is built once per step; the segment mask keeps the pairs whose gaps would
    differ apart.
    """
    step_key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
    position_key, dropout_key = jax.random.split(step_key)
    positions = train_positions(position_key, batch, randomize_positions_to, pose)
    segment_ids = model_segments(batch, whole_rows, bool(randomize_positions_to or pose[0]))
    if shared_positions and jax.default_backend() in SHARED_POSITIONS_PLATFORMS:
        positions = jnp.arange(positions.shape[1], dtype=positions.dtype)[None]

    def loss_fn(params):
        module = nnx.merge(graphdef, params, rest)
        # A stream made here, at value_and_grad's trace level: nnx refuses to advance the
        # model's own streams (made outside) from inside it.
        logits = _apply(module, batch, input_key, positions, segment_ids, deterministic=False,
                        rngs=nnx.Rngs(dropout=dropout_key))
        sums = weighted_sums(logits, batch["targets"], batch["weights"])
        loss = sums["loss_sum"] / jnp.maximum(sums["weight_sum"], 1.0)
        return loss + moe.balance_loss(module), sums

    (loss, sums), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    sums["grad_norm"] = optax.tree.norm(grads)
    # A finite loss can still leave nan/inf parameters (an overflowing update), and those
    # are what a checkpoint would keep: check all three.
    finite = jnp.isfinite(loss) & jnp.isfinite(sums["grad_norm"]) & jnp.all(
        jnp.stack([jnp.all(jnp.isfinite(p)) for p in jax.tree.leaves(params)])
    )
    sums["diverged_at"] = jnp.where(finite, NEVER, state.step + 1)
    return TrainState(state.step + 1, params, opt_state, state.rng), sums


def accumulate(total: dict, sums: dict) -> dict:
    """Metric sums over a logging window: totals add up, `diverged_at` keeps the earliest."""
    if not total:
        return sums
    return {k: jnp.minimum(total[k], v) if k == "diverged_at" else total[k] + v
            for k, v in sums.items()}


@functools.partial(jax.jit, static_argnames=("graphdef", "input_key"))
def eval_step(params, rest, batch, *, graphdef: nnx.GraphDef, input_key: str):
    """Metric sums of a batch (no dropout)."""
    logits = _apply(nnx.merge(graphdef, params, rest), batch, input_key, batch["positions"],
                    batch["segment_ids"], deterministic=True)
    return weighted_sums(logits, batch["targets"], batch["weights"])


@functools.partial(jax.jit, static_argnames=("graphdef", "input_key"))
def eval_token_losses(params, rest, batch, *, graphdef: nnx.GraphDef, input_key: str):
    """Per-token (loss, correct) of a batch: float32[B, L], bool[B, L]."""
    logits = _apply(nnx.merge(graphdef, params, rest), batch, input_key, batch["positions"],
                    batch["segment_ids"], deterministic=True)
    return token_losses(logits, batch["targets"])


def finish(sums: dict[str, float]) -> dict[str, float]:
    """Mean loss and accuracy from accumulated sums."""
    weight = max(float(sums["weight_sum"]), 1.0)
    return {"loss": float(sums["loss_sum"]) / weight, "acc": float(sums["correct_sum"]) / weight}


@functools.partial(
    jax.jit,
    static_argnames=("graphdef", "tx", "input_key", "randomize_positions_to", "whole_rows",
                     "shared_positions", "pose"),
    donate_argnames=("state",),
)
def train_steps(state: TrainState, rest, batch: dict[str, jax.Array], *,
                graphdef: nnx.GraphDef, tx: optax.GradientTransformation, input_key: str,
                randomize_positions_to: int = 0, whole_rows: bool = False,
                shared_positions: bool = False,
                pose: tuple[int, int] = (0, 2)) -> tuple[TrainState, dict[str, jax.Array]]:
    """`train_step` of N seeds in one program: state, rest, batch and the returned state and
    sums all carry a leading seed axis [N, ...]. Lane k computes what `train_step` computes on
    seed k's state and batch alone (its own rng, so its own dropout and randomized positions),
    up to the float rounding of batched matmuls."""
    def one(state, rest, batch):
        return train_step(state, rest, batch, graphdef=graphdef, tx=tx, input_key=input_key,
                          randomize_positions_to=randomize_positions_to,
                          whole_rows=whole_rows, shared_positions=shared_positions,
                          pose=pose)

    with fused.under_vmap():  # cuDNN's batching rule needs full-shape biases
        return jax.vmap(one)(state, rest, batch)


def compiled_step_bytes(experiment, tx, stage) -> int:
    """Bytes one device holds for a train step of `stage` as XLA compiles it (its
    `memory_analysis()`: arguments, outputs and scratch, less the donated state it reuses),
    from shapes alone: nothing is initialised or run."""
    model = experiment.abstract(experiment.stage_encoding(stage))
    state = jax.eval_shape(lambda params: initial_state(params, tx, 0), model.params)
    batch = experiment.batch_spec(stage).arrays
    options = step_options(experiment, model.graphdef, tx, stage)
    memory = train_step.lower(state, model.rest, batch, **options).compile().memory_analysis()
    return int(memory.argument_size_in_bytes + memory.output_size_in_bytes
               + memory.temp_size_in_bytes - memory.alias_size_in_bytes)
