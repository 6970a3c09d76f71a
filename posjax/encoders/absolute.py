"""Absolute position encodings: the input site `embed(params, x, positions) -> x`.

Every encoding here turns integer positions into one vector per token and combines it with the
token embedding (`x: [B, L, D]`, `positions: int32[B, L]`). Vectors are computed in float32 and
the sum or product is cast back to `x.dtype` at the end.

A learned table has no value past its length: looking a position up past the end gives NaN
(`jnp.take(..., mode="fill")`) rather than silently reusing the last row, so an extrapolation
run that forgot `max_positions` fails loudly.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp

from posjax.encoders import register
from posjax.encoders.base import Dims, Encoding, Params, inverse_frequencies
from posjax.errors import ConfigError, unknown

# BERT / GPT-2 initialise position tables with N(0, 0.02^2).
TABLE_STD = 0.02


# How sines and cosines share the dims, by the name users pass as `layout`:
#   interleaved  p[k, 2i] = sin, p[k, 2i+1] = cos  (Vaswani et al. 2017, the paper's formula)
#   half         p[k, i] = sin, p[k, ceil(d/2) + i] = cos  (RoFormer's and x-transformers'
#                code: concat(sin, cos)); the same vectors up to a fixed permutation of dims
SINUSOID_LAYOUTS = {
    "interleaved": lambda sin, cos: jnp.stack([sin, cos], axis=-1).reshape(
        *sin.shape[:-1], -1),
    "half": lambda sin, cos: jnp.concatenate([sin, cos], axis=-1),
}


def log_spaced_frequencies(dim: int, base: float) -> jax.Array:
    """`base^(-i/(n-1))` for i = 0 .. n - 1, n = ceil(dim/2): float32[n], from 1 to 1/base.

    tensor2tensor's `get_timing_signal_1d` (min_timescale 1, max_timescale = base):
    log_timescale_increment = log(base) / max(n - 1, 1), inv_timescales =
    exp(arange(n) * -increment); T5, Mesh TensorFlow and many JAX codebases copy it.
    """
    n = -(-dim // 2)
    increment = math.log(base) / max(n - 1, 1)
    return jnp.exp(jnp.arange(n, dtype=jnp.float32) * -increment)


# How the frequencies are spaced, by the name users pass as `spacing` (dim, base) -> [ceil(d/2)]:
#   vaswani  base^(-2i/d)      (Vaswani et al. 2017, the paper's formula): the lowest is
#                              base^(-(d-2)/d), just above 1/base
#   t2t      base^(-i/(d/2-1)) (tensor2tensor's code): the lowest is exactly 1/base
SINUSOID_SPACINGS = {
    "vaswani": inverse_frequencies,
    "t2t": log_spaced_frequencies,
}


def sinusoidal(positions: jax.Array, dim: int, base: float = 10000.0,
               layout: str = "interleaved", spacing: str = "vaswani") -> jax.Array:
    """Sinusoidal position vectors, interleaved by default: even index = sin, odd index = cos.

    positions: int or float [...] -> float32[..., dim]
        p[k, 2i] = sin(k w_i),  p[k, 2i+1] = cos(k w_i),  w_i = base^(-2i/dim)
    spacing picks the frequencies w_i (SINUSOID_SPACINGS), layout where their sines and
    cosines go (SINUSOID_LAYOUTS); the two are independent, so tensor2tensor's own table is
    spacing="t2t" with layout="half" (concat(sin, cos)) at an even `dim`. An odd `dim` keeps
    ceil(dim/2) frequencies, spaced over that many, and drops the last cosine; tensor2tensor
    keeps floor(dim/2), spaced over those, and pads a zero column, so the two tables
    differ there.
    Source: Vaswani et al. 2017; tensor2tensor's get_timing_signal_1d for spacing="t2t".
    """
    if dim < 1:
        raise ConfigError(f"sinusoidal dim={dim} < 1: ask for at least one dimension")
    if not base > 0:
        raise ConfigError(f"sinusoidal base={base} must be > 0 (10000 in Vaswani et al.)")
    if layout not in SINUSOID_LAYOUTS:
        raise unknown("sinusoidal layout", layout, SINUSOID_LAYOUTS)
    if spacing not in SINUSOID_SPACINGS:
        raise unknown("sinusoidal spacing", spacing, SINUSOID_SPACINGS)
    frequencies = SINUSOID_SPACINGS[spacing](dim, base)
    angles = jnp.asarray(positions, jnp.float32)[..., None] * frequencies
    return SINUSOID_LAYOUTS[layout](jnp.sin(angles), jnp.cos(angles))[..., :dim]


def table_lookup(table: jax.Array, positions: jax.Array) -> jax.Array:
    """Rows of a position table, float32; NaN for positions past the table's end or below 0
    (jnp.take would read a negative one from the end).

    table: [n, D], positions: int[...] -> float32[..., D]
    """
    return jnp.take(table, _outside_as_past_end(positions, table.shape[0]), axis=0,
                    mode="fill", fill_value=jnp.nan).astype(jnp.float32)


def _outside_as_past_end(positions: jax.Array, n: int) -> jax.Array:
    """positions, with the negative ones moved past a table of n rows (so they read NaN)."""
    return jnp.where(positions < 0, n, positions)


def hierarchical_table(table: jax.Array, positions: jax.Array, alpha: float = 0.4) -> jax.Array:
    """Extend a trained table of n positions to n^2 positions without training.

    table: [n, D], positions: int[...] -> float32[..., D]
        u = (p - alpha * p[0]) / (1 - alpha)
        q[k] = alpha * u[k // n] + (1 - alpha) * u[k % n]
    For k < n this is p[k] (k // n = 0 and the alpha * p[0] terms cancel); past n^2, and
    below 0, the result is NaN. alpha != 0.5 keeps q[i*n + j] and q[j*n + i] apart.
    Source: Su, "层次分解位置编码" (hierarchical decomposition position encoding), 2020.
    """
    p = table.astype(jnp.float32)
    n = p.shape[0]
    u = (p - alpha * p[0]) / (1.0 - alpha)
    high = jnp.take(u, _outside_as_past_end(positions, n * n) // n, axis=0, mode="fill",
                    fill_value=jnp.nan)
    low = jnp.take(u, positions % n, axis=0)
    return alpha * high + (1.0 - alpha) * low


def floater_table(
    params: Params, num_positions: int, delta: float = 0.1, steps_per_position: int = 1
) -> jax.Array:
    """FLOATER position vectors p(k * delta), k = 0 .. num_positions - 1, by fixed-step RK4.

    params: "w_in" [D, H], "w_time" [H], "b_in" [H], "w_out" [H, D], "b_out" [D] and
    optionally "p0" [D] (else p(0) = 0). Returns float32[num_positions, D].
        dp/dt = h(p(t), t) = tanh(p W_in + t w_time + b_in) W_out + b_out
    integrated with `steps_per_position` classical Runge-Kutta steps per interval delta
    (one `lax.scan` over positions, so it jits and differentiates).
    Source: Liu et al., "Learning to Encode Position for Transformer with Continuous Dynamical
    Model", ICML 2020.
    """
    params = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), params)
    width = params["w_out"].shape[1]
    p0 = params["p0"] if "p0" in params else jnp.zeros((width,), jnp.float32)
    dt = delta / steps_per_position

    def field(p, t):
        hidden = jnp.tanh(p @ params["w_in"] + t * params["w_time"] + params["b_in"])
        return hidden @ params["w_out"] + params["b_out"]

    def rk4(step, p, t0):
        t = t0 + step * dt
        k1 = field(p, t)
        k2 = field(p + 0.5 * dt * k1, t + 0.5 * dt)
        k3 = field(p + 0.5 * dt * k2, t + 0.5 * dt)
        k4 = field(p + dt * k3, t + dt)
        return p + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)

    def interval(p, k):
        p = jax.lax.fori_loop(0, steps_per_position, lambda s, q: rk4(s, q, k * delta), p)
        return p, p

    ks = jnp.arange(num_positions - 1, dtype=jnp.float32)
    _, rest = jax.lax.scan(interval, p0, ks)
    return jnp.concatenate([p0[None], rest], axis=0)


def _add(x: jax.Array, p: jax.Array) -> jax.Array:
    return (x.astype(jnp.float32) + p).astype(x.dtype)


def _check_width(dims: Dims) -> None:
    if dims.d_model < 1:
        raise ConfigError(f"d_model={dims.d_model} < 1: a model needs at least one dimension")


class _Table(Encoding):
    """A learned table "table" [max_len, d_model], init N(0, 0.02^2), defining max_len
    positions; subclasses define how embed uses it."""

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        return {"table": TABLE_STD * jax.random.normal(rng, (dims.max_len, dims.d_model))}

    def check(self, dims: Dims) -> None:
        super().check(dims)
        _check_width(dims)
        if dims.max_len < 1:
            raise ConfigError(
                f"max_len={dims.max_len} < 1: a position table needs at least one row"
            )

    def max_positions(self, dims: Dims) -> int:
        return dims.max_len


@register("none")
@dataclasses.dataclass(frozen=True)
class NoPE(Encoding):
    """No position encoding at all (NoPE): no sites, no parameters.

    Causal decoders can still infer order from the mask. Source: Kazemnejad et al., "The
    Impact of Positional Encoding on Length Generalization in Transformers", NeurIPS 2023.
    """

    distance_only: ClassVar[bool] = True


@register("learned")
@dataclasses.dataclass(frozen=True)
class Learned(_Table):
    """A trainable table (BERT / GPT): x + table[pos].

    params: "table" [max_len, d_model], init N(0, 0.02^2). embed: x [B, L, D],
    positions int32[B, L] -> [B, L, D]. Positions >= max_len give NaN (no defined value).
    """

    def embed(self, params: Params, x: jax.Array, positions: jax.Array) -> jax.Array:
        return _add(x, table_lookup(params["table"], positions))


@register("sinusoidal")
@dataclasses.dataclass(frozen=True)
class Sinusoidal(Encoding):
    """Fixed sinusoids (Vaswani et al. 2017): x + sinusoidal(pos, d_model, base, layout,
    spacing).

    layout: "interleaved" (the paper, default) or "half" (RoFormer / x-transformers code).
    spacing: "vaswani" (the paper's base^(-2i/d), default) or "t2t" (tensor2tensor's
    base^(-i/(d/2-1)), as T5 and Mesh TF); any spacing goes with any layout, and
    spacing="t2t", layout="half" is tensor2tensor's table.
    No parameters. embed: x [B, L, D], positions int32[B, L] -> [B, L, D].
    """

    base: float = 10000.0
    layout: str = "interleaved"
    spacing: str = "vaswani"

    def check(self, dims: Dims) -> None:
        super().check(dims)
        _check_width(dims)
        if self.base <= 1.0:
            raise ConfigError(f"sinusoidal base={self.base} must be > 1 (10000 is the usual)")
        if self.layout not in SINUSOID_LAYOUTS:
            raise unknown("sinusoidal layout", self.layout, SINUSOID_LAYOUTS)
        if self.spacing not in SINUSOID_SPACINGS:
            raise unknown("sinusoidal spacing", self.spacing, SINUSOID_SPACINGS)

    def embed(self, params: Params, x: jax.Array, positions: jax.Array) -> jax.Array:
        del params
        return _add(x, sinusoidal(positions, x.shape[-1], self.base, self.layout, self.spacing))


@register("multiplicative")
@dataclasses.dataclass(frozen=True)
class Multiplicative(_Table):
    """A learned table combined by product: x * (1 + table[pos]).

    This is bert4keras's `merge_mode="mul"` form `x * (p + 1)`: with the table initialised
    near zero (N(0, 0.02^2)) the model starts from the plain token embeddings.
    params: "table" [max_len, d_model]. embed: x [B, L, D], positions int32[B, L] -> [B, L, D].
    """

    def embed(self, params: Params, x: jax.Array, positions: jax.Array) -> jax.Array:
        scale = 1.0 + table_lookup(params["table"], positions)
        return (x.astype(jnp.float32) * scale).astype(x.dtype)


@register("hierarchical")
@dataclasses.dataclass(frozen=True)
class Hierarchical(_Table):
    """A learned table extended to max_len^2 positions by hierarchical decomposition.

    Same parameters as `learned` ("table" [max_len, d_model]), so a model trained with
    `learned` can be evaluated with `hierarchical` and keeps its outputs below max_len.
    embed: x + hierarchical_table(table, pos, alpha) (see that function for the formula).
    """

    alpha: float = 0.4

    def check(self, dims: Dims) -> None:
        super().check(dims)
        if not 0.0 < self.alpha < 1.0 or self.alpha == 0.5:
            raise ConfigError(
                f"hierarchical alpha={self.alpha} must be in (0, 1) and not 0.5 "
                "(0.5 makes positions i*n+j and j*n+i equal); Su uses 0.4"
            )

    def embed(self, params: Params, x: jax.Array, positions: jax.Array) -> jax.Array:
        return _add(x, hierarchical_table(params["table"], positions, self.alpha))

    def max_positions(self, dims: Dims) -> int:
        return dims.max_len**2


@register("floater")
@dataclasses.dataclass(frozen=True)
class Floater(Encoding):
    """FLOATER: position vectors from a learned ODE, x + p(pos * delta) (Liu et al. 2020).

    See `floater_table` for the dynamics. The integration grid has a static size so the step
    jits once per shape: max(x.shape[1], max_positions_hint) positions, integrated from 0 on
    every call and then gathered. Positions past the grid give NaN: set `max_positions_hint`
    to the largest position the data can carry (e.g. the M of randomized positions, or an
    evaluation window's offset + length).

    h is initialised small (W_out ~ N(0, 0.02^2 / hidden), b_out = 0): |dp/dt| is bounded by
    sum |W_out| since tanh is, so p grows at most linearly and starts close to p(0)
    (learned, N(0, 0.02^2), when `learn_initial`, else 0).

    Hyperparameters: delta (time between positions), hidden (width of h),
    steps_per_position (RK4 steps per interval delta), max_positions_hint, learn_initial.
    params: w_in [D, hidden], w_time [hidden], b_in [hidden], w_out [hidden, D], b_out [D],
    p0 [D] (only when learn_initial). embed: x [B, L, D], positions int32[B, L] -> [B, L, D].
    """

    delta: float = 0.1
    hidden: int = 32
    steps_per_position: int = 1
    max_positions_hint: int = 0
    learn_initial: bool = True

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        k_in, k_time, k_out, k_p0 = jax.random.split(rng, 4)
        d, h = dims.d_model, self.hidden
        params = {
            "w_in": jax.random.normal(k_in, (d, h)) / math.sqrt(d),
            "w_time": jax.random.normal(k_time, (h,)),
            "b_in": jnp.zeros((h,)),
            "w_out": TABLE_STD / math.sqrt(h) * jax.random.normal(k_out, (h, d)),
            "b_out": jnp.zeros((d,)),
        }
        if self.learn_initial:
            params["p0"] = TABLE_STD * jax.random.normal(k_p0, (d,))
        return params

    def check(self, dims: Dims) -> None:
        super().check(dims)
        _check_width(dims)
        if self.delta <= 0:
            raise ConfigError(f"floater delta={self.delta} must be > 0 (e.g. 0.1)")
        if self.hidden < 1:
            raise ConfigError(f"floater hidden={self.hidden} must be >= 1 (e.g. 32)")
        if self.steps_per_position < 1:
            raise ConfigError(f"floater steps_per_position={self.steps_per_position} must be >= 1")
        if self.max_positions_hint < 0:
            raise ConfigError(
                f"floater max_positions_hint={self.max_positions_hint} must be >= 0 "
                "(0 = the batch length)"
            )

    def embed(self, params: Params, x: jax.Array, positions: jax.Array) -> jax.Array:
        grid = max(x.shape[1], self.max_positions_hint)
        table = floater_table(params, grid, self.delta, self.steps_per_position)
        return _add(x, table_lookup(table, positions))
