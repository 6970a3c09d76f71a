"""The gated delta rule (Yang, Kautz, Hatamizadeh, ICLR 2025, "Gated Delta Networks"): a
recurrent token mixer with a matrix state, in two forms that compute the same numbers.

Per head, with alpha_t = exp(g_t) in (0, 1] and beta_t in (0, 1):

    S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,      o_t = S_t q_t

(S_t: [Dv, Dk]; the code stores its transpose H_t = S_t^T, [Dk, Dv], as fla does). Written
as a delta-rule write of the decayed state, u_t = beta_t (v_t - (alpha_t H_{t-1})^T k_t),
H_t = alpha_t H_{t-1} + k_t u_t^T. Conventions follow fla (fla-org/flash-linear-attention,
fla/ops/gated_delta_rule): the gate comes as its logarithm g = log alpha <= 0, q is scaled by
Dk ** -0.5, and the GDN layer L2-normalises q and k first (`qk_l2norm`; fla's
`use_qk_l2norm_in_kernel`). Position enters only through the order of the recurrence: no
position encoding is applied.

`gated_delta_rule_recurrent` is the per-token recurrence (a lax.scan over L), the reference.
`gated_delta_rule_chunked` is the chunkwise form used to train: inside a chunk of C tokens
the writes u solve a unit lower-triangular system (the WY representation of the product of
the chunk's Householder-like factors), inverted by matmuls (`unit_lower_inverse`), so the
scan runs over L / C chunks carrying H, and the rest is matrix products. Both compute in
float32 whatever the inputs' dtype and return v's.

Packed rows: with `segment_ids` the state is reset where the segment id changes between
consecutive tokens, so a segment never reads an earlier one (each segment id is assumed to
be one contiguous run, as packing emits; padding, id 0, is one more run).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from posjax.errors import ConfigError

# fla's l2norm epsilon: x / sqrt(sum x^2 + eps).
L2_EPS = 1e-6


def l2_normalize(x: jax.Array, eps: float = L2_EPS) -> jax.Array:
    """x / sqrt(sum(x^2) + eps) over the last axis, in float32 (fla's l2norm)."""
    x = x.astype(jnp.float32)
    return x * lax.rsqrt(jnp.sum(x * x, -1, keepdims=True) + eps)


def _check(q, k, v, log_alpha, beta, segment_ids):
    batch, length, heads, _ = q.shape
    if k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ConfigError(f"gated delta rule: q {q.shape}, k {k.shape} and v {v.shape} must "
                          "be [B, L, H, Dk], [B, L, H, Dk], [B, L, H, Dv]")
    for name, x in (("log_alpha", log_alpha), ("beta", beta)):
        if x.shape != (batch, length, heads):
            raise ConfigError(f"gated delta rule: {name} {x.shape} must be [B, L, H] = "
                              f"{(batch, length, heads)}")
    if segment_ids is not None and segment_ids.shape != (batch, length):
        raise ConfigError(f"gated delta rule: segment_ids {segment_ids.shape} must be "
                          f"[B, L] = {(batch, length)}")


def _prepare(q, k, v, log_alpha, beta, scale, qk_l2norm):
    """Everything in float32, q and k L2-normalised (qk_l2norm) and q scaled."""
    f32 = lambda x: x.astype(jnp.float32)
    q, k = (l2_normalize(q), l2_normalize(k)) if qk_l2norm else (f32(q), f32(k))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return q * scale, k, f32(v), f32(log_alpha), f32(beta)


def _resets(segment_ids: jax.Array | None, batch: int, length: int) -> jax.Array:
    """bool[B, L]: True where token t starts a new segment after token t - 1 (never at 0)."""
    if segment_ids is None:
        return jnp.zeros((batch, length), bool)
    changed = segment_ids[:, 1:] != segment_ids[:, :-1]
    return jnp.concatenate([jnp.zeros((batch, 1), bool), changed], axis=1)


def gated_delta_rule_recurrent(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    log_alpha: jax.Array,
    beta: jax.Array,
    *,
    segment_ids: jax.Array | None = None,
    scale: float | None = None,
    qk_l2norm: bool = False,
) -> jax.Array:
    """The gated delta rule token by token (module docstring), a lax.scan over L.

    q, k: [B, L, H, Dk]; v: [B, L, H, Dv]; log_alpha (g = log alpha_t <= 0), beta:
    [B, L, H]; segment_ids: int32[B, L] or None (the state resets where it changes);
    scale: q's factor, None for Dk ** -0.5 -> o [B, L, H, Dv] in v's dtype.
    The state H [B, H, Dk, Dv] starts at zero and is float32.
    """
    _check(q, k, v, log_alpha, beta, segment_ids)
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, log_alpha, beta, scale, qk_l2norm)
    batch, length, heads, dk = q.shape
    reset = _resets(segment_ids, batch, length)

    def step(state, xs):  # state [B, H, Dk, Dv]
        qt, kt, vt, gt, bt, rt = xs
        state = jnp.where(rt[:, None, None, None], 0.0, state) * jnp.exp(gt)[..., None, None]
        u = bt[..., None] * (vt - jnp.einsum("bhk,bhkv->bhv", kt, state))
        state = state + kt[..., :, None] * u[..., None, :]
        return state, jnp.einsum("bhk,bhkv->bhv", qt, state)

    time_major = lambda x: jnp.moveaxis(x, 1, 0)
    init = jnp.zeros((batch, heads, dk, v.shape[-1]), jnp.float32)
    _, out = lax.scan(step, init, tuple(map(time_major, (q, k, v, g, beta, reset))))
    return jnp.moveaxis(out, 0, 1).astype(out_dtype)


