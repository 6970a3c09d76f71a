"""Position transforms that any encoding can take: encodings only ever see positions."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from posjax.errors import ConfigError


def randomize_positions(rng: jax.Array, positions: jax.Array, max_position: int) -> jax.Array:
    """Randomized positions: replace 0 .. L-1 by L sorted distinct draws from [0, max_position).

    positions: int[..., L] with values in [0, L) -> same shape and dtype.
    For each row, draw L distinct integers uniformly from [0, max_position), sort them, and
    map position p -> sorted[p]. Packed rows restart their positions at 0 in every segment,
    so each segment gets an increasing prefix of the row's draw: still distinct and ordered.
    The same rng gives the same positions. Source: Ruoss et al., "Randomized Positional
    Encodings Boost Length Generalization of Transformers", ACL 2023.
    """
    positions = jnp.asarray(positions)
    length = positions.shape[-1]
    if max_position < length:
        raise ConfigError(
            f"randomize_positions: max_position={max_position} < sequence length {length}; "
            "it needs at least one distinct position per token (Ruoss et al. use 2048)"
        )
    rows = positions.reshape(-1, length)
    keys = jax.random.split(rng, rows.shape[0])

    def draw(key):
        return jnp.sort(jax.random.choice(key, max_position, (length,), replace=False))

    table = jax.vmap(draw)(keys)
    out = jnp.take_along_axis(table, rows, axis=1)
    return out.reshape(positions.shape).astype(positions.dtype)


def shift_positions(positions: jax.Array, offset: int | jax.Array) -> jax.Array:
    """positions + offset (same dtype): e.g. evaluate a window as if it started at `offset`.

    positions: int[...], offset: int scalar or broadcastable int array -> int[...]
    Relative encodings are unchanged by a shift; absolute ones see new positions.
    """
    positions = jnp.asarray(positions)
    return (positions + jnp.asarray(offset, positions.dtype)).astype(positions.dtype)
