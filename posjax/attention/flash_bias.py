"""Flash attention with position biases inside the kernel (Pallas): no [L, L] bias exists.

    flash_bias(q, k, v, table, u, w, q_pos, k_pos, q_seg, k_seg, *, causal, scale,
               window=None, block_q=64, block_k=64, interpret=None) -> [B, Lq, H, Dv]

computes, per head h, in float32,

    s_ij = scale q_i.k_j + T[h, clip(k_pos_j - q_pos_i, -R, R) + R] + u[h, i] + w[h, j]
    p_ij = softmax_j(s_ij over the allowed j),   out_i = sum_j p_ij v_j

with T = `table` [Bt, H, 2R + 1] (a bias per clipped distance, shared by the batch when
Bt = 1, R = (W - 1) // 2), u [B, H, Lq] a per-query term and w [B, H, Lk] a per-key term
(a per-query term shifts a whole softmax row, so it changes nothing and its gradient is zero
up to rounding; FoX passes u = c_i with w = -c_j all the same, so the kernel adds the small
c_i - c_j to the scores rather than c_j alone, which grows with the length).
This is the common form of the additive encodings: ALiBi (T = -m |r|), T5 (its bucket per
distance), KERPLE; u and w carry row and column terms (FoX's cumulative log forget gates).
The mask is posjax's (masks.py): segment ids (0 = padding, output 0 for a padding query),
causal by token index with the queries aligned to the last keys, and an optional sliding
window (a query sees the `window` latest keys up to itself).

The algorithm is FlashAttention-2's (Dao 2023, algorithms 1 and 2): the grid walks blocks of
queries, each program runs an online softmax over the key blocks it can see (causally hidden
blocks and blocks left of the window are skipped by the loop bounds, not masked), and keeps
only its output and the rows' log-sum-exp. The backward recomputes the probabilities: one
kernel walks key blocks for dK, dV and dw (column sums of dS), one walks query blocks for dQ
and du (row sums of dS); dT is the sum of dS over the pairs at each clipped distance,
accumulated per block by atomic adds (`jax.experimental.pallas.triton.atomic_add`; in
interpret mode, where those adds do not sum repeated indices within one call, by a
scatter-add per block), the pairs clipped to the table's two ends summed in the block first. Every
encoding parameter behind T, u and w gets its gradient by autodiff through them.
Accumulation is float32 whatever the inputs' dtype.

Runs where Pallas's Triton backend lowers (NVIDIA GPUs) and, in interpret mode, anywhere
(CPU tests; slow). TPUs have no atomic add in Pallas, so dT has no TPU path here. Each call
names Triton's compiler parameters: jax 0.10 (constraints-gpu.txt) sends a GPU kernel with
none to Mosaic GPU, which does not lower this one.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from posjax.attention import masks
from posjax.attention.masks import NEG

TRITON = plgpu.CompilerParams()  # Triton's defaults for warps and stages


def _cdiv(a, b):
    return (a + b - 1) // b


def _allowed(q_idx, k_idx, q_seg, k_seg, causal: bool, window: int | None):
    """bool[bq, bk]: posjax's mask (masks.allowed) from token indices (queries already
    shifted by Lk - Lq) and segments, and the sliding window."""
    ok = masks.allowed(q_idx, k_idx, q_seg, k_seg, causal=causal)
    if window is not None:
        ok &= q_idx[:, None] - k_idx[None, :] < window
    return ok


def _key_block_range(q_start, block_q: int, block_k: int, num_k: int, offset: int,
                     causal: bool, window: int | None):
    """[first, last) key blocks the query block [q_start, q_start + block_q) can see."""
    last = num_k
    if causal:
        last = jnp.minimum(num_k, _cdiv(q_start + offset + block_q, block_k))
    first = 0
    if window is not None:
        first = jnp.maximum(0, (q_start + offset - window + 1) // block_k)
    return first, last


def _query_block_range(k_start, block_q: int, block_k: int, num_q: int, offset: int,
                       causal: bool, window: int | None):
    """[first, last) query blocks that can see the key block [k_start, k_start + block_k)."""
    first = 0
    if causal:
        first = jnp.maximum(0, (k_start - offset) // block_q)
    last = num_q
    if window is not None:
        last = jnp.minimum(num_q, _cdiv(k_start + block_k - 1 + window - offset, block_q))
    return first, last


def _scores(q, k, qp, kp, t_ref, u, w, scale: float, radius: int):
    """float32[bq, bk]: scale q.k + T[clip(kp - qp)] + u + w, and the table's indices."""
    s = lax.dot_general(q, k, (((1,), (1,)), ((), ())),
                        preferred_element_type=jnp.float32) * scale
    index = jnp.clip(kp[None, :] - qp[:, None], -radius, radius) + radius
    # u + w first: FoX's u_i = c_i and w_j = -c_j grow with the length, their sum does not.
    return s + t_ref[index] + (u[:, None] + w[None, :]), index


