"""Relative position encodings: the logits site `bias` and the content-position sites.

Relative position is r = key_pos - query_pos (the T5 / Hugging Face convention) everywhere in
posjax; where a paper writes i - j (query minus key) the docstring says how it maps.
Everything is computed from the positions a method receives, for one example (and one head
for rel_score / rel_value), so a chunked kernel can call it block by block; nothing builds an
[Lq, Lk, head_dim] tensor. Biases and scores are float32 whatever the dtype of q and k.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from posjax.encoders import register
from posjax.encoders.absolute import TABLE_STD, table_lookup
from posjax.encoders.base import Dims, Encoding, Params, inverse_frequencies
from posjax.errors import ConfigError, unknown

f32 = jnp.float32


def relative_position(q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
    """r[i, j] = k_pos[j] - q_pos[i] (key minus query).

    q_pos: int[Lq], k_pos: int[Lk] -> int[Lq, Lk]
    """
    return k_pos[None, :] - q_pos[:, None]


def t5_bucket(
    relative_position: jax.Array,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> jax.Array:
    """T5's bucket of a relative position r = key - query; int[...] -> int32[...].

    Bidirectional: buckets [B/2, B) hold r > 0, [0, B/2) hold r <= 0, and n = |r|;
    unidirectional (causal): n = max(-r, 0) over all B buckets (the future shares bucket 0).
    With b buckets for that direction and max_exact = b // 2: n < max_exact keeps n, else
    max_exact + floor(log(n / max_exact) / log(max_distance / max_exact) * (b - max_exact)),
    capped at b - 1, so distances beyond max_distance share the last bucket.
    Source: Raffel et al. 2020 (T5), mesh-tensorflow `_relative_position_bucket`.
    """
    check_t5_buckets(bidirectional, num_buckets, max_distance)
    r = jnp.asarray(relative_position, jnp.int32)
    if bidirectional:
        num_buckets //= 2
        offset = jnp.where(r > 0, num_buckets, 0)
        n = jnp.abs(r)
    else:
        offset = 0
        n = jnp.maximum(-r, 0)
    max_exact = num_buckets // 2
    # max() keeps the log finite where the exact branch is taken anyway.
    ratio = jnp.maximum(n, max_exact).astype(f32) / max_exact
    scaled = jnp.log(ratio) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    large = jnp.minimum(max_exact + scaled.astype(jnp.int32), num_buckets - 1)
    return (offset + jnp.where(n < max_exact, n, large)).astype(jnp.int32)


def check_t5_buckets(bidirectional: bool, num_buckets: int, max_distance: int) -> None:
    """Raise ConfigError unless T5 bucketing is well defined for these hyperparameters."""
    if bidirectional and num_buckets % 2:
        raise ConfigError(
            f"num_buckets={num_buckets} must be even when bidirectional (half per direction)"
        )
    per_side = num_buckets // 2 if bidirectional else num_buckets
    if per_side < 2:
        raise ConfigError(
            f"num_buckets={num_buckets} too small: each direction needs >= 2 buckets (T5 uses 32)"
        )
    if max_distance <= per_side // 2:
        raise ConfigError(
            f"max_distance={max_distance} must exceed the {per_side // 2} exact buckets "
            "(T5 uses 128)"
        )


def deberta_log_bucket(
    relative_position: jax.Array, bucket_size: int, max_position: int
) -> jax.Array:
    """DeBERTa's log-bucketed relative position; int[...] -> int32[...] (sign kept).

    With mid = bucket_size // 2: |d| <= mid keeps d; otherwise
        sign(d) * (ceil(log(|d| / mid) / log((max_position - 1) / mid) * (mid - 1)) + mid),
    which reaches bucket_size - 1 at |d| = max_position - 1 and keeps growing (slowly) past it;
    the encoding clips to [-bucket_size, bucket_size). Callers pass DeBERTa's own distance,
    query minus key. Source: He et al. 2021 (DeBERTa v2, `make_log_bucket_position`).
    """
    mid = bucket_size // 2
    d = jnp.asarray(relative_position, jnp.int32)
    magnitude = jnp.abs(d)
    # max() keeps the log finite where |d| <= mid keeps d anyway.
    ratio = jnp.maximum(magnitude, mid).astype(f32) / mid
    log_pos = jnp.ceil(jnp.log(ratio) / math.log((max_position - 1) / mid) * (mid - 1)) + mid
    return jnp.where(magnitude <= mid, d, jnp.sign(d) * log_pos.astype(jnp.int32))


def alibi_slopes(num_heads: int) -> jax.Array:
    """ALiBi's per-head slopes; float32[num_heads].

    n a power of two: m_h = 2^(-8h/n), h = 1..n. Otherwise the 2^floor(log2 n) slopes of that
    sequence, then every other slope of the sequence for 2 * 2^floor(log2 n) heads until n.
    Source: Press et al., "Train Short, Test Long", ICLR 2022.
    """
    if num_heads < 1:
        raise ConfigError(f"alibi needs num_heads >= 1, got {num_heads}")

    def geometric(n):
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = geometric(closest) + geometric(2 * closest)[0::2][: num_heads - closest]
    return jnp.asarray(np.array(slopes), f32)


def _normal(rng: jax.Array, shape: tuple[int, ...], std: float) -> jax.Array:
    return std * jax.random.normal(rng, shape, f32)


def _check_head_sizes(dims: Dims) -> None:
    if dims.head_dim < 1 or dims.d_model < 1:
        raise ConfigError(
            f"head_dim={dims.head_dim}, d_model={dims.d_model}: both must be positive"
        )


def _take_head(w: jax.Array, head: jax.Array, axis: int) -> jax.Array:
    """One head's slice of a per-head parameter; `head` may be traced (vmap over heads)."""
    return jnp.take(w, head, axis=axis).astype(f32)


