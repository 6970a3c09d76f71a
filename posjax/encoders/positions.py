"""Position transforms that any encoding can take: encodings only ever see positions."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from posjax.errors import ConfigError


def randomize_positions(rng: jax.Array, positions: jax.Array, max_position: int,
                        segment_ids: jax.Array | None = None) -> jax.Array:
    """Randomized positions: each sequence's 0 .. k-1 become k sorted distinct draws from
    [0, max_position) (Ruoss et al., "Randomized Positional Encodings Boost Length
    Generalization of Transformers", ACL 2023).

    positions: int[..., L], restarting at 0 in each segment (0 .. k-1 over its k tokens);
    segment_ids: int[..., L] or None (each row one sequence) -> same shape and dtype as
    positions. Each packed segment draws on its own, as a sequence of its own length would:
    a row takes L distinct values of a random permutation of [0, max_position), each
    segment the block of them at its own tokens, sorted, and position p maps to the p-th
    smallest. A block of k entries of a uniform permutation is a uniform k-subset, so every
    segment's positions are distributed exactly as an unpacked sequence's (segments of one
    row never share a value). The same rng gives the same positions.
    """
    positions = jnp.asarray(positions)
    length = positions.shape[-1]
    if max_position < length:
        raise ConfigError(
            f"randomize_positions: max_position={max_position} < sequence length {length}; "
            "it needs at least one distinct position per token (Ruoss et al. use 2048)"
        )
    rows = positions.reshape(-1, length)
    if segment_ids is None:
        segment_ids = jnp.zeros_like(rows)
    segments = jnp.asarray(segment_ids).reshape(rows.shape)
    keys = jax.random.split(rng, rows.shape[0])
    index = jnp.arange(length)

    def one_row(key, pos, seg):
        draws = jax.random.permutation(key, max_position)[:length]
        new_segment = jnp.concatenate([jnp.ones(1, bool), seg[1:] != seg[:-1]])
        start = jax.lax.cummax(jnp.where(new_segment, index, 0))
        _, ascending = jax.lax.sort((start, draws), num_keys=2)  # sorted within each block
        return ascending[start + pos]

    out = jax.vmap(one_row)(keys, rows, segments)
    return out.reshape(positions.shape).astype(positions.dtype)


def shift_positions(positions: jax.Array, offset: int | jax.Array) -> jax.Array:
    """positions + offset (same dtype): e.g. evaluate a window as if it started at `offset`.

    positions: int[...], offset: int scalar or broadcastable int array -> int[...]
    Relative encodings are unchanged by a shift; absolute ones see new positions.
    """
    positions = jnp.asarray(positions)
    return (positions + jnp.asarray(offset, positions.dtype)).astype(positions.dtype)