def _forward_kernel(q_ref, k_ref, v_ref, t_ref, u_ref, w_ref, qp_ref, kp_ref, qs_ref, ks_ref,
                    o_ref, lse_ref, *, scale, causal, window, block_q, block_k, offset,
                    radius):
    iq = pl.program_id(2)
    q_start = iq * block_q
    q, qp, qs, u = q_ref[...], qp_ref[...], qs_ref[...], u_ref[...]
    q_idx = q_start + offset + jnp.arange(block_q, dtype=jnp.int32)
    num_k = k_ref.shape[0] // block_k

    def body(jk, carry):
        m, l, acc = carry
        keys = pl.ds(jk * block_k, block_k)
        k, v = k_ref[keys, :], v_ref[keys, :]
        s, _ = _scores(q, k, qp, kp_ref[keys], t_ref, u, w_ref[keys], scale, radius)
        k_idx = jk * block_k + jnp.arange(block_k, dtype=jnp.int32)
        ok = _allowed(q_idx, k_idx, qs, ks_ref[keys], causal, window)
        s = jnp.where(ok, s, NEG)
        m_new = jnp.maximum(m, s.max(-1))
        e = jnp.where(ok, jnp.exp(s - m_new[:, None]), 0.0)
        c = jnp.exp(m - m_new)
        acc = c[:, None] * acc + lax.dot_general(
            e.astype(v.dtype), v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        return m_new, c * l + e.sum(-1), acc

    first, last = _key_block_range(q_start, block_q, block_k, num_k, offset, causal, window)
    init = (jnp.full((block_q,), NEG, jnp.float32), jnp.zeros((block_q,), jnp.float32),
            jnp.zeros((block_q, v_ref.shape[-1]), jnp.float32))
    m, l, acc = lax.fori_loop(first, last, body, init)
    seen = l > 0
    o_ref[...] = jnp.where(seen[:, None], acc / jnp.where(seen, l, 1.0)[:, None],
                           0.0).astype(o_ref.dtype)
    lse_ref[...] = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), NEG)


def _probabilities(q, k, qp, kp, t_ref, u, w, lse, q_idx, k_idx, qs, ks, *, scale, causal,
                   window, radius):
    s, index = _scores(q, k, qp, kp, t_ref, u, w, scale, radius)
    ok = _allowed(q_idx, k_idx, qs, ks, causal, window)
    return jnp.where(ok, jnp.exp(s - lse[:, None]), 0.0), index


def _dkv_kernel(q_ref, k_ref, v_ref, t_ref, u_ref, w_ref, qp_ref, kp_ref, qs_ref, ks_ref,
                do_ref, lse_ref, delta_ref, dt_in_ref, dk_ref, dv_ref, dw_ref, dt_ref, *,
                scale, causal, window, block_q, block_k, offset, radius, interpret, table_grad):
    del dt_in_ref  # aliased with dt_ref: the zeros the adds start from
    jk = pl.program_id(2)
    k_start = jk * block_k
    k, v, kp, ks, w = k_ref[...], v_ref[...], kp_ref[...], ks_ref[...], w_ref[...]
    k_idx = k_start + jnp.arange(block_k, dtype=jnp.int32)
    num_q = q_ref.shape[0] // block_q

    def body(iq, carry):
        dk, dv, dw = carry
        rows = pl.ds(iq * block_q, block_q)
        q, do = q_ref[rows, :], do_ref[rows, :]
        q_idx = iq * block_q + offset + jnp.arange(block_q, dtype=jnp.int32)
        p, index = _probabilities(q, k, qp_ref[rows], kp, t_ref, u_ref[rows], w,
                                  lse_ref[rows], q_idx, k_idx, qs_ref[rows], ks, scale=scale,
                                  causal=causal, window=window, radius=radius)
        dv += lax.dot_general(p.astype(do.dtype), do, (((0,), (0,)), ((), ())),
                              preferred_element_type=jnp.float32)
        dp = lax.dot_general(do, v, (((1,), (1,)), ((), ())),
                             preferred_element_type=jnp.float32)
        ds = p * (dp - delta_ref[rows][:, None])
        dk += scale * lax.dot_general(ds.astype(q.dtype), q, (((0,), (0,)), ((), ())),
                                      preferred_element_type=jnp.float32)
        if table_grad:  # only where parameters are behind the table (not ALiBi's)
            _add_table_gradient(dt_ref, index, ds, interpret)
        return dk, dv, dw + ds.sum(0)

    first, last = _query_block_range(k_start, block_q, block_k, num_q, offset, causal, window)
    init = (jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32),
            jnp.zeros((block_k,), jnp.float32))
    dk, dv, dw = lax.fori_loop(first, last, body, init)
    dk_ref[...], dv_ref[...] = dk.astype(dk_ref.dtype), dv.astype(dv_ref.dtype)
    dw_ref[...] = dw


