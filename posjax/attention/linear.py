"""Linear attention (Katharopoulos et al. 2020) with RoPE in the numerator (RoFormer eq. 29).

Two feature maps, chosen by name (`feature=`, registry FEATURES):

  "elu"  phi(x) = elu(x) + 1, rotation in the numerator only (RoFormer eq. 29):
             out_i = sum_j [R_i phi(q_i)]^T [R_j phi(k_j)] v_j / sum_j phi(q_i)^T phi(k_j)
  "cos"  sim_ij = 1 + cos(q_i, k_j) with q, k L2-normalised and rotated in both places
         (the first-order Taylor form of exp(q.k) in Su 2020, "Linear attention: must attention
         have a softmax?", spaces.ac.cn/archives/7546; a rotation keeps norms, so 1 + cos
         stays >= 0 with the rotation in the denominator too):
             out_i = sum_j (1 + qh_i.kh_j) v_j / sum_j (1 + qh_i.kh_j)

The rotation R is the encoding's query/key site (`encoding.rotate`), so xPos, scaled RoPE and
log-n scaling work unchanged; with no rotate site R is the identity. Both maps are written as
`out_i = sum_j (a_i.b_j) v_j / sum_j (c_i.d_j)` over the allowed keys j (masks.allowed):
for "cos", a = c = [R qh, 1] and b = d = [R kh, 1] so that a.b = 1 + cos.

Causal form in O(L) memory: a scan over chunks of C tokens, quadratic inside a chunk and a
carried state S = sum_j b_j v_j^T, z = sum_j d_j across chunks (Katharopoulos eq. 10-12; a
cumsum of b_j v_j^T would hold L x F x Dv numbers). The state belongs to one segment: it is
reset when the segment changes, so packed segments do not leak. This assumes each segment id
is one contiguous run of tokens, as packing emits. The bidirectional form is the causal sum
plus the causal sum of the reversed sequence with the diagonal excluded.
`linear_reference` is the same formula with the full [L, L] weight matrix, for tests.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from posjax.attention import masks
from posjax.errors import ConfigError, unknown

Features = tuple[jax.Array, jax.Array, jax.Array, jax.Array]


def _rotate(encoding, params, q, k, q_pos, k_pos):
    if encoding.rotate is None:
        return q, k
    return encoding.rotate(params, q, k, q_pos, k_pos)


def elu_features(q, k, *, encoding, params, q_pos, k_pos) -> Features:
    """(a, b, c, d), each float32[B, L, H, Dh]: a, b = R phi(q), R phi(k); c, d = phi(q), phi(k).

    phi = elu + 1 keeps c.d > 0, so the denominator never vanishes on an allowed key.
    """
    fq = jax.nn.elu(q.astype(jnp.float32)) + 1.0
    fk = jax.nn.elu(k.astype(jnp.float32)) + 1.0
    rq, rk = _rotate(encoding, params, fq, fk, q_pos, k_pos)
    return rq.astype(jnp.float32), rk.astype(jnp.float32), fq, fk


def cos_features(q, k, *, encoding, params, q_pos, k_pos) -> Features:
    """(a, b, a, b), each float32[B, L, H, Dh + 1]: a = [R q/|q|, 1], b = [R k/|k|, 1].

    Normalise before rotating, so a decaying rotation (xPos) still scales the cosine.
    """

    def unit(x):
        x = x.astype(jnp.float32)
        return x * lax.rsqrt(jnp.maximum(jnp.sum(x * x, -1, keepdims=True), 1e-12))

    rq, rk = _rotate(encoding, params, unit(q), unit(k), q_pos, k_pos)

    def with_one(x):
        x = x.astype(jnp.float32)
        return jnp.concatenate([x, jnp.ones(x.shape[:-1] + (1,), jnp.float32)], -1)

    a, b = with_one(rq), with_one(rk)
    return a, b, a, b


FEATURES: dict[str, Callable[..., Features]] = {"elu": elu_features, "cos": cos_features}


def _features(feature: str, q, k, **kw) -> Features:
    if feature not in FEATURES:
        raise unknown("linear attention feature", feature, FEATURES)
    return FEATURES[feature](q, k, **kw)


def _prefix_sums(a, b, c, d, v, q_seg, k_seg, *, inclusive: bool, chunk: int):
    """Causal numerator and denominator for one example and one head.

    a, b: [L, Fn], c, d: [L, Fd], v: [L, Dv], q_seg, k_seg: int32[L] (0 = padding)
    -> num float32[L, Dv] = sum_{j <= i, same segment} (a_i.b_j) v_j, den float32[L]
    (j < i when not inclusive).
    """
    n = a.shape[0]
    count = -(-n // chunk)

    def blocks(x):
        x = jnp.pad(x, [(0, count * chunk - n)] + [(0, 0)] * (x.ndim - 1))
        return x.reshape(count, chunk, *x.shape[1:])

    tri = jnp.tril(jnp.ones((chunk, chunk), bool), 0 if inclusive else -1)

    @jax.checkpoint
    def step(carry, xs):
        state, z, state_seg = carry
        ab, bb, cb, db, vb, qs, ks = xs
        w = tri & masks.segment_mask(qs, ks)
        num = jnp.dot(jnp.where(w, ab @ bb.T, 0.0), vb)
        den = jnp.where(w, cb @ db.T, 0.0).sum(-1)
        carried = (qs == state_seg) & (qs != 0)
        num = num + jnp.where(carried[:, None], ab @ state, 0.0)
        den = den + jnp.where(carried, cb @ z, 0.0)
        # The next chunk continues this chunk's last segment; earlier segments are finished.
        last = ks[-1]
        into = ((ks == last) & (last != 0)).astype(jnp.float32)
        keep = state_seg == last
        state = jnp.where(keep, state, 0.0) + bb.T @ (vb * into[:, None])
        z = jnp.where(keep, z, 0.0) + db.T @ into
        return (state, z, last), (num, den)

    init = (
        jnp.zeros((a.shape[-1], v.shape[-1]), jnp.float32),
        jnp.zeros((c.shape[-1],), jnp.float32),
        jnp.int32(0),
    )
    _, (num, den) = lax.scan(step, init, tuple(map(blocks, (a, b, c, d, v, q_seg, k_seg))))
    return num.reshape(count * chunk, -1)[:n], den.reshape(count * chunk)[:n]


def _sums(a, b, c, d, v, q_seg, k_seg, *, causal: bool, chunk: int):
    """Numerator [L, Dv] and denominator [L] over the allowed keys (one example, one head)."""
    num, den = _prefix_sums(a, b, c, d, v, q_seg, k_seg, inclusive=True, chunk=chunk)
    if causal:
        return num, den
    flip = lambda x: jnp.flip(x, 0)
    args = map(flip, (a, b, c, d, v, q_seg, k_seg))
    rnum, rden = _prefix_sums(*args, inclusive=False, chunk=chunk)
    return num + flip(rnum), den + flip(rden)


def _check_lengths(q, k):
    if q.shape[1] != k.shape[1]:
        raise ConfigError(
            f"linear attention needs as many queries as keys (got {q.shape[1]} and {k.shape[1]});"
            " use attention=dense or chunked for cross-attention"
        )


def _divide(num, den, v_dtype):
    # An empty row (padding query) has num = den = 0: give 0, not NaN.
    return (num / jnp.where(den == 0, 1.0, den)[..., None]).astype(v_dtype)


def linear_attention(
    q,
    k,
    v,
    *,
    encoding,
    params,
    q_pos,
    k_pos,
    q_seg,
    k_seg,
    causal: bool,
    feature: str = "elu",
    block_size: int = 64,
):
    """Linear attention, O(L) memory (see module docstring).

    q, k: [B, L, H, Dh], v: [B, L, H, Dv]; q_pos, k_pos: int32[B, L] (or [B, L, ndim]);
    q_seg, k_seg: int32[B, L] (self-attention: Lq = Lk) -> [B, L, H, Dv].
    block_size: chunk length C of the scan (work O(L C F), carried state F x Dv).
    """
    _check_lengths(q, k)
    a, b, c, d = _features(
        feature, q, k, encoding=encoding, params=params, q_pos=q_pos, k_pos=k_pos
    )
    chunk = min(block_size, q.shape[1])
    one_head = lambda *xs: _sums(*xs, causal=causal, chunk=chunk)
    per_head = jax.vmap(one_head, in_axes=(1, 1, 1, 1, 1, None, None), out_axes=(1, 1))
    num, den = jax.vmap(per_head)(a, b, c, d, v.astype(jnp.float32), q_seg, k_seg)
    return _divide(num, den, v.dtype)


def linear_reference(
    q, k, v, *, encoding, params, q_pos, k_pos, q_seg, k_seg, causal: bool, feature: str = "elu"
):
    """The formula of `linear_attention` with the full [L, L] weights, for tests.

    Same arguments and result; O(L^2) memory.
    """
    _check_lengths(q, k)
    a, b, c, d = _features(
        feature, q, k, encoding=encoding, params=params, q_pos=q_pos, k_pos=k_pos
    )
    idx = jnp.arange(q.shape[1], dtype=jnp.int32)
    ok = jax.vmap(lambda qs, ks: masks.allowed(idx, idx, qs, ks, causal=causal))(q_seg, k_seg)
    ok = ok[:, None]  # [B, 1, L, L]
    num_w = jnp.where(ok, jnp.einsum("bihf,bjhf->bhij", a, b), 0.0)
    den = jnp.where(ok, jnp.einsum("bihf,bjhf->bhij", c, d), 0.0).sum(-1)
    num = jnp.einsum("bhij,bjhd->bihd", num_w, v.astype(jnp.float32))
    return _divide(num, jnp.moveaxis(den, 1, 2), v.dtype)