def _chunks(x: jax.Array, count: int, size: int, fill=0) -> jax.Array:
    """[B, L, H, ...] (or [B, L]) -> [B, H, N, C, ...] (or [B, N, C]), padded with `fill`."""
    length = x.shape[1]
    pad = [(0, 0), (0, count * size - length)] + [(0, 0)] * (x.ndim - 2)
    x = jnp.pad(x, pad, constant_values=fill).reshape(x.shape[0], count, size, *x.shape[2:])
    return x if x.ndim == 3 else jnp.moveaxis(x, 3, 1)


def _intra_chunk(q, k, v, g, beta, seg):
    """The work of every chunk at once, before the state is known.

    q, k: [B, H, N, C, Dk]; v: [B, H, N, C, Dv]; g, beta: [B, H, N, C]; seg: [B, 1, N, C]
    -> (u0 [.., C, Dv], w [.., C, Dk], decay [.., C, C], cum [.., C]) where the chunk's
    writes are u = u0 - w H0 for the state H0 it starts from, and decay[i, j] =
    alpha_{j+1} ... alpha_i for j <= i in one segment (0 elsewhere).
    """
    size = q.shape[-2]
    cum = jnp.cumsum(g, axis=-1)
    same = seg[..., :, None] == seg[..., None, :]
    upto = jnp.tril(jnp.ones((size, size), bool))
    visible = upto & same
    decay = jnp.exp(jnp.where(visible, cum[..., :, None] - cum[..., None, :], -jnp.inf))
    # (I + M) u = beta v - beta exp(cum) k H0, M[i, j] = beta_i decay[i, j] k_i.k_j (j < i):
    # unit lower-triangular, solved through its inverse (the WY representation).
    strict = jnp.tril(jnp.ones((size, size), bool), -1)
    kk = jnp.einsum("...ik,...jk->...ij", k, k)
    m = jnp.where(strict, beta[..., :, None] * kk * decay, 0.0)
    rhs = jnp.concatenate([beta[..., None] * v, (beta * jnp.exp(cum))[..., None] * k], -1)
    solved = jnp.einsum("...ij,...jd->...id", unit_lower_inverse(m), rhs)
    return solved[..., : v.shape[-1]], solved[..., v.shape[-1]:], decay, cum


def unit_lower_inverse(strict: jax.Array) -> jax.Array:
    """(I + M)^-1 for M = `strict` [..., C, C], strictly lower triangular -> [..., C, C].

    Blockwise, doubling the block: the inverse of [[A, 0], [B, D]] is [[A^-1, 0],
    [-D^-1 B A^-1, D^-1]], so log2(C) rounds of batched matmuls (fla's solve_tril merges
    its 16 x 16 blocks the same way). Not lax.linalg.triangular_solve: on CPU that is
    jaxlib's LAPACK trsm call, which splits its batch over XLA's intra-op thread pool and
    blocks the pool thread it runs on until the parts finish, so two solves running at
    once on a 2-thread pool wait for each other forever (the vmapped hybrid hung so).
    """
    size = strict.shape[-1]
    padded = 1 << (size - 1).bit_length()
    pad = [(0, 0)] * (strict.ndim - 2) + [(0, padded - size)] * 2
    strict = jnp.pad(strict, pad)  # the padding is an identity block: cut at the end
    batch = strict.shape[:-2]
    inverse = jnp.ones((*batch, padded, 1, 1), strict.dtype)  # the 1 x 1 diagonal blocks
    half = 1
    while half < padded:  # pair the diagonal blocks of size `half` into blocks of 2 half
        count = padded // (2 * half)
        blocks = strict.reshape(*batch, count, 2 * half, count, 2 * half)
        lower = jnp.moveaxis(jnp.diagonal(blocks, axis1=-4, axis2=-2), -1, -3)
        first, second = inverse[..., 0::2, :, :], inverse[..., 1::2, :, :]
        corner = -second @ lower[..., half:, :half] @ first
        inverse = jnp.concatenate([
            jnp.concatenate([first, jnp.zeros_like(first)], -1),
            jnp.concatenate([corner, second], -1)], -2)
        half *= 2
    return inverse[..., 0, :size, :size]


