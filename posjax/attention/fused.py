"""Fused softmax attention through `jax.nn.dot_product_attention`, for the whole batch.

    fused(q, k, v, *, q_seg, k_seg, causal, bias=None, scale, platform=None, window=0)
        -> [B, Lq, H, Dv]

It computes what softmax.dense computes, s = scale * q.k + bias, softmax over the allowed
keys (masks.allowed: segments, padding, causal) in float32, rows with no allowed key
(padding queries) zeroed, and hands the work to JAX's own kernel: cuDNN's flash attention on
NVIDIA GPUs for bfloat16 and float16 (`implementation="cudnn"`, causal masking by the kernel
itself so hidden blocks are skipped), XLA elsewhere. Only encodings at the input, query/key
and logits sites fit: a content-position term needs q and k inside the kernel, which the
fused call does not expose.

What cuDNN is handed:
  * rows without segment ids (whole rows, see posjax.attention.whole_rows) get no mask at
    all: `is_causal` alone is exact, and the flash kernel skips the hidden blocks;
  * a bias built once for the batch goes as [1, H, Lq, Lk]: cuDNN broadcasts it over the
    batch and returns its gradient at that shape, summed inside the kernel;
  * a mask, and under `under_vmap()` (seeds trained in one program) a bias too, is given
    the full [B, H, Lq, Lk] shape: JAX's cuDNN batching rule reshapes a batched mask or bias
    to [seeds * B, H, Lq, Lk], which a [B, 1, Lq, Lk] segment mask or a [1, H, Lq, Lk] bias
    cannot take. The broadcast is XLA's, so the bias is still computed once.
  * a sliding window W > 0 (a causal query sees its W latest keys, itself included) goes as
    `local_window_size=(W - 1, 0)`: jax.nn.dot_product_attention's (left, right) window keeps
    q_idx - left <= k_idx <= q_idx + right, and its cuDNN path hands the kernel
    `sliding_window_length = left + 1 = W` under its causal mask, so the hidden blocks are
    skipped. That window counts from token 0 of both queries and keys, so where Lq != Lk
    (queries aligned to the last keys) the window is folded into the boolean mask instead.
A bias is materialised, so `auto` sends bias encodings here only up to its dense length
(see posjax.attention). Values narrower than q and k (latent attention's) are padded with
zeros to their width and the output cut back, as transformers' DeepSeek-V3 pads them for
flash attention.
"""

from __future__ import annotations

import contextlib
import contextvars

import jax
import jax.numpy as jnp

from posjax.attention import masks

# Activation dtypes cuDNN's fused kernel takes; float32 goes through XLA.
CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)

# Read at trace time: True while a program whose attention `jax.vmap` lifts is traced.
_UNDER_VMAP = contextvars.ContextVar("posjax_fused_under_vmap", default=False)


@contextlib.contextmanager
def under_vmap():
    """Trace the attention inside as lifted by `jax.vmap` (seeds in one program): every bias
    goes to cuDNN at [B, H, Lq, Lk], the shape JAX's cuDNN batching rule can reshape. The
    caller wraps the `jax.vmap` call itself, inside its own jit, so the flag and the traced
    program agree."""
    token = _UNDER_VMAP.set(True)
    try:
        yield
    finally:
        _UNDER_VMAP.reset(token)


def implementation(dtype, platform: str) -> str:
    """The `jax.nn.dot_product_attention` implementation for this dtype on this platform."""
    if platform == "gpu" and any(dtype == d for d in CUDNN_DTYPES):
        return "cudnn"
    return "xla"


def fused(q, k, v, *, q_seg, k_seg, causal: bool, bias=None, scale: float,
          platform: str | None = None, window: int = 0):
    """Softmax attention of every head of every example (see module docstring).

    q: [B, Lq, H, Dh], k: [B, Lk, H, Dh], v: [B, Lk, H, Dv] (one dtype); q_seg: int32[B, Lq],
    k_seg: int32[B, Lk] segment ids (0 = padding), or both None for whole rows; causal:
    static, by token index with the queries aligned to the last keys; bias: float32
    [B or 1, H, Lq, Lk] or None; scale: the factor on q.k; platform: the backend's name
    (default: jax.default_backend()); window: the sliding window W (0 = none; causal only).
    -> [B, Lq, H, Dv] in v.dtype.
    """
    if window and not causal:
        raise ValueError("fused: a sliding window is causal here (the W latest keys)")
    impl = implementation(q.dtype, platform or jax.default_backend())
    batch, lq, heads = q.shape[:3]
    lk = k.shape[1]
    segments = None if q_seg is None else jax.vmap(masks.segment_mask)(q_seg, k_seg)
    # cuDNN applies its own causal mask (and skips hidden blocks) for square attention;
    # otherwise causality is folded into the boolean mask.
    kernel_causal = causal and impl == "cudnn" and lq == lk
    allowed = None if segments is None else segments[:, None]  # [B, 1, Lq, Lk]
    q_idx, k_idx = masks.token_indices(lk - lq, lq), masks.token_indices(0, lk)
    if causal and not kernel_causal:
        visible = masks.causal_mask(q_idx, k_idx)[None, None]
        allowed = visible if allowed is None else allowed & visible
    # The library's window counts from token 0 on both sides: exact for square attention.
    local_window = (window - 1, 0) if window and lq == lk else None
    if window and local_window is None:
        near = masks.window_mask(q_idx, k_idx, window)[None, None]
        allowed = near if allowed is None else allowed & near
    if impl == "cudnn":
        full = (batch, heads, lq, lk)
        if bias is not None:
            bias = bias.astype(q.dtype)  # cuDNN takes the activations' dtype
            if _UNDER_VMAP.get():
                bias = jnp.broadcast_to(bias, full)
        if allowed is not None:
            allowed = jnp.broadcast_to(allowed, full)
    # JAX's call takes one head width for q, k and v; latent attention's values are narrower
    # than its queries and keys (posjax.models.latent). Zeros widen the narrower side: zero
    # dims add nothing to q.k (the scale is given), and zero value dims come out as zeros.
    width, value_dim = max(q.shape[-1], v.shape[-1]), v.shape[-1]
    widen = lambda x: (x if x.shape[-1] == width else
                       jnp.pad(x, [(0, 0)] * 3 + [(0, width - x.shape[-1])]))
    out = jax.nn.dot_product_attention(
        widen(q),
        widen(k),
        widen(v),
        bias=bias,
        mask=allowed,
        scale=scale,
        is_causal=kernel_causal,
        local_window_size=local_window,
        implementation=impl,
    )
    out = out[..., :value_dim]
    # A row with no allowed key would average every value; the dense kernel gives it 0.
    # With causal masking by token index a query sees itself unless it lies before the first
    # key (Lq > Lk, queries aligned to the last keys); otherwise the segment mask's rows
    # decide.
    has_keys = None if segments is None else segments.any(-1)[:, :, None, None]
    if causal and lq > lk:
        seen = (q_idx >= 0)[None, :, None, None]
        has_keys = seen if has_keys is None else has_keys & seen
    if has_keys is None:  # whole rows: every query sees at least itself
        return out.astype(v.dtype)
    return jnp.where(has_keys, out, 0).astype(v.dtype)
