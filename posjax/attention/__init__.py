"""Multi-head attention with a position encoding: the entry point the models call.

    multi_head_attention(q, k, v, *, encoding, params, q_pos, k_pos, q_seg, k_seg, causal,
                         impl="dense", dense_max_len=1024, block_size=256,
                         linear_feature="elu") -> [B, Lq, H, Dv]
    check_compatible(encoding, impl, causal) -> None      # ConfigError if it cannot run

impl (registry IMPLS, the config's `model.attention`):
  "dense"    softmax attention with the [Lq, Lk] scores in memory (softmax.dense)
  "chunked"  online-softmax over blocks of `block_size`, O(L) memory (softmax.chunked)
  "auto"     dense when max(Lq, Lk) <= `dense_max_len`, else chunked: decided from the static
             array shapes under jit, so one model evaluates short and long lengths alike
  "linear"   linear attention, O(L) (linear.linear_attention); `linear_feature` picks the
             feature map: "elu" (RoFormer eq. 29, RoPE in the numerator) or "cos" (1 + cos);
             `block_size` is its scan chunk. Only encodings whose every site is input or
             query/key fit, because it never forms the score matrix.

The encoding's query/key site (`rotate`) runs first on the whole batch; then a kernel for one
example and one head is lifted with jax.vmap over heads (passing the head index, so per-head
parameters are indexed inside the sites) and over the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp

from posjax.attention import linear, masks, softmax
from posjax.errors import ConfigError, unknown

if TYPE_CHECKING:
    from posjax.encoders.base import Encoding


def _softmax_path(impl: str) -> Callable[..., jax.Array]:
    attend = softmax.IMPLS[impl]

    def run(q, k, v, *, encoding, params, q_pos, k_pos, q_seg, k_seg, causal, **options):
        # options also holds linear_feature and dense_max_len, which a fixed softmax kernel
        # has no use for.
        block_size = options["block_size"]
        if encoding.rotate is not None:
            q, k = encoding.rotate(params, q, k, q_pos, k_pos)
        scale = encoding.logit_scale(q.shape[-1])
        num_heads = q.shape[2]

        def one_head(q, k, v, head, qp, kp, qs, ks):
            bias = rel = None
            if encoding.bias is not None:
                # The bias does not depend on `head`, so vmap computes it once for all heads.
                bias = lambda a, b: encoding.bias(params, a, b, num_heads)[head]
            if encoding.rel_score is not None or encoding.rel_value is not None:
                rel = softmax.Rel(replaces_content=encoding.replaces_content)
                if encoding.rel_score is not None:
                    score = lambda q, k, a, b: encoding.rel_score(params, q, k, a, b, head)
                    rel = rel._replace(score=score)
                if encoding.rel_value is not None:
                    value = lambda p, a, b: encoding.rel_value(params, p, a, b, head)
                    rel = rel._replace(value=value)
            return attend(
                q,
                k,
                v,
                mask=masks.make(qs, ks, qp, kp, causal=causal),
                bias=bias,
                rel=rel,
                scale=scale,
                block_size=block_size,
            )

        heads = jnp.arange(num_heads, dtype=jnp.int32)
        per_head = jax.vmap(one_head, in_axes=(1, 1, 1, 0, None, None, None, None), out_axes=1)
        per_example = jax.vmap(per_head, in_axes=(0, 0, 0, None, 0, 0, 0, 0))
        return per_example(q, k, v, heads, q_pos, k_pos, q_seg, k_seg)

    return run


def _auto_path(q, k, v, *, dense_max_len, **kw):
    impl = "dense" if max(q.shape[1], k.shape[1]) <= dense_max_len else "chunked"
    return IMPLS[impl].run(q, k, v, **kw)


def _linear_path(q, k, v, *, linear_feature, dense_max_len, **kw):
    del dense_max_len  # linear attention has no [L, L] matrix to avoid
    return linear.linear_attention(q, k, v, feature=linear_feature, **kw)


class _Impl(NamedTuple):
    run: Callable[..., jax.Array]
    # True when the path never forms scores, so bias / relative sites have nowhere to go.
    qk_only: bool


IMPLS: dict[str, _Impl] = {
    "dense": _Impl(_softmax_path("dense"), qk_only=False),
    "chunked": _Impl(_softmax_path("chunked"), qk_only=False),
    "auto": _Impl(_auto_path, qk_only=False),
    "linear": _Impl(_linear_path, qk_only=True),
}


def _label(encoding: Encoding) -> str:
    return repr(encoding.name or type(encoding).__name__)


def _qk_only_encodings() -> list[str]:
    # Imported here: the registry imports every encoder module, which attention should not
    # need just to run.
    from posjax import encoders

    return [n for n in encoders.names() if encoders.get(n).scores_only_through_qk]


def check_compatible(encoding: Encoding, impl: str, causal: bool) -> None:
    """Raise a one-line ConfigError when `encoding` cannot run with attention `impl`.

    Unknown impl -> the valid names; a bias or content-position site with linear attention ->
    the encodings that fit and the impls that take this one;
    a causal-only encoding (xPos, FIRE) in bidirectional attention -> use a causal model.
    """
    if impl not in IMPLS:
        raise unknown("attention implementation", impl, IMPLS)
    name = _label(encoding)
    if IMPLS[impl].qk_only and not encoding.scores_only_through_qk:
        used = "/".join(s for s in encoding.sites() if s not in ("embed", "rotate"))
        fit = ", ".join(_qk_only_encodings())
        other = " or ".join(n for n, p in IMPLS.items() if not p.qk_only)
        raise ConfigError(
            f"encoding {name} cannot run with attention={impl!r} (its {used} site): linear"
            " attention never forms the score matrix, so only encodings at the input or query/key"
            f" site fit: {fit}; use attention={other} for {name}"
        )
    if encoding.causal_only and not causal:
        raise ConfigError(
            f"encoding {name} is defined only for causal attention and this attention is"
            " bidirectional; use it in a causal model or pick another encoding"
        )


def multi_head_attention(
    q,
    k,
    v,
    *,
    encoding: Encoding,
    params,
    q_pos,
    k_pos,
    q_seg,
    k_seg,
    causal: bool,
    impl: str = "dense",
    dense_max_len: int = 1024,
    block_size: int = 256,
    linear_feature: str = "elu",
):
    """Attention of every head of every example, with `encoding` at its sites.

    q: [B, Lq, H, Dh], k: [B, Lk, H, Dh], v: [B, Lk, H, Dv]; q_pos: int32[B, Lq] (or
    [B, Lq, A] when encoding.position_axes = A), k_pos likewise; q_seg: int32[B, Lq],
    k_seg: int32[B, Lk] segment ids (0 = padding, never attended; a padding query gets 0);
    causal masks by token index. impl, causal, dense_max_len, block_size and linear_feature
    are static (Python values under jit).
    -> [B, Lq, H, Dv] in v.dtype. See the module docstring for the impls.
    """
    check_compatible(encoding, impl, causal)
    return IMPLS[impl].run(
        q,
        k,
        v,
        encoding=encoding,
        params=params,
        q_pos=q_pos,
        k_pos=k_pos,
        q_seg=q_seg,
        k_seg=k_seg,
        causal=causal,
        dense_max_len=dense_max_len,
        block_size=block_size,
        linear_feature=linear_feature,
    )


__all__ = ["IMPLS", "check_compatible", "multi_head_attention"]