def _carry_masks(seg: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """seg [B, 1, N, C] -> (carried [B, 1, N, C]: the token continues the segment the state
    entering its chunk belongs to; in_last: the token is in its chunk's last segment;
    keep [B, 1, N]: the whole chunk continues the entering state's segment)."""
    entering = jnp.concatenate([seg[:, :, :1, :1], seg[:, :, :-1, -1:]], axis=2)
    carried = seg == entering
    in_last = seg == seg[..., -1:]
    return carried, in_last, carried[..., -1]


def gated_delta_rule_chunked(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    log_alpha: jax.Array,
    beta: jax.Array,
    chunk_size: int = 64,
    *,
    segment_ids: jax.Array | None = None,
    scale: float | None = None,
    qk_l2norm: bool = False,
) -> jax.Array:
    """`gated_delta_rule_recurrent` computed chunk by chunk (module docstring); same
    arguments and result. L need not be a multiple of chunk_size (the tail is padded with
    beta = 0, which writes nothing, and cut). Work O(L C (Dk + Dv)) per head, a scan of
    L / C steps carrying the float32 state [B, H, Dk, Dv].
    """
    _check(q, k, v, log_alpha, beta, segment_ids)
    if chunk_size < 1:
        raise ConfigError(f"gated delta rule: chunk_size={chunk_size} must be >= 1")
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, log_alpha, beta, scale, qk_l2norm)
    batch, length = q.shape[:2]
    size = min(chunk_size, length)
    count = -(-length // size)
    seg = (jnp.zeros((batch, length), jnp.int32) if segment_ids is None
           else segment_ids.astype(jnp.int32))
    seg = jnp.pad(seg, [(0, 0), (0, count * size - length)], mode="edge")
    seg = seg.reshape(batch, 1, count, size)
    q, k, v, g, beta = (_chunks(x, count, size) for x in (q, k, v, g, beta))
    u0, w, decay, cum = _intra_chunk(q, k, v, g, beta, seg)
    carried, in_last, keep = _carry_masks(seg)
    # What each chunk reads from the state it starts from, and what it writes into the next.
    q_in = q * jnp.where(carried, jnp.exp(cum), 0.0)[..., None]
    w = w * carried[..., None]
    k_out = k * jnp.where(in_last, jnp.exp(cum[..., -1:] - cum), 0.0)[..., None]
    state_decay = jnp.where(keep, jnp.exp(cum[..., -1]), 0.0)

    def step(state, xs):  # state [B, H, Dk, Dv]
        u0_n, w_n, q_n, k_n, decay_n = xs
        u = u0_n - jnp.einsum("bhck,bhkv->bhcv", w_n, state)
        read = jnp.einsum("bhck,bhkv->bhcv", q_n, state)
        state = decay_n[..., None, None] * state + jnp.einsum("bhck,bhcv->bhkv", k_n, u)
        return state, (u, read)

    chunk_major = lambda x: jnp.moveaxis(x, 2, 0)
    init = jnp.zeros((batch, q.shape[1], q.shape[-1], v.shape[-1]), jnp.float32)
    xs = tuple(map(chunk_major, (u0, w, q_in, k_out, state_decay)))
    _, (u, read) = lax.scan(step, init, xs)
    u, read = jnp.moveaxis(u, 0, 2), jnp.moveaxis(read, 0, 2)
    scores = jnp.einsum("...ik,...jk->...ij", q, k) * decay
    out = read + jnp.einsum("...ij,...jv->...iv", scores, u)  # [B, H, N, C, Dv]
    out = jnp.moveaxis(out, 1, 3).reshape(batch, count * size, -1, v.shape[-1])
    return out[:, :length].astype(out_dtype)
