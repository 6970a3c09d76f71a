"""Scalable-Softmax, SSMax (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention",
arXiv 2501.19399): softmax_j((s_h log n_i + b_h) z_ij) in place of softmax_j(z_ij).

z_ij is the whole logit (scale * q.k after RoPE), n_i the number of keys query i attends to
and s_h a learned scalar per head; b_h is the paper's variant with a learned bias per head
(its appendix), off by default. Beside Su's fixed log-n scaling (`rope logn_train_len`), which
multiplies q by max(1, log n / log L_train) with nothing learned, SSMax learns the slope.

n is counted from the mask, not read from the positions: a causal query sees its own token and
the tokens before it in its segment, a bidirectional one its whole segment. So n stays the
number of keys under PoSE, randomized or shifted positions, and packed segments count alone.
A layer with a sliding window, which would see fewer than n, is refused.
Multiplying the logits needs them whole, so SSMax uses the content-dependent site (dense and
chunked kernels), which hands it the logits of each block.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp

from posjax.encoders import register
from posjax.encoders.base import Dims, Params
from posjax.encoders.positions import segment_bounds
from posjax.encoders.rotary import RoPE
from posjax.errors import ConfigError


def keys_seen(segment_ids: jax.Array, causal: bool) -> jax.Array:
    """segment_ids int32[B, L] (contiguous runs, 0 = padding) -> float32[B, L]: the number of
    keys each query attends to, its index in its segment + 1 (causal) or its segment's length
    (bidirectional); padding tokens count like a segment of their own (never < 1)."""
    start, end = segment_bounds(segment_ids)
    last = jnp.arange(segment_ids.shape[-1], dtype=jnp.int32) if causal else end
    return (last - start + 1).astype(jnp.float32)


@register("ssmax")
@dataclasses.dataclass(frozen=True)
class ScalableSoftmax(RoPE):
    """Logits times s_h log n (learned s per head, n keys seen), on RoPE (`p=0`: NoPE).

    s_init: the starting s of every head; 0 means 1 / log(L_train), so that at the training
    length the model starts as plain softmax. learn_bias: the (s log n + b) variant, b_h
    starting at 0. bidirectional: None follows the model (n = tokens before and at the query
    in a causal model, the segment's length in an encoder). The RoPE hyperparameters are
    RoPE's; ReRoPE's two-pass score (rerope_window) cannot be scaled here and is refused.
    """

    why_no_window: ClassVar[str] = (
        "its n counts the keys of the query's segment, more than the W a sliding window lets "
        "it see")

    s_init: float = 0.0
    learn_bias: bool = False
    bidirectional: bool | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.rerope_window:
            raise ConfigError(
                f"ssmax rerope_window={self.rerope_window}: SSMax scales the whole logit, which "
                "ReRoPE's two-pass score replaces; use rope with rerope_window, or ssmax without"
            )
        if self.s_init < 0:
            raise ConfigError(f"ssmax s_init={self.s_init} must be >= 0 (0: 1 / log(L_train))")

    @property
    def replaces_content(self) -> bool:
        return True

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        params = super().init(rng, dims)
        if self.s_init == 0 and dims.max_len < 2:
            raise ConfigError(f"ssmax s_init=0 needs a training length >= 2, got "
                              f"{dims.max_len}: set s_init > 0")
        s = self.s_init or 1.0 / math.log(dims.max_len)
        params["s"] = jnp.full((dims.num_heads,), s, jnp.float32)
        if self.learn_bias:
            params["b"] = jnp.zeros((dims.num_heads,), jnp.float32)
        return params

    def content_prepare(self, params: Params, x, q, k, segment_ids):
        """(float32[B, L, H] the factor s_h log n_i (+ b_h) of each query, None)."""
        del x, k
        log_n = jnp.log(keys_seen(segment_ids, causal=not self.bidirectional))
        factor = log_n[..., None] * params["s"]
        if self.learn_bias:
            factor = factor + params["b"]
        return jnp.broadcast_to(factor, q.shape[:3]), None

    def content_score(self, params: Params, logits, ok, q_side, k_side, carry):
        """float32[lq, lk]: the block's logits times each query's factor (replacing them)."""
        del params, ok, k_side
        return q_side[:, None] * logits, carry
