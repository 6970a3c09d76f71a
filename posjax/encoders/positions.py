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


def segment_bounds(segment_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """segment_ids int[..., L] (contiguous runs; padding is a run like any other) ->
    (start, end) int32[..., L]: the index of the first and of the last token of each token's
    run."""
    segment_ids = jnp.asarray(segment_ids)
    axis = segment_ids.ndim - 1
    index = jnp.arange(segment_ids.shape[-1], dtype=jnp.int32)
    first = jnp.concatenate([jnp.ones_like(segment_ids[..., :1], bool),
                             segment_ids[..., 1:] != segment_ids[..., :-1]], axis=-1)
    last = jnp.concatenate([first[..., 1:], jnp.ones_like(first[..., :1])], axis=-1)
    start = jax.lax.cummax(jnp.where(first, index, 0), axis=axis)
    end = jax.lax.cummin(jnp.where(last, index, segment_ids.shape[-1] - 1), axis=axis,
                         reverse=True)
    return start, end


def pose_positions(rng: jax.Array, positions: jax.Array, target_len: int, chunks: int = 2,
                   segment_ids: jax.Array | None = None) -> jax.Array:
    """PoSE, positional skip-wise training (Zhu et al., ICLR 2024, "PoSE: Efficient Context
    Window Extension of LLMs via Positional Skip-wise Training"; dwzhu-pku/PoSE): a sequence
    of k tokens is cut into `chunks` chunks and chunk c's positions are shifted by a skip
    u_c, so that k training positions reach across a target length L_t.

    As the paper's eq. 3-4 state it: the sequence is divided at random (here: cut points
    uniform in [1, k - 1], sorted; the authors' code, for N = 2, draws the first chunk's
    length from [1, (k + 1) / 2]), u_0 = 0 and u_c is uniform in {u_{c-1}, ..., L_t - k}, so
    positions stay increasing and the last is at most L_t - 1. Within a chunk distances are
    the ordinary ones; across a skip they reach up to L_t - 1. The paper also draws each
    chunk's text from further along the document (eq. 5) and reports that contiguous text
    (its v_i = 0) changes little; here the text stays contiguous (the data pipeline's) and
    only positions change, as for `randomize_positions`.

    positions: int[..., L], restarting at 0 in each segment; segment_ids: int[..., L] or None
    (each row one sequence) -> same shape and dtype. Each packed segment draws on its own
    (its draws are those of the row at its first token). The same rng gives the same
    positions.
    """
    positions = jnp.asarray(positions)
    length = positions.shape[-1]
    if target_len < length:
        raise ConfigError(f"pose target length {target_len} < sequence length {length}: "
                          "PoSE stretches a short window over a longer target; set it >= "
                          f"{length}")
    if chunks < 1:
        raise ConfigError(f"pose chunks={chunks} must be >= 1 (the paper uses 2)")
    rows = positions.reshape(-1, length)
    segments = (jnp.zeros_like(rows) if segment_ids is None
                else jnp.asarray(segment_ids).reshape(rows.shape))
    start, end = segment_bounds(segments)
    size = (end - start + 1).astype(jnp.float32)  # k, per token
    cuts_u, skips_u = jax.random.uniform(rng, (2, rows.shape[0], length, chunks - 1))
    row = jnp.arange(rows.shape[0])[:, None]
    cuts_u, skips_u = cuts_u[row, start], skips_u[row, start]  # the segment's own draws
    cuts = jnp.sort(1.0 + jnp.floor(cuts_u * (size[..., None] - 1.0)), axis=-1)
    chunk = jnp.sum(cuts <= rows[..., None].astype(jnp.float32), axis=-1)

    def next_skip(previous, uniform):
        skip = previous + jnp.floor(uniform * (target_len - size - previous + 1.0))
        return skip, skip

    _, later = jax.lax.scan(next_skip, jnp.zeros_like(size), jnp.moveaxis(skips_u, -1, 0))
    skips = jnp.concatenate([jnp.zeros_like(size)[None], later], axis=0)  # [chunks, ...]
    shift = jnp.take_along_axis(jnp.moveaxis(skips, 0, -1), chunk[..., None], axis=-1)[..., 0]
    out = rows + shift.astype(rows.dtype)
    return out.reshape(positions.shape).astype(positions.dtype)