def _add_table_gradient(dt_ref, index, ds, interpret: bool):
    """dT[index] += dS for one block (index, ds: [bq, bk]). The pairs at the table's two ends,
    where every distance past its reach is clipped, are summed in the block first: in a long
    row most pairs land there (T5's reach is 128), and an atomic add per pair would queue
    them on those two addresses. On a GPU atomic adds; interpreted, a scatter-add (the
    discharged atomic add would not sum repeated indices)."""
    width = dt_ref.shape[-1]
    first = index == 0
    last = (index == width - 1) & ~first  # one address where the table has one entry
    ends = (jnp.sum(jnp.where(first, ds, 0.0)), jnp.sum(jnp.where(last, ds, 0.0)))
    if interpret:
        inner = jnp.where(first | last, 0.0, ds)
        dt_ref[...] += (jnp.zeros((width,), jnp.float32).at[index.reshape(-1)]
                        .add(inner.reshape(-1)).at[0].add(ends[0]).at[width - 1].add(ends[1]))
    else:
        plgpu.atomic_add(dt_ref, (index,), ds, mask=~(first | last))
        plgpu.atomic_add(dt_ref, (0,), ends[0])
        plgpu.atomic_add(dt_ref, (width - 1,), ends[1])


def _dq_kernel(q_ref, k_ref, v_ref, t_ref, u_ref, w_ref, qp_ref, kp_ref, qs_ref, ks_ref,
               do_ref, lse_ref, delta_ref, dq_ref, du_ref, *, scale, causal, window, block_q,
               block_k, offset, radius):
    iq = pl.program_id(2)
    q_start = iq * block_q
    q, do, qp, qs, u = q_ref[...], do_ref[...], qp_ref[...], qs_ref[...], u_ref[...]
    lse, delta = lse_ref[...], delta_ref[...]
    q_idx = q_start + offset + jnp.arange(block_q, dtype=jnp.int32)
    num_k = k_ref.shape[0] // block_k

    def body(jk, carry):
        dq, du = carry
        keys = pl.ds(jk * block_k, block_k)
        k, v = k_ref[keys, :], v_ref[keys, :]
        k_idx = jk * block_k + jnp.arange(block_k, dtype=jnp.int32)
        p, _ = _probabilities(q, k, qp, kp_ref[keys], t_ref, u, w_ref[keys], lse, q_idx,
                              k_idx, qs, ks_ref[keys], scale=scale, causal=causal,
                              window=window, radius=radius)
        dp = lax.dot_general(do, v, (((1,), (1,)), ((), ())),
                             preferred_element_type=jnp.float32)
        ds = p * (dp - delta[:, None])
        dq += scale * lax.dot_general(ds.astype(k.dtype), k, (((1,), (0,)), ((), ())),
                                      preferred_element_type=jnp.float32)
        return dq, du + ds.sum(1)

    first, last = _key_block_range(q_start, block_q, block_k, num_k, offset, causal, window)
    dq, du = lax.fori_loop(first, last, body, (jnp.zeros(q.shape, jnp.float32),
                                               jnp.zeros((block_q,), jnp.float32)))
    dq_ref[...], du_ref[...] = dq.astype(dq_ref.dtype), du


