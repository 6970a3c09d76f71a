"""Recurrent token mixers that `model.layer_pattern` may name in place of an attention layer.

    "gdn"   GatedDeltaNet: the gated delta rule (posjax.attention.deltanet) with fla's layer
            around it (fla-org/flash-linear-attention, fla/layers/gated_deltanet.py).

Such a layer takes no position encoding: the order of its recurrence is what tells it where a
token is, so a hybrid such as "gdn+gdn+gdn+none" (Qwen3-Next's three Gated DeltaNet layers per
full-attention layer, here with a NoPE softmax layer) has position only through the
recurrent layers. A recurrent layer has the Attention layer's call, (x [B, L, D], positions,
segment_ids) -> [B, L, D], reads no positions, and resets its state (and its short
convolution's window) where the segment id changes, so packed rows do not leak. It is causal
by construction: a bidirectional model kind refuses it at construction.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from posjax import encoders
from posjax.attention.deltanet import gated_delta_rule_chunked, l2_normalize
from posjax.errors import ConfigError
from posjax.models.layers import ModelConfig, dense

# Tokens per chunk of the chunkwise form (fla's chunk size): a scan over L / 64 steps, an
# O(64 x 64) triangular solve per chunk and head.
GDN_CHUNK = 64
# The short causal convolution's width (fla's conv_size).
GDN_CONV = 4


class ShortConv(nnx.Module):
    """A depthwise causal convolution over tokens then silu (fla's ShortConvolution without a
    bias): x [B, L, *channels] -> [B, L, *channels], y_t = silu(sum_i w[i] x_{t-(K-1)+i}),
    w: [K, *channels] in PyTorch's Conv1d tap order (w[K-1] reads token t). Taps that fall
    before the row or in another segment read zero. Init U(-1/sqrt(K), 1/sqrt(K)), PyTorch's
    default for a depthwise Conv1d (fan_in = K)."""

    def __init__(self, channels: tuple[int, ...], size: int, cfg: ModelConfig, *,
                 rngs: nnx.Rngs):
        bound = 1.0 / math.sqrt(size)
        self.kernel = nnx.Param(jax.random.uniform(
            rngs.params(), (size, *channels), cfg.weight_dtype, -bound, bound))

    def __call__(self, x: jax.Array, segment_ids: jax.Array) -> jax.Array:
        """x: [B, L, *channels]; segment_ids: int32[B, L]."""
        kernel = self.kernel[...].astype(x.dtype)
        size, length = kernel.shape[0], x.shape[1]
        out = jnp.zeros_like(x)
        for shift in range(size):
            back = jnp.pad(x, [(0, 0), (shift, 0)] + [(0, 0)] * (x.ndim - 2))[:, :length]
            seg = jnp.pad(segment_ids, [(0, 0), (shift, 0)], constant_values=-1)[:, :length]
            same = (seg == segment_ids).reshape(seg.shape + (1,) * (x.ndim - 2))
            out = out + jnp.where(same, back, 0) * kernel[size - 1 - shift]
        return jax.nn.silu(out)


def _dt_bias(key: jax.Array, heads: int) -> jax.Array:
    """fla's dt_bias init: softplus^-1(dt), dt log-uniform in [0.001, 0.1] (Mamba-2's)."""
    lo, hi = math.log(0.001), math.log(0.1)
    dt = jnp.maximum(jnp.exp(jax.random.uniform(key, (heads,)) * (hi - lo) + lo), 1e-4)
    return dt + jnp.log(-jnp.expm1(-dt))


class GatedDeltaNet(nnx.Module):
    """The Gated DeltaNet layer (Yang, Kautz, Hatamizadeh, ICLR 2025), as fla's layer builds it.

    x [B, L, D] ->
      q, k, v = silu(conv(x W_q)), silu(conv(x W_k)), silu(conv(x W_v))   [B, L, H, Dh]
      g = -exp(A_log) softplus(x W_a + dt_bias)   (log alpha, [B, L, H]), beta = sigmoid(x W_b)
      o = gated_delta_rule(l2norm(q), l2norm(k), v, g, beta)   (q scaled by Dh ** -0.5)
      out = (RMSNorm(o) * silu(x W_g)) W_o     (the norm over Dh, one scale shared by heads)
    H = model.num_heads, Dh = model.head_dim (fla's expand_v = 1: values as wide as keys, so
    q, k, v, gate and output projections are 5 D x H Dh weights), no biases (fla has none),
    the conv GDN_CONV taps wide, computed chunkwise (GDN_CHUNK). A_log = log U(0, 16) and
    dt_bias as fla initialises them, float32. The recurrence runs in float32 whatever the
    model's dtype; positions are not read (module docstring). The attention options
    (model.attention, num_kv_heads, qkv_bias, attn_out_bias, qk_norm, output_gate, sink_logit,
    attn_softcap, linear_feature) are the pattern's attention layers' only: this layer reads
    none of them.
    """

    def __init__(self, cfg: ModelConfig, *, causal: bool, rngs: nnx.Rngs):
        if not causal:
            raise ConfigError(
                f"model.layer_pattern={cfg.layer_pattern!r} names 'gdn', a causal recurrent "
                "layer, but this model kind is bidirectional: use gdn in causal models "
                "(kind causal_lm or mixed_lm), or attention layers here")
        heads, dh = cfg.num_heads, cfg.resolved_head_dim
        per_head = (heads, dh)
        self.query = dense(cfg.d_model, per_head, cfg, rngs, use_bias=False)
        self.key = dense(cfg.d_model, per_head, cfg, rngs, use_bias=False)
        self.value = dense(cfg.d_model, per_head, cfg, rngs, use_bias=False)
        self.q_conv, self.k_conv, self.v_conv = (
            ShortConv(per_head, GDN_CONV, cfg, rngs=rngs) for _ in range(3))
        self.decay = dense(cfg.d_model, heads, cfg, rngs, use_bias=False)   # fla's a_proj
        self.write = dense(cfg.d_model, heads, cfg, rngs, use_bias=False)   # fla's b_proj
        self.A_log = nnx.Param(jnp.log(jax.random.uniform(
            rngs.params(), (heads,), jnp.float32, 0.0, 16.0)))
        self.dt_bias = nnx.Param(_dt_bias(rngs.params(), heads))
        self.gate = dense(cfg.d_model, per_head, cfg, rngs, use_bias=False)
        self.out_norm = nnx.RMSNorm(dh, epsilon=cfg.norm_eps, dtype=jnp.float32,
                                    param_dtype=cfg.weight_dtype, rngs=rngs)
        self.out = dense(per_head, cfg.d_model, cfg, rngs, axis=(-2, -1), use_bias=False,
                         residual=True)

    def gates(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(g = log alpha, beta), each float32[B, L, H], from x [B, L, D]."""
        a = self.decay(x).astype(jnp.float32) + self.dt_bias[...]
        g = -jnp.exp(self.A_log[...]) * jax.nn.softplus(a)
        return g, jax.nn.sigmoid(self.write(x).astype(jnp.float32))

    def __call__(self, x: jax.Array, positions: jax.Array, segment_ids: jax.Array) -> jax.Array:
        """x: [B, L, D]; positions: unused (module docstring); segment_ids: int32[B, L], or
        None for whole rows (data.packing=stream), one segment each."""
        del positions
        if segment_ids is None:
            segment_ids = jnp.ones(x.shape[:2], jnp.int32)
        q = self.q_conv(self.query(x), segment_ids)
        k = self.k_conv(self.key(x), segment_ids)
        v = self.v_conv(self.value(x), segment_ids)
        g, beta = self.gates(x)
        o = gated_delta_rule_chunked(l2_normalize(q), l2_normalize(k), v.astype(jnp.float32),
                                     g, beta, GDN_CHUNK, segment_ids=segment_ids)
        o = self.out_norm(o) * jax.nn.silu(self.gate(x).astype(jnp.float32))
        return self.out(o.astype(x.dtype))


# Recurrent layers by the token `model.layer_pattern` names them with; each class is built as
# `cls(cfg, *, causal, rngs)` and called like Attention.
RECURRENT_LAYERS: dict[str, type[nnx.Module]] = {"gdn": GatedDeltaNet}
for _token in RECURRENT_LAYERS:
    encoders.refer(_token, f"{_token} is a recurrent layer, not an attention encoding: name it in "
                           f"model.layer_pattern (layer_pattern={_token}+rope: a hybrid of it "
                           f"and RoPE attention; encoding=none,layer_pattern={_token}+none: of "
                           "it and NoPE)")