@register("shaw")
@dataclasses.dataclass(frozen=True)
class Shaw(Encoding):
    """Clipped relative key and value embeddings (Shaw et al., NAACL 2018; also NEZHA).

        score_ij += q_i . a^K_ij / sqrt(Dh),  o_i += sum_j p_ij a^V_ij,
        a_ij = table[clip(k_pos_j - q_pos_i, -K, K) + K]
    with K = max_relative_position. params: "rel_k", "rel_v" [2K+1, head_dim], shared across
    heads as in the paper. rel_score is q @ rel_k^T ([Lq, 2K+1]) gathered by bucket;
    rel_value adds p_ij into the 2K+1 buckets (a segment sum) and then multiplies by rel_v.
    """

    max_relative_position: int = 16

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        k_key, k_value = jax.random.split(rng)
        shape = (2 * self.max_relative_position + 1, dims.head_dim)
        return {
            "rel_k": _normal(k_key, shape, TABLE_STD),
            "rel_v": _normal(k_value, shape, TABLE_STD),
        }

    def check(self, dims: Dims) -> None:
        super().check(dims)
        _check_head_sizes(dims)
        if self.max_relative_position < 1:
            raise ConfigError(
                f"shaw max_relative_position={self.max_relative_position} must be >= 1 "
                "(Shaw et al. use 16)"
            )

    def _bucket(self, q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
        k = self.max_relative_position
        return jnp.clip(relative_position(q_pos, k_pos), -k, k) + k

    def rel_score(self, params, q, k, q_pos, k_pos, head) -> jax.Array:
        """q: [Lq, Dh], k: [Lk, Dh] (unused) -> float32[Lq, Lk]."""
        sides = self.rel_prepare(params, q, k, q_pos, k_pos, head)
        return self.prepared_score(params, *sides, q_pos, k_pos, head)

    def rel_prepare(self, params, q, k, q_pos, k_pos, head):
        """-> (q . rel_k per bucket float32[Lq, 2K+1], scaled; nothing on the key side)."""
        del k, q_pos, k_pos, head
        per_bucket = q.astype(f32) @ params["rel_k"].astype(f32).T
        return self.logit_scale(q.shape[-1]) * per_bucket, ()

    def prepared_score(self, params, q_side, k_side, q_pos, k_pos, head) -> jax.Array:
        del params, k_side, head
        return jnp.take_along_axis(q_side, self._bucket(q_pos, k_pos), axis=1)

    def rel_value(self, params, probs, q_pos, k_pos, head) -> jax.Array:
        """probs: float32[Lq, Lk] -> float32[Lq, Dh]."""
        del head
        num = 2 * self.max_relative_position + 1
        rows = probs.shape[0]
        segment = self._bucket(q_pos, k_pos) + num * jnp.arange(rows)[:, None]
        mass = jax.ops.segment_sum(
            probs.astype(f32).ravel(), segment.ravel(), num_segments=rows * num
        )
        return mass.reshape(rows, num) @ params["rel_v"].astype(f32)


@register("xl")
@dataclasses.dataclass(frozen=True)
class TransformerXL(Encoding):
    """Transformer-XL relative attention (Dai et al., ACL 2019); nothing on values.

        score_ij += (u_h . k_j + (q_i + v_h) . (W_R,h R_{i-j})) / sqrt(Dh)
    R_{i-j} = sinusoidal(q_pos_i - k_pos_j, d_model) (XL's query-minus-key distance, not
    clipped); params: "u", "v" [H, Dh], "w_r" [d_model, H, Dh], all N(0, 0.02^2) as in XL.
    The position term is computed exactly for any positions without an [Lq, Lk, Dh] tensor:
    by sin/cos angle addition, a_i . R(x_i - y_j) = rotate(a_i, x_i) . [cos(y_j w), sin(y_j w)]
    with a_i = (q_i + v_h) W_R,h^T, one [Lq, D] x [D, Lk] matmul. Positions are taken
    relative to q_pos[0] first so the angles stay small and a common shift changes nothing.
    """

    base: float = 10000.0

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        k_u, k_v, k_r = jax.random.split(rng, 3)
        heads = (dims.num_heads, dims.head_dim)
        return {
            "u": _normal(k_u, heads, TABLE_STD),
            "v": _normal(k_v, heads, TABLE_STD),
            "w_r": _normal(k_r, (dims.d_model, *heads), TABLE_STD),
        }

    def check(self, dims: Dims) -> None:
        super().check(dims)
        _check_head_sizes(dims)
        if dims.d_model % 2:
            raise ConfigError(
                f"xl needs an even d_model for its sin/cos pairs, got d_model={dims.d_model}"
            )
        if self.base <= 1.0:
            raise ConfigError(f"xl base={self.base} must be > 1 (10000 is the usual)")

    def rel_score(self, params, q, k, q_pos, k_pos, head) -> jax.Array:
        """q: [Lq, Dh], k: [Lk, Dh] -> float32[Lq, Lk]."""
        sides = self.rel_prepare(params, q, k, q_pos, k_pos, head)
        return self.prepared_score(params, *sides, q_pos, k_pos, head)

    def rel_prepare(self, params, q, k, q_pos, k_pos, head):
        """-> ({"feat": [Lq, D]}, {"feat": [Lk, D], "content": [Lk]}), scaled: the rotated
        a_i, the keys' [cos, sin] and u_h . k_j, so a block's score is one matmul."""
        w_r = _take_head(params["w_r"], head, axis=1)  # [D, Dh]
        u = _take_head(params["u"], head, axis=0)
        v = _take_head(params["v"], head, axis=0)
        a = (q.astype(f32) + v) @ w_r.T  # [Lq, D]
        freqs = inverse_frequencies(w_r.shape[0], self.base)
        origin = q_pos[0]
        q_angle = (q_pos - origin).astype(f32)[:, None] * freqs
        k_angle = (k_pos - origin).astype(f32)[:, None] * freqs
        a_sin, a_cos = a[:, 0::2], a[:, 1::2]
        s, c = jnp.sin(q_angle), jnp.cos(q_angle)
        scale = self.logit_scale(q.shape[-1])
        q_feat = scale * jnp.concatenate([a_sin * s + a_cos * c, a_cos * s - a_sin * c], axis=-1)
        k_feat = jnp.concatenate([jnp.cos(k_angle), jnp.sin(k_angle)], axis=-1)
        return {"feat": q_feat}, {"feat": k_feat, "content": scale * (k.astype(f32) @ u)}

    def prepared_score(self, params, q_side, k_side, q_pos, k_pos, head) -> jax.Array:
        del params, q_pos, k_pos, head
        return k_side["content"][None, :] + q_side["feat"] @ k_side["feat"].T


def _read_by_gather(table: jax.Array, slot_of: jax.Array, r: jax.Array) -> jax.Array:
    """The table tabulated per distance ([H, 2R + 1], a gather of 2R + 1 rows), then one
    lookup per pair. Its gradient is a scatter-add of every pair into 2R + 1 slots: cheap on
    a CPU."""
    per_distance = jnp.take(table.T, slot_of, axis=1)
    return jnp.take(per_distance, r, axis=-1)


def _read_by_one_hot(table: jax.Array, slot_of: jax.Array, r: jax.Array) -> jax.Array:
    """A matrix product of the one-hot slots with the table (t5x's RelativePositionBiases):
    its gradient is a matrix product too, where a gather's would be a scatter-add of every
    pair into a few slots, the slowest pattern for a GPU's atomics. HIGHEST precision keeps
    the float32 values exact where matmuls default to TF32."""
    one_hot = jax.nn.one_hot(slot_of[r], table.shape[0], dtype=table.dtype)
    return jnp.einsum("qkn,nh->hqk", one_hot, table, precision=jax.lax.Precision.HIGHEST)


# How a table indexed through the clipped distance reaches every pair, by platform: on a CPU
# the gather is the faster (experiments/bench/t5_onehot_cpu); on a GPU its scatter-add
# gradient took most of T5's step on an H200.
TABLE_READS = {"cpu": _read_by_gather, "gpu": _read_by_one_hot, "tpu": _read_by_one_hot}


def read_by_distance(table: jax.Array, slot_of: jax.Array, q_pos: jax.Array,
                     k_pos: jax.Array, platform: str | None = None) -> jax.Array:
    """table [N, H], slot_of int[2R + 1] (the row of each distance -R..R) -> float32[H, Lq, Lk]
    with [h, i, j] = table[slot_of[clip(k_pos_j - q_pos_i, -R, R) + R], h].

    For a function of the relative position that is constant past |r| = R (T5's buckets): the
    slot of each distance is computed once and read per pair, no per-pair logarithm. platform
    (default: JAX's default backend) picks the construction (`TABLE_READS`); each gives the
    same values and gradients.
    """
    reach = (slot_of.shape[0] - 1) // 2
    r = jnp.clip(relative_position(q_pos, k_pos), -reach, reach) + reach
    read = TABLE_READS.get(platform or jax.default_backend(), _read_by_one_hot)
    return read(table.astype(f32), slot_of, r)


def _t5_bias(table, q_pos, k_pos, bidirectional, num_buckets, max_distance,
             platform: str | None = None) -> jax.Array:
    """table: [num_buckets, H] -> float32[H, Lq, Lk]."""
    distances = jnp.arange(-max_distance, max_distance + 1, dtype=jnp.int32)
    slot_of = t5_bucket(distances, bidirectional, num_buckets, max_distance)
    return read_by_distance(table, slot_of, q_pos, k_pos, platform)


@register("t5")
@dataclasses.dataclass(frozen=True)
class T5(Encoding):
    """T5 relative bias: logits_hij += scale * beta[bucket(k_pos_j - q_pos_i), h] (Raffel et
    al. 2020), beside q.k / sqrt(Dh).

    params: "table" [num_buckets, H], init N(0, init_std^2). bias -> float32[H, Lq, Lk].
    bidirectional: None (default) follows the model (`for_model`): unidirectional in a causal
    model, so all buckets serve the past as in T5's decoder, bidirectional in an encoder as in
    T5's encoder; used on its own, None means bidirectional.
    The table's conventions, each a setting (the last is model-wide):
      scale     a constant on the bias; 1 (default, T5 and Hugging Face's T5); x-transformers'
                T5RelativePositionBias multiplies by sqrt(head_dim) (5.657 at Dh = 32), so its
                table's updates move the logits sqrt(Dh) times as far.
      init_std  the table's initial std; 0.02 (default, posjax's tables); x-transformers
                embeds with nn.Embedding's N(0, 1); Hugging Face's T5 d_model^-0.5.
      model.share_position_params  one table for every layer (T5 and x-transformers compute
                the bias once and share it) instead of one per layer (default).
    So x-transformers' T5 is scale=sqrt(head_dim), init_std=1.0 and
    model.share_position_params=true (experiments/t5_conventions).
    """

    distance_only: ClassVar[bool] = True
    bidirectional: bool | None = None
    num_buckets: int = 32
    max_distance: int = 128
    scale: float = 1.0
    init_std: float = TABLE_STD

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        return {"table": _normal(rng, (self.num_buckets, dims.num_heads), self.init_std)}

    def check(self, dims: Dims) -> None:
        super().check(dims)
        check_t5_buckets(self.bidirectional is not False, self.num_buckets, self.max_distance)
        if not (math.isfinite(self.scale) and self.scale != 0.0):
            raise ConfigError(f"t5 scale={self.scale} must be finite and non-zero (1: T5; "
                              "sqrt(head_dim): x-transformers); encoding=none has no bias")
        if not (math.isfinite(self.init_std) and self.init_std >= 0.0):
            raise ConfigError(f"t5 init_std={self.init_std} must be >= 0 (0.02: posjax; "
                              "1.0: x-transformers)")

    def bias(self, params: Params, q_pos: jax.Array, k_pos: jax.Array,
             num_heads: int) -> jax.Array:
        return self.scale * _t5_bias(params["table"], q_pos, k_pos,
                                     self.bidirectional is not False, self.num_buckets,
                                     self.max_distance)

    @property
    def table_radius(self) -> int:  # type: ignore[override]
        return self.max_distance

    def bias_table(self, params: Params, num_heads: int, radius: int) -> jax.Array:
        """float32[H, 2 radius + 1]: scale times the bucket's value at each distance
        -radius..radius."""
        distances = jnp.arange(-radius, radius + 1, dtype=jnp.int32)
        slots = t5_bucket(distances, self.bidirectional is not False, self.num_buckets,
                          self.max_distance)
        return self.scale * params["table"].astype(f32)[slots].T


# The sign that turns r = key - query into the distance p2c indexes with: the paper's
# d(j, i) = k_pos_j - q_pos_i = r, or the released code's d(i, j) = -r.
P2C_INDEX = {"paper": 1, "code": -1}


@register("deberta")
@dataclasses.dataclass(frozen=True)
class DeBERTa(Encoding):
    """DeBERTa disentangled attention: content-to-position and position-to-content terms.

        score_ij = (q_i.k_j + q_i.Kr[d(i, j)] + k_j.Qr[d(j, i)]) / sqrt(3 Dh)
    DeBERTa's distance is query minus key: d(i, j) = clip(deberta_log_bucket(q_pos_i -
    k_pos_j) + k, 0, 2k - 1) with k = bucket_size. p2c_index picks p2c's index: "paper"
    (default) uses d(j, i) as in the paper's formula; "code" uses d(i, j) as the released code
    and Hugging Face's DebertaV2 do (gather with -relative_pos, then transpose), i.e. the rows
    of Qr mirrored: the same model up to that relabeling. Kr = rel_emb W_K,r, Qr = rel_emb W_Q,r.
    DeBERTa reuses the content W_Q / W_K for Qr / Kr; posjax encoders are self-contained, so
    these are separate projections (and rel_emb is not layer-normalised).
    params: "rel_emb" [2k, d_model] (N(0, 0.02^2)), "wq_r", "wk_r" [d_model, H, Dh].
    c2p gathers from q @ Kr^T ([Lq, 2k]), p2c from k @ Qr^T ([Lk, 2k]).
    DeBERTa's absolute positions in its last layers (the enhanced mask decoder) are the model
    option model.absolute_last_layers (posjax.models.transformer.Backbone).
    Source: He et al., "DeBERTa: Decoding-enhanced BERT with Disentangled Attention", ICLR 2021.
    """

    bucket_size: int = 64
    max_position: int = 512
    p2c_index: str = "paper"

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        k_emb, k_q, k_k = jax.random.split(rng, 3)
        proj = (dims.d_model, dims.num_heads, dims.head_dim)
        std = 1.0 / math.sqrt(dims.d_model)
        return {
            "rel_emb": _normal(k_emb, (2 * self.bucket_size, dims.d_model), TABLE_STD),
            "wq_r": _normal(k_q, proj, std),
            "wk_r": _normal(k_k, proj, std),
        }

    def check(self, dims: Dims) -> None:
        super().check(dims)
        _check_head_sizes(dims)
        if self.bucket_size < 2:
            raise ConfigError(f"deberta bucket_size={self.bucket_size} must be >= 2 (paper: 256)")
        if self.p2c_index not in P2C_INDEX:
            raise unknown("deberta p2c_index", self.p2c_index, P2C_INDEX)
        if self.max_position - 1 <= self.bucket_size // 2:
            raise ConfigError(
                f"deberta max_position={self.max_position} must exceed bucket_size / 2 + 1 = "
                f"{self.bucket_size // 2 + 1} (paper: 512)"
            )

    def logit_scale(self, head_dim: int) -> float:
        return 1.0 / math.sqrt(3 * head_dim)

    def _index(self, distance: jax.Array) -> jax.Array:
        """The row of rel_emb for DeBERTa's distance (query minus key)."""
        return self._row(deberta_log_bucket(distance, self.bucket_size, self.max_position))

    def _row(self, bucket: jax.Array) -> jax.Array:
        k = self.bucket_size
        return jnp.clip(bucket + k, 0, 2 * k - 1)

    def rel_score(self, params, q, k, q_pos, k_pos, head) -> jax.Array:
        """q: [Lq, Dh], k: [Lk, Dh] -> float32[Lq, Lk] (c2p + p2c, scaled)."""
        sides = self.rel_prepare(params, q, k, q_pos, k_pos, head)
        return self.prepared_score(params, *sides, q_pos, k_pos, head)

    def rel_prepare(self, params, q, k, q_pos, k_pos, head):
        """-> (q @ Kr^T [Lq, 2k], k @ Qr^T [Lk, 2k]), scaled: every bucket's c2p and p2c
        term, which a block's score only gathers from."""
        del q_pos, k_pos
        rel_emb = params["rel_emb"].astype(f32)
        pos_query = rel_emb @ _take_head(params["wq_r"], head, axis=1)  # [2k, Dh]
        pos_key = rel_emb @ _take_head(params["wk_r"], head, axis=1)
        scale = self.logit_scale(q.shape[-1])
        return scale * (q.astype(f32) @ pos_key.T), scale * (k.astype(f32) @ pos_query.T)

    def prepared_score(self, params, q_side, k_side, q_pos, k_pos, head) -> jax.Array:
        del params, head
        # DeBERTa's d(i, j) = q_pos_i - k_pos_j; its log bucket is odd, so p2c's d(j, i)
        # (the paper) is minus it and the code's d(i, j) is it: one logarithm per pair.
        bucket = deberta_log_bucket(-relative_position(q_pos, k_pos), self.bucket_size,
                                    self.max_position)
        c2p = jnp.take_along_axis(q_side, self._row(bucket), axis=1)
        p2c_rows = self._row(-P2C_INDEX[self.p2c_index] * bucket)
        p2c = jnp.take_along_axis(k_side, p2c_rows.T, axis=1).T
        return c2p + p2c


@register("tupe")
@dataclasses.dataclass(frozen=True)
class TUPE(Encoding):
    """TUPE: untied absolute position correlation plus a T5 bucket bias (Ke et al., ICLR 2021).

        logits_hij = q_i.k_j / sqrt(2 Dh) + (u_i U_Q,h + c_Q,h).(u_j U_K,h + c_K,h) / sqrt(2 Dh)
                     + b_h[bucket(r)],          u = LayerNorm(P[pos])
    as the authors' code computes it (TUPE's fairseq TransformerSentenceEncoder: the position
    table is layer-normalised, the projections have biases, BERT's N(0, 0.02^2) init with zero
    biases), so the untied term starts at the code's scale (std ~0.21 at d = 768; without the
    LayerNorm and with 1/sqrt(d) projections it started ~750x weaker). The authors compute the
    term once and share it across layers: model.share_position_params=true does the same;
    by default each layer has its own copy, like every attention site.
    params: "table" [max_len, d_model], "ln_scale", "ln_bias" [d_model], "u_q", "u_k"
    [d_model, H, Dh], "c_q", "c_k" [H, Dh], "buckets" [num_buckets, H].
    bias -> float32[H, Lq, Lk]; positions past max_len give NaN. The paper's special untying
    of [CLS] is not modelled. bidirectional (of the bucket bias): as T5's.
    """

    bidirectional: bool | None = None
    num_buckets: int = 32
    max_distance: int = 128

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        k_table, k_q, k_k, k_b = jax.random.split(rng, 4)
        proj = (dims.d_model, dims.num_heads, dims.head_dim)
        heads = (dims.num_heads, dims.head_dim)
        return {
            "table": _normal(k_table, (dims.max_len, dims.d_model), TABLE_STD),
            "ln_scale": jnp.ones((dims.d_model,), f32),
            "ln_bias": jnp.zeros((dims.d_model,), f32),
            "u_q": _normal(k_q, proj, TABLE_STD),
            "u_k": _normal(k_k, proj, TABLE_STD),
            "c_q": jnp.zeros(heads, f32),
            "c_k": jnp.zeros(heads, f32),
            "buckets": _normal(k_b, (self.num_buckets, dims.num_heads), TABLE_STD),
        }

    def check(self, dims: Dims) -> None:
        super().check(dims)
        _check_head_sizes(dims)
        if dims.max_len < 1:
            raise ConfigError(f"tupe max_len={dims.max_len} < 1: its table needs a row")
        check_t5_buckets(self.bidirectional is not False, self.num_buckets, self.max_distance)

    def logit_scale(self, head_dim: int) -> float:
        return 1.0 / math.sqrt(2 * head_dim)

    def max_positions(self, dims: Dims) -> int:
        return dims.max_len

    def _positions(self, params: Params, positions: jax.Array, side: str) -> jax.Array:
        """int32[L] -> float32[H, L, Dh]: LayerNorm(P[pos]) U + c for side "q" or "k"."""
        rows = table_lookup(params["table"], positions)
        mean = rows.mean(-1, keepdims=True)
        normed = (rows - mean) * jax.lax.rsqrt(((rows - mean) ** 2).mean(-1, keepdims=True)
                                              + 1e-5)
        normed = normed * params["ln_scale"].astype(f32) + params["ln_bias"].astype(f32)
        projected = jnp.einsum("ld,dhe->hle", normed, params[f"u_{side}"].astype(f32))
        return projected + params[f"c_{side}"].astype(f32)[:, None, :]

    def bias(self, params: Params, q_pos: jax.Array, k_pos: jax.Array,
             num_heads: int) -> jax.Array:
        sides = self.bias_prepare(params, q_pos, k_pos, num_heads)
        return self.prepared_bias(params, *sides, q_pos, k_pos, num_heads)

    def bias_prepare(self, params: Params, q_pos: jax.Array, k_pos: jax.Array,
                     num_heads: int):
        """-> (query-side [Lq, H, Dh] scaled, key-side [Lk, H, Dh]) of the untied term."""
        del num_heads
        pq, pk = self._positions(params, q_pos, "q"), self._positions(params, k_pos, "k")
        scale = self.logit_scale(pq.shape[-1])
        return jnp.swapaxes(pq, 0, 1) * scale, jnp.swapaxes(pk, 0, 1)

    def prepared_bias(self, params: Params, q_side, k_side, q_pos, k_pos,
                      num_heads: int) -> jax.Array:
        del num_heads
        untied = jnp.einsum("qhe,khe->hqk", q_side, k_side)
        buckets = _t5_bias(
            params["buckets"],
            q_pos,
            k_pos,
            self.bidirectional is not False,
            self.num_buckets,
            self.max_distance,
        )
        return untied + buckets


@register("alibi")
@dataclasses.dataclass(frozen=True)
class ALiBi(Encoding):
    """ALiBi: logits_hij += -m_h |k_pos_j - q_pos_i| (Press et al., ICLR 2022).

    The causal form is -m_h (i - j) for j <= i; the future is masked, so -m_h |r| gives the
    same attention and one formula serves both. bidirectional=False (the paper's setting)
    marks the encoding causal_only; bidirectional=True is the symmetric variant for encoders.
    None (default) follows the model (`for_model`); used on its own, None means causal.
    bias -> float32[H, Lq, Lk] with the slopes of `alibi_slopes`; ALiBi has no parameters.
    """

    distance_only: ClassVar[bool] = True
    bidirectional: bool | None = None

    @property
    def causal_only(self) -> bool:  # type: ignore[override]
        return not self.bidirectional

    def bias(self, params: Params, q_pos: jax.Array, k_pos: jax.Array,
             num_heads: int) -> jax.Array:
        del params
        slopes = alibi_slopes(num_heads)
        distance = jnp.abs(relative_position(q_pos, k_pos)).astype(f32)
        return -slopes[:, None, None] * distance[None]

    def bias_table(self, params: Params, num_heads: int, radius: int) -> jax.Array:
        """float32[H, 2 radius + 1]: -m_h |r| for r = -radius..radius."""
        del params
        distance = jnp.abs(jnp.arange(-radius, radius + 1)).astype(f32)
        return -alibi_slopes(num_heads)[:, None] * distance[None]


def _clamp_keeping_gradient(x: jax.Array, low: float, high: float) -> jax.Array:
    """clip(x, low, high) in value, identity in gradient.

    KERPLE's code clamps the stored parameter in place (`.data.clamp_`) and then uses it, so
    the forward sees the clamped value and the gradient reaches the parameter unchanged; a
    plain clip would give zero gradient below `low` and freeze a coefficient there for good.
    Unlike the in-place clamp, the stored value is not reset, so it may sit below `low` (while
    the value used is `low`) until its gradient brings it back.
    """
    return x + jax.lax.stop_gradient(jnp.clip(x, low, high) - x)


class _Kerple(Encoding):
    """Shared parts of the KERPLE kernels (Chi et al., NeurIPS 2022).

    Per head learned p, a > 0, used clamped to p >= 0.01 and 0.01 <= a <= a_max with the
    gradient of the unclamped value (`_clamp_keeping_gradient`, as KERPLE's code). Init as in
    KERPLE's code (gpt-neox fork, megatron/mpu/layers.py): uniform [0, 1) times p_init_max for
    p and a_init_max for a. params: "p", "a" [H]. bias -> float32[H, Lq, Lk].
    """

    distance_only: ClassVar[bool] = True
    eps: ClassVar[float] = 0.01
    a_max: ClassVar[float] = math.inf
    p_init_max: ClassVar[float] = 2.0
    a_init_max: ClassVar[float] = 1.0

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        k_p, k_a = jax.random.split(rng)
        heads = (dims.num_heads,)
        return {
            "p": jax.random.uniform(k_p, heads, f32) * self.p_init_max,
            "a": jax.random.uniform(k_a, heads, f32) * self.a_init_max,
        }

    def _coefficients(self, params: Params) -> tuple[jax.Array, jax.Array]:
        """(p, a) [H] as used: clamped in value, not in gradient."""
        p = _clamp_keeping_gradient(params["p"].astype(f32), self.eps, math.inf)
        a = _clamp_keeping_gradient(params["a"].astype(f32), self.eps, self.a_max)
        return p, a

    def bias(self, params: Params, q_pos: jax.Array, k_pos: jax.Array,
             num_heads: int) -> jax.Array:
        p, a = self._coefficients(params)
        distance = jnp.abs(relative_position(q_pos, k_pos)).astype(f32)[None]
        return self._kernel(p[:, None, None], a[:, None, None], distance)

    def bias_table(self, params: Params, num_heads: int, radius: int) -> jax.Array:
        """float32[H, 2 radius + 1]: the kernel at |r| for r = -radius..radius."""
        p, a = self._coefficients(params)
        distance = jnp.abs(jnp.arange(-radius, radius + 1)).astype(f32)[None]
        return self._kernel(p[:, None], a[:, None], distance)


@register("kerple_log")
@dataclasses.dataclass(frozen=True)
class KerpleLog(_Kerple):
    """KERPLE logarithmic kernel: logits_hij += -p_h log(1 + a_h |r|), p, a > 0.

    Source: Chi et al., "KERPLE: Kernelized Relative Positional Embedding for Length
    Extrapolation", NeurIPS 2022. Parameters and clipping: see `_Kerple`.
    """

    @staticmethod
    def _kernel(p, a, distance):
        return -p * jnp.log1p(a * distance)


@register("kerple_power")
@dataclasses.dataclass(frozen=True)
class KerplePower(_Kerple):
    """KERPLE power kernel: logits_hij += -p_h |r|^a_h, p > 0, a in (0, 2].

    |r|^a is written exp(a log max(|r|, 1)) and zeroed at r = 0, so the gradient in a stays
    finite at r = 0 (0^a has an infinite log there). Init as KERPLE's code: the coefficient
    p ~ U(0, 1), the exponent a ~ U(0, 2). Source: Chi et al., NeurIPS 2022.
    """

    a_max: ClassVar[float] = 2.0
    p_init_max: ClassVar[float] = 1.0
    a_init_max: ClassVar[float] = 2.0

    @staticmethod
    def _kernel(p, a, distance):
        power = jnp.exp(a * jnp.log(jnp.maximum(distance, 1.0)))
        return -p * jnp.where(distance > 0, power, 0.0)


# FIRE's MLP activation by the name of its `activation` hyperparameter: the FIRE paper's ReLU,
# or the LeakyReLU (PyTorch's default slope 0.01) of the DAPE authors' FIRE.
FIRE_ACTIVATIONS = {
    "relu": jax.nn.relu,
    "leaky_relu": functools.partial(jax.nn.leaky_relu, negative_slope=0.01),
}


@register("fire")
@dataclasses.dataclass(frozen=True)
class FIRE(Encoding):
    """FIRE: a learned function of the normalised distance (Li et al. 2023, ICLR 2024).

        logits_hij += MLP_h(psi(i - j) / psi(max(L, i))),  psi(x) = log(c x + 1)
    i = q_pos_i, j = k_pos_j (query minus key, FIRE's convention), clipped at 0: FIRE is
    causal_only, so only j <= i is attended. The MLP is 1 -> hidden -> H with `activation`
    between its layers (FIRE_ACTIVATIONS): "relu" (default), as the FIRE paper and FIRE's
    authors' plain FIRE; "leaky_relu" (negative slope 0.01, PyTorch's nn.LeakyReLU()) is the
    DAPE authors' FIRE inside DAPE (chuanyang-zheng/DAPE, FIRE_DAPE and FIRE_C), which DAPE
    on FIRE uses by default (posjax.encoders.dape). The two differ only where a hidden
    unit's input is negative (at init: normalised distances below its knot).
    c = softplus(raw) > 0, init 0.1 (FIRE's value); the threshold L = exp(log_threshold) > 0,
    init max_len (the training length, so positions below it are normalised alike) and
    learned in log space so its updates are relative. Init: first layer weights |N(0, 1)|
    with knots spread over [0, 1) (bias = -weight * knot), second layer -|N(0, 1/hidden)|,
    so every head starts as a decreasing, piecewise-linear function of distance (an
    ALiBi-like start that training can reshape). A 1e-6 keeps the normaliser positive.
    params: "c" [] (before softplus), "log_threshold" [], "w1", "b1" [hidden],
    "w2" [hidden, H], "b2" [H].
    bias -> float32[H, Lq, Lk]; it builds an [Lq, Lk, hidden] activation (inherent to
    FIRE's per-pair MLP), so use the chunked kernel for long sequences.
    """

    causal_only: ClassVar[bool] = True
    hidden: int = 32
    activation: str = "relu"

    def __post_init__(self):
        if self.activation not in FIRE_ACTIVATIONS:
            raise unknown("fire activation", self.activation, FIRE_ACTIVATIONS)

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        k1, k2 = jax.random.split(rng)
        w1 = jnp.abs(jax.random.normal(k1, (self.hidden,), f32))
        knots = jnp.arange(self.hidden, dtype=f32) / self.hidden
        w2 = -jnp.abs(_normal(k2, (self.hidden, dims.num_heads), 1.0 / math.sqrt(self.hidden)))
        return {
            "c": jnp.asarray(math.log(math.expm1(0.1)), f32),
            "log_threshold": jnp.asarray(math.log(dims.max_len), f32),
            "w1": w1,
            "b1": -w1 * knots,
            "w2": w2,
            "b2": jnp.zeros((dims.num_heads,), f32),
        }

    def check(self, dims: Dims) -> None:
        super().check(dims)
        if self.hidden < 1:
            raise ConfigError(f"fire hidden={self.hidden} must be >= 1 (FIRE uses 32)")
        if dims.max_len < 1:
            raise ConfigError(f"fire max_len={dims.max_len} must be >= 1 (its initial threshold)")

    def bias(self, params: Params, q_pos: jax.Array, k_pos: jax.Array,
             num_heads: int) -> jax.Array:
        params = jax.tree.map(lambda a: jnp.asarray(a, f32), params)
        c = jax.nn.softplus(params["c"])
        threshold = jnp.exp(params["log_threshold"])

        def psi(x):
            return jnp.log1p(c * x)

        distance = jnp.maximum(-relative_position(q_pos, k_pos), 0).astype(f32)
        normaliser = psi(jnp.maximum(threshold, q_pos.astype(f32))) + 1e-6
        x = psi(distance) / normaliser[:, None]  # [Lq, Lk]
        activation = FIRE_ACTIVATIONS[self.activation]
        hidden = activation(x[..., None] * params["w1"] + params["b1"])  # [Lq, Lk, hidden]
        return jnp.einsum("qkm,mh->hqk", hidden, params["w2"]) + params["b2"][:, None, None]