class _Plan:
    """Block specs of the [B, H, L, ...] operands, the [B, L] rows and the table, for a grid
    (B, H, blocks)."""

    def __init__(self, width: int, table_batch: int):
        self.width = width
        self.table_b = (lambda b: b) if table_batch > 1 else (lambda b: 0)

    @staticmethod
    def whole(length: int, dim: int | None = None):
        shape = (None, None, length) + (() if dim is None else (dim,))
        return pl.BlockSpec(shape, lambda b, h, i: (b, h, 0) + (() if dim is None else (0,)))

    @staticmethod
    def block(size: int, dim: int | None = None):
        shape = (None, None, size) + (() if dim is None else (dim,))
        return pl.BlockSpec(shape, lambda b, h, i: (b, h, i) + (() if dim is None else (0,)))

    def table(self):
        return pl.BlockSpec((None, None, self.width), lambda b, h, i: (self.table_b(b), h, 0))

    def table_gradient(self):  # one per example and head: summed over the batch outside
        return pl.BlockSpec((None, None, self.width), lambda b, h, i: (b, h, 0))

    @staticmethod
    def rows(length: int):  # positions and segments [B, L]: shared by the heads
        return pl.BlockSpec((None, length), lambda b, h, i: (b, 0))

    @staticmethod
    def row_block(size: int):
        return pl.BlockSpec((None, size), lambda b, h, i: (b, i))


def _pad(x, axis: int, length: int, value=0):
    extra = length - x.shape[axis]
    if extra == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return jnp.pad(x, widths, constant_values=value)


def _interpret_default(interpret):
    return jax.default_backend() != "gpu" if interpret is None else interpret


@functools.partial(jax.custom_vjp, nondiff_argnums=(10, 11, 12, 13, 14, 15, 16, 17))
def _flash(q, k, v, table, u, w, q_pos, k_pos, q_seg, k_seg, causal, scale, window, block_q,
           block_k, offset, interpret, table_grad):
    return _forward(q, k, v, table, u, w, q_pos, k_pos, q_seg, k_seg, causal, scale, window,
                    block_q, block_k, offset, interpret, table_grad)[0]  # without residuals


def _options(causal, scale, window, block_q, block_k, offset, table):
    return dict(scale=scale, causal=causal, window=window, block_q=block_q,
                block_k=block_k, offset=offset, radius=(table.shape[-1] - 1) // 2)


def _forward(q, k, v, table, u, w, q_pos, k_pos, q_seg, k_seg, causal, scale, window,
             block_q, block_k, offset, interpret, table_grad):
    del table_grad  # the backward's
    batch, heads, lq, dh = q.shape
    lk, dv = k.shape[2], v.shape[-1]
    plan = _Plan(table.shape[-1], table.shape[0])
    kernel = functools.partial(_forward_kernel,
                               **_options(causal, scale, window, block_q, block_k, offset,
                                          table))
    out, lse = pl.pallas_call(
        kernel,
        grid=(batch, heads, lq // block_q),
        in_specs=[plan.block(block_q, dh), plan.whole(lk, dh), plan.whole(lk, dv), plan.table(),
                  plan.block(block_q), plan.whole(lk), plan.row_block(block_q), plan.rows(lk),
                  plan.row_block(block_q), plan.rows(lk)],
        out_specs=[plan.block(block_q, dv), plan.block(block_q)],
        out_shape=[jax.ShapeDtypeStruct((batch, heads, lq, dv), v.dtype),
                   jax.ShapeDtypeStruct((batch, heads, lq), jnp.float32)],
        interpret=interpret,
        compiler_params=TRITON,
        name="posjax_flash_bias_fwd",
    )(q, k, v, table, u, w, q_pos, k_pos, q_seg, k_seg)
    return out, (q, k, v, table, u, w, q_pos, k_pos, q_seg, k_seg, out, lse)


def _flash_bwd(causal, scale, window, block_q, block_k, offset, interpret, table_grad,
               residuals, d_out):
    q, k, v, table, u, w, q_pos, k_pos, q_seg, k_seg, out, lse = residuals
    batch, heads, lq, dh = q.shape
    lk, dv = k.shape[2], v.shape[-1]
    width = table.shape[-1]
    plan = _Plan(width, table.shape[0])
    options = _options(causal, scale, window, block_q, block_k, offset, table)
    delta = jnp.sum(out.astype(jnp.float32) * d_out.astype(jnp.float32), -1)
    d_out = d_out.astype(v.dtype)
    operands = (q, k, v, table, u, w, q_pos, k_pos, q_seg, k_seg, d_out, lse, delta)
    dk, dv_, dw, dt = pl.pallas_call(
        functools.partial(_dkv_kernel, interpret=interpret, table_grad=table_grad, **options),
        grid=(batch, heads, lk // block_k),
        in_specs=[plan.whole(lq, dh), plan.block(block_k, dh), plan.block(block_k, dv),
                  plan.table(), plan.whole(lq), plan.block(block_k), plan.rows(lq),
                  plan.row_block(block_k), plan.rows(lq), plan.row_block(block_k),
                  plan.whole(lq, dv), plan.whole(lq), plan.whole(lq), plan.table_gradient()],
        out_specs=[plan.block(block_k, dh), plan.block(block_k, dv), plan.block(block_k),
                   plan.table_gradient()],
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype),
                   jax.ShapeDtypeStruct((batch, heads, lk), jnp.float32),
                   jax.ShapeDtypeStruct((batch, heads, width), jnp.float32)],
        input_output_aliases={len(operands): 3},
        interpret=interpret,
        compiler_params=TRITON,
        name="posjax_flash_bias_dkv",
    )(*operands, jnp.zeros((batch, heads, width), jnp.float32))
    dq, du = pl.pallas_call(
        functools.partial(_dq_kernel, **options),
        grid=(batch, heads, lq // block_q),
        in_specs=[plan.block(block_q, dh), plan.whole(lk, dh), plan.whole(lk, dv), plan.table(),
                  plan.block(block_q), plan.whole(lk), plan.row_block(block_q), plan.rows(lk),
                  plan.row_block(block_q), plan.rows(lk), plan.block(block_q, dv),
                  plan.block(block_q), plan.block(block_q)],
        out_specs=[plan.block(block_q, dh), plan.block(block_q)],
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((batch, heads, lq), jnp.float32)],
        interpret=interpret,
        compiler_params=TRITON,
        name="posjax_flash_bias_dq",
    )(*operands)
    if table.shape[0] == 1:
        dt = dt.sum(0, keepdims=True)
    # Positions and segment ids are integers: no cotangent.
    return (dq, dk, dv_, dt.astype(table.dtype), du.astype(u.dtype), dw.astype(w.dtype),
            None, None, None, None)


_flash.defvjp(_forward, _flash_bwd)


def flash_bias(q, k, v, table, u=None, w=None, q_pos=None, k_pos=None, q_seg=None, k_seg=None,
               *, causal: bool, scale: float, window: int | None = None, block_q: int = 64,
               block_k: int = 64, interpret: bool | None = None, table_grad: bool = True):
    """Attention with the position bias T[clip(k_pos - q_pos)] + u + w inside the kernel.

    q: [B, Lq, H, Dh], k: [B, Lk, H, Dh], v: [B, Lk, H, Dv] (one dtype); table: float32
    [H, W] (shared by the batch) or [B, H, W], W = 2R + 1 odd, entry R + r the bias at
    clipped distance r = k_pos - q_pos; u: [B, H, Lq] or None; w: [B, H, Lk] or None;
    q_pos: int32[B, Lq] or [1, Lq] (one row for the batch), k_pos likewise (default the token
    index, the queries' Lk - Lq + i: aligned to the last keys); q_seg, k_seg: int32[B, L]
    segment ids (0 = padding) or None for whole rows;
    causal: by token index, the queries aligned to the last keys; window: a query sees the
    `window` latest keys up to itself (None: all); block_q, block_k: the kernel's largest
    blocks (shorter lengths take the power of two >= the length, at least 16; lengths are
    padded to whole blocks, head dims with zeros to such a power of two); interpret:
    Pallas's interpret mode (default: off on a GPU);
    table_grad: False where no parameter is behind the table (ALiBi's slopes, a zero table):
    the backward then skips dT's atomic adds and gives the table a zero cotangent.
    -> [B, Lq, H, Dv] in v.dtype. Differentiable in q, k, v, table, u and w.
    """
    _check_inputs(q, k, v, table, u, w, q_pos, k_pos, q_seg, k_seg, block_q, block_k)
    batch, lq, heads, _ = q.shape
    lk = k.shape[1]
    window = window or None  # 0 is no window, as for the other kernels
    table = table[None] if table.ndim == 2 else table
    block_q, block_k = min(block_q, _tile(lq)), min(block_k, _tile(lk))
    pq, pk = _round_up(lq, block_q), _round_up(lk, block_k)
    dh, dv = _tile(q.shape[-1]), v.shape[-1]

    def rows(x, length, padded, fill):
        if x is None:
            x = jnp.broadcast_to(fill(length), (batch, length))
        x = jnp.broadcast_to(x, (batch, length)).astype(jnp.int32)
        return _pad(x, 1, padded)

    # token indices, the queries at the last keys' (as the causal mask aligns them)
    token = lambda start: lambda n: jnp.arange(start, start + n, dtype=jnp.int32)  # noqa: E731
    ones = lambda n: jnp.ones((n,), jnp.int32)  # noqa: E731
    qp, kp = rows(q_pos, lq, pq, token(lk - lq)), rows(k_pos, lk, pk, token(0))
    qs, ks = rows(q_seg, lq, pq, ones), rows(k_seg, lk, pk, ones)
    u = jnp.zeros((batch, heads, lq), jnp.float32) if u is None else u.astype(jnp.float32)
    w = jnp.zeros((batch, heads, lk), jnp.float32) if w is None else w.astype(jnp.float32)
    # [B, H, L, D] padded to whole blocks, D with zeros to a tile (q.k and p.v unchanged)
    heads_first = lambda x, length, dim: _pad(  # noqa: E731
        _pad(x.transpose(0, 2, 1, 3), 2, length), 3, dim)
    out = _flash(heads_first(q, pq, dh), heads_first(k, pk, dh), heads_first(v, pk, _tile(dv)),
                 table.astype(jnp.float32), _pad(u, 2, pq), _pad(w, 2, pk), qp, kp, qs, ks,
                 causal, float(scale), window, block_q, block_k, lk - lq,
                 _interpret_default(interpret), bool(table_grad))
    return out[:, :, :lq, :dv].transpose(0, 2, 1, 3)


def _check_inputs(q, k, v, table, u, w, q_pos, k_pos, q_seg, k_seg, block_q, block_k):
    """flash_bias's shapes (its docstring), each wrong one a one-line ValueError: the kernel
    reads blocks by index, and a head or row past an array's end is not an error there."""
    def refuse(what):
        raise ValueError(f"flash_bias: {what}")

    if not q.ndim == k.ndim == v.ndim == 4:
        refuse(f"q, k and v are [B, L, H, D]; got shapes {q.shape}, {k.shape}, {v.shape}")
    batch, lq, heads, _ = q.shape
    lk = k.shape[1]
    if k.shape[:3] != (batch, lk, heads) or v.shape[:3] != (batch, lk, heads) or (
            k.shape[3] != q.shape[3]):
        refuse(f"k and v must be [B={batch}, Lk, H={heads}, D] with k's D = q's "
               f"{q.shape[3]} (repeat grouped key/value heads first); got {k.shape}, {v.shape}")
    if not q.dtype == k.dtype == v.dtype:
        refuse(f"q, k and v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if table.ndim not in (2, 3) or table.shape[-2] != heads or (
            table.ndim == 3 and table.shape[0] != batch):
        refuse(f"the table is [H={heads}, W] or [B={batch}, H={heads}, W]; got {table.shape}")
    if table.shape[-1] % 2 != 1:
        refuse(f"the table's last axis is 2R + 1 entries, got {table.shape[-1]}")
    for name, term, length in (("u", u, lq), ("w", w, lk)):
        if term is not None and term.shape != (batch, heads, length):
            refuse(f"{name} is [B={batch}, H={heads}, L={length}]; got {term.shape}")
    for name, row, length in (("q_pos", q_pos, lq), ("k_pos", k_pos, lk), ("q_seg", q_seg, lq),
                              ("k_seg", k_seg, lk)):
        if row is not None and (row.ndim != 2 or row.shape[1] != length
                                or row.shape[0] not in (1, batch)):
            refuse(f"{name} is [B={batch} or 1, L={length}] (one axis of positions); got "
                   f"{row.shape}")
    if block_q < 1 or block_k < 1:
        refuse(f"block_q and block_k are at least 1; got {block_q}, {block_k}")


def _round_up(n: int, block: int) -> int:
    return _cdiv(n, block) * block


def _tile(n: int) -> int:
    """The power of two >= n, at least 16: Triton's tensors have power-of-two sizes and its
    dots take operands at least 16 wide (a block of 48 queries, or a head of 24 dims, does
    not lower on a GPU)."""
    return max(16, 1 << (n - 1).bit_length())
