"""Multi-head attention with a position encoding: the entry point the models call.

    multi_head_attention(q, k, v, *, encoding, params, q_pos, k_pos, q_seg, k_seg, causal,
                         x=None, impl="dense", dense_max_len=1024, block_size=256,
                         linear_feature="elu", sink=None, window=0, attention_chunk=0,
                         position_reach=0, softcap=0.0)
        -> [B, Lq, H, Dv]
    check_compatible(encoding, impl, causal, sink=False, window=0, softcap=0.0) -> None
        # ConfigError if it cannot run

impl (registry IMPLS, the config's `model.attention`; `register(name, run, sites)` adds one):
  "dense"    softmax attention with the [Lq, Lk] scores in memory (softmax.dense)
  "chunked"  online-softmax over blocks of `block_size`, O(L) memory (softmax.chunked)
             (these two carry every site, the content-dependent one (FoX, CoPE, PaTH)
             included; an encoding with the cross-head site (DAPE) runs their twins in
             mixing.py, which take every head of an example at once)
  "fused"    jax.nn.dot_product_attention for the whole batch (fused.fused): cuDNN's flash
             kernel on GPU in bfloat16/float16, XLA elsewhere; encodings at the input,
             query/key and logits sites (the bias is materialised as [B, H, Lq, Lk], or
             [1, H, Lq, Lk] for one row of positions)
  "flash_bias"  a Pallas flash kernel (flash_bias.flash_bias) with the bias inside it as a
             table over k_pos - q_pos (Encoding.bias_table: ALiBi, T5, KERPLE) plus row and
             column terms u_i + w_j (Encoding.bias_rows_columns: FoX's forget gates), so no
             [L, L] bias exists in either direction and the parameters behind them get their
             gradients through them; Triton on NVIDIA GPUs, interpret mode elsewhere
  "auto"     dense when max(Lq, Lk) <= `dense_max_len`, else chunked, except where cuDNN's
             fused kernel serves the encoding (GPU, bfloat16/float16): then fused, and on a
             GPU above dense_max_len flash_bias for an encoding that declares its form
             (`auto_impl`); decided from the static array shapes and dtype under jit, so one
             model evaluates short and long lengths alike
  "linear"   linear attention, O(L) (linear.linear_attention); `linear_feature` picks the
             feature map: "elu" (RoFormer eq. 29, RoPE in the numerator) or "cos" (1 + cos);
             `block_size` is its scan chunk. Only encodings whose every site is input,
             query/key or value fit, because it never forms the score matrix.

A learned sink logit per head (`sink`, float32[H]: GPT-OSS, transformers' `gpt_oss`
attention) joins each head's softmax denominator and nothing else, p_ij = exp(s_ij) /
(exp(sink_h) + sum_j exp(s_ij)). dense and chunked carry it (softmax.py, and mixing.py's twins),
so `auto` does too: it never picks fused or flash_bias with a sink. Those two and linear
refuse it by name (`Kernel.why_no_sink`): cuDNN's jax.nn.dot_product_attention has no sink
term, the Pallas kernel's online softmax has none, and linear attention has no softmax.

Logit soft-capping (`softcap` = c > 0, model.attn_softcap; Gemma 2's attn_logit_softcapping,
50) squashes each logit, position terms included, to c tanh(s / c) before the softmax
(softmax.py). dense and chunked carry it, so auto does (never picking fused or flash_bias
then); fused, flash_bias and linear refuse it by name (`Kernel.why_no_softcap`).

A sliding window (`window` = W > 0, model.window and layer_pattern's per-layer `window=`;
Gemma 2-4's and Mistral's local layers) lets a causal query see its W latest keys, itself
included (masks.py). dense and chunked carry it in the mask (chunked skips the key blocks it
hides wholly: O(L W) scores), fused hands it to jax.nn.dot_product_attention as
`local_window_size=(W - 1, 0)` (fused.py), flash_bias to its kernel's own window (hidden
blocks skipped by the loop bounds); linear refuses it by name (`Kernel.why_no_window`): its
prefix sums carry every earlier key. A window is causal: bidirectional attention refuses it.

Llama 4's chunked attention (`attention_chunk` = C > 0, model.attention_chunk and
layer_pattern's `attention_chunk=`; not the "chunked" kernel, which computes any attention
block by block) keeps a key only in its query's chunk of C token indices: the segment ids
are cut at every C tokens (masks.chunk_segments) before the kernel runs, so every kernel
carries it through its segment mask; chunked also skips the key blocks outside a query
block's chunks (O(L C) scores), the others compute every [Lq, Lk] score.

The value site (`rotate_value`, VO-RoPE) wraps every impl: values transformed by the keys'
positions before, the output by the inverse at the queries' positions after.
The encoding's query/key site (`rotate`) runs first on the whole batch, and so does the
content-dependent site's `content_prepare` (from the layer's input x and q, k). Then dense and
chunked lift a kernel for one example and one head with jax.vmap over heads (passing the head index,
so per-head parameters are indexed inside the sites) and over the batch; fused takes the
batch whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from posjax.attention import flash_bias, fused, linear, masks, mixing, softmax
from posjax.encoders.base import checked_logits
from posjax.errors import ConfigError
from posjax.registry import Registry

if TYPE_CHECKING:
    from posjax.encoders.base import Encoding


def _bias(encoding: Encoding, params, q_pos, k_pos, num_heads: int) -> jax.Array:
    """encoding.bias(params, q_pos, k_pos, num_heads): [H, Lq, Lk], its shape checked at
    these positions' lengths (encoders.base.checked_logits)."""
    return checked_logits(encoding, "bias", encoding.bias(params, q_pos, k_pos, num_heads),
                          num_heads, q_pos.shape[0], k_pos.shape[0])


def _bias_site(encoding: Encoding, params, qp, kp, head, num_heads, q_info, k_info):
    """This head's softmax.Bias on blocks of the positions (or None): a closure the kernel
    calls per block (a breakpoint in the encoding's bias stops there, not here); a prepared
    site's query- and key-side work is added to q_info / k_info, which the kernel blocks."""
    if encoding.bias is None:
        return None
    if encoding.bias_prepare is None:
        # The bias does not depend on `head`, so vmap computes it once for all heads.
        return lambda a, b: _bias(encoding, params, a["pos"], b["pos"], num_heads)[head]
    # Per position, not per head: vmap computes it once for all heads.
    q_info["bias"], k_info["bias"] = encoding.bias_prepare(params, qp, kp, num_heads)
    return lambda a, b: checked_logits(
        encoding, "prepared_bias", encoding.prepared_bias(
            params, a["bias"], b["bias"], a["pos"], b["pos"], num_heads),
        num_heads, a["pos"].shape[0], b["pos"].shape[0])[head]


def _rel_site(encoding: Encoding, params, q, k, qp, kp, head, q_info, k_info):
    """This head's softmax.Rel (or None), its prepared work added to q_info / k_info."""
    if encoding.rel_score is None and encoding.rel_value is None:
        return None
    rel = softmax.Rel(replaces_content=encoding.replaces_content)
    if encoding.rel_prepare is not None:
        q_info["rel"], k_info["rel"] = encoding.rel_prepare(params, q, k, qp, kp, head)
        rel = rel._replace(score=lambda q, k, a, b: encoding.prepared_score(
            params, a["rel"], b["rel"], a["pos"], b["pos"], head))
    elif encoding.rel_score is not None:
        rel = rel._replace(score=lambda q, k, a, b: encoding.rel_score(
            params, q, k, a["pos"], b["pos"], head))
    if encoding.rel_value is not None:
        rel = rel._replace(value=lambda p, a, b: encoding.rel_value(
            params, p, a["pos"], b["pos"], head))
    return rel


def _content_site(encoding: Encoding, params, sides, q_info, k_info):
    """This head's softmax.Content (or None); `sides`, this head's (q_side, k_side) from
    content_prepare, are added to q_info / k_info so the kernel blocks them."""
    if encoding.content_score is None:
        return None
    q_info["content"], k_info["content"] = sides
    return softmax.Content(
        score=lambda logits, ok, a, b, carry: encoding.content_score(
            params, logits, ok, a["content"], b["content"], carry),
        init=lambda a: encoding.content_carry(a["content"]),
        replaces_content=encoding.replaces_content,
        normalize=encoding.normalizes,
        remainder_to_self=encoding.remainder_to_self,
    )


def _hidden_states(encoding: Encoding, x):
    """x, the layer's input [B, L, D] a content-dependent site reads; ConfigError if None."""
    if x is None:
        raise ConfigError(
            f"encoding {_label(encoding)} reads the layer's hidden states: pass x= to "
            "multi_head_attention"
        )
    return x


def _content_sides(encoding: Encoding, params, x, q, k, segment_ids):
    """content_prepare's (q_side, k_side), leaves [B, L, H, ...], or None without the site."""
    if encoding.content_score is None:
        return None
    return encoding.content_prepare(params, _hidden_states(encoding, x), q, k, segment_ids)


def whole_rows(q_seg, k_seg) -> bool:
    """True when the caller passed no segment ids: every row is one segment without padding,
    at the same positions in every row (a token stream, data.packing="stream"), so no mask
    is needed and the position terms are built once for the batch."""
    return q_seg is None and k_seg is None


def one_row(q_pos, q_seg, k_seg) -> bool:
    """True when one row of positions serves every example, so the position terms are built
    once for the batch: whole rows, or positions passed as int32[1, L] (the train step's
    `shared_positions`: packed documents under an encoding that reads only k_pos - q_pos)."""
    return q_pos.shape[0] == 1 or whole_rows(q_seg, k_seg)


# The kernels that build a bias from one row of positions for the whole batch; the others
# get the row repeated for every example.
_TAKES_ONE_ROW = frozenset({"dense", "chunked", "fused", "flash_bias", "auto"})


def _every_row(pos: jax.Array, rows: int) -> jax.Array:
    """positions [1, L, ...] repeated to [rows, L, ...] (unchanged when they have `rows`)."""
    return jnp.broadcast_to(pos, (rows, *pos.shape[1:]))


def _softmax_path(impl: str) -> Callable[..., jax.Array]:
    attend = softmax.IMPLS[impl]

    def run(q, k, v, *, encoding, params, q_pos, k_pos, q_seg, k_seg, causal, x, sink=None,
            window=0, attention_chunk=0, softcap=0.0, **options):
        # options also holds linear_feature and dense_max_len, which a fixed softmax kernel
        # has no use for.
        block_size = options["block_size"]
        if encoding.rotate is not None:
            q, k = encoding.rotate(params, q, k, q_pos, k_pos)
        scale = encoding.logit_scale(q.shape[-1])
        num_heads = q.shape[2]
        # Positions shared by every row enter the per-example vmap unbatched, so whatever the
        # sites compute from positions alone (a bias, its prepared sides) is computed once;
        # whole rows' segment ids too, so their mask is.
        shared, whole = one_row(q_pos, q_seg, k_seg), whole_rows(q_seg, k_seg)
        if whole:
            q_seg, k_seg = _one_segment(q), _one_segment(k)
        sides = _content_sides(encoding, params, x, q, k, q_seg)

        def one_head(q, k, v, head, qp, kp, qs, ks, sides, sink):
            # Query- and key-side work the sites prepare once for the whole sequence travels
            # with the positions, so the chunked kernel hands each block its slice of it.
            q_info, k_info = {"pos": qp}, {"pos": kp}
            bias = _bias_site(encoding, params, qp, kp, head, num_heads, q_info, k_info)
            rel = _rel_site(encoding, params, q, k, qp, kp, head, q_info, k_info)
            content = _content_site(encoding, params, sides, q_info, k_info)
            return attend(
                q,
                k,
                v,
                mask=masks.make(qs, ks, q_info, k_info, causal=causal, window=window,
                                chunk=attention_chunk),
                bias=bias,
                rel=rel,
                content=content,
                scale=scale,
                block_size=block_size,
                softcap=softcap,
                **({} if sink is None else {"sink": sink}),
            )

        heads = jnp.arange(num_heads, dtype=jnp.int32)
        pos_row, seg_row = None if shared else 0, None if whole else 0
        # The sink (float32[H], or None: no leaves) is per head, the same in every example.
        per_head = jax.vmap(one_head, in_axes=(1, 1, 1, 0, None, None, None, None, 1, 0),
                            out_axes=1)
        per_example = jax.vmap(
            per_head, in_axes=(0, 0, 0, None, pos_row, pos_row, seg_row, seg_row, 0, None))
        if shared:
            q_pos, k_pos = q_pos[0], k_pos[0]
        if whole:
            q_seg, k_seg = q_seg[0], k_seg[0]
        return per_example(q, k, v, heads, q_pos, k_pos, q_seg, k_seg, sides, sink)

    return run


def _mixing_path(impl: str) -> Callable[..., jax.Array]:
    """The path of an encoding with the cross-head site (DAPE): every head of an example at
    once (posjax.attention.mixing), lifted with jax.vmap over the batch."""
    attend = mixing.IMPLS[impl]

    def run(q, k, v, *, encoding, params, q_pos, k_pos, q_seg, k_seg, causal, x, sink=None,
            window=0, attention_chunk=0, softcap=0.0, **options):
        del x  # the cross-head site reads the logits, not the hidden states
        if encoding.rotate is not None:
            q, k = encoding.rotate(params, q, k, q_pos, k_pos)
        if whole_rows(q_seg, k_seg):
            q_seg, k_seg = _one_segment(q), _one_segment(k)
        num_heads, scale = q.shape[2], encoding.logit_scale(q.shape[-1])

        def one_example(q, k, v, qp, kp, qs, ks):
            return attend(q, k, v, mask=masks.make(qs, ks, qp, kp, causal=causal,
                                                   window=window, chunk=attention_chunk),
                          bias=lambda a, b: _bias(encoding, params, a, b, num_heads),
                          mix=lambda a, b: encoding.mix_logits(params, a, b), scale=scale,
                          block_size=options["block_size"], softcap=softcap,
                          **({} if sink is None else {"sink": sink}))

        return jax.vmap(one_example)(q, k, v, q_pos, k_pos, q_seg, k_seg)

    return run


def _kernel_path(impl: str) -> Callable[..., jax.Array]:
    """dense or chunked: heads apart (softmax.py), or together for the cross-head site."""
    apart, together = _softmax_path(impl), _mixing_path(impl)

    def run(q, k, v, *, encoding, **kw):
        path = apart if encoding.mix_logits is None else together
        return path(q, k, v, encoding=encoding, **kw)

    return run


def _one_segment(x: jax.Array) -> jax.Array:
    """int32[B, L] segment ids of whole rows (all 1) for x [B, L, ...]."""
    return jnp.ones(x.shape[:2], jnp.int32)


def _fused_path(q, k, v, *, encoding, params, q_pos, k_pos, q_seg, k_seg, causal, x,
                window=0, **options):
    del options, x  # one fused kernel: no blocks, no dense length, no feature map, and no
    # content-dependent site, which needs the hidden states
    if encoding.rotate is not None:
        q, k = encoding.rotate(params, q, k, q_pos, k_pos)
    bias = None
    if encoding.bias is not None:
        num_heads = q.shape[2]
        if one_row(q_pos, q_seg, k_seg):  # one [1, H, Lq, Lk] bias serves every row
            bias = _bias(encoding, params, q_pos[0], k_pos[0], num_heads)[None]
        else:
            bias = jax.vmap(lambda a, b: _bias(encoding, params, a, b, num_heads))(q_pos, k_pos)
    return fused.fused(q, k, v, q_seg=q_seg, k_seg=k_seg, causal=causal, bias=bias,
                       scale=encoding.logit_scale(q.shape[-1]), window=window)


# The flash kernel's blocks on a GPU (Triton tiles); in interpret mode the config's block.
FLASH_GPU_BLOCK = 64


def _flash_bias_path(q, k, v, *, encoding, params, q_pos, k_pos, q_seg, k_seg, causal, x,
                     block_size, position_reach=0, window=0, **options):
    del options  # no dense length, no feature map
    if encoding.rotate is not None:
        q, k = encoding.rotate(params, q, k, q_pos, k_pos)
    num_heads = q.shape[2]
    u = w = None
    if encoding.content_score is not None:  # carried only as rows and columns (Kernel.forms)
        u, w = encoding.bias_rows_columns(params, _hidden_states(encoding, x))
    if encoding.bias is None:  # plain flash attention: a one-entry zero table
        table = jnp.zeros((num_heads, 1), jnp.float32)
        q_pos = k_pos = None  # read by the rotation only (they may carry several axes)
    else:
        # Exact for distances up to the radius: T5's own, else the span of the positions the
        # caller may pass (randomized and PoSE positions reach past the row).
        radius = encoding.table_radius or max(q.shape[1], k.shape[1], position_reach) - 1
        if not encoding.table_radius:
            _check_reach(q_pos, k_pos, radius)
        table = encoding.bias_table(params, num_heads, radius)
    block = FLASH_GPU_BLOCK if jax.default_backend() == "gpu" else block_size
    return flash_bias.flash_bias(q, k, v, table, u, w, q_pos=q_pos, k_pos=k_pos,
                                 q_seg=q_seg, k_seg=k_seg, causal=causal,
                                 scale=encoding.logit_scale(q.shape[-1]), block_q=block,
                                 block_k=block, window=window or None,
                                 table_grad=encoding.bias is not None
                                 and bool(jax.tree.leaves(params)))


def _check_reach(q_pos, k_pos, radius: int) -> None:
    """A ValueError where concrete positions lie further apart than flash_bias's table
    reaches (the bias of a farther distance would be the radius's, silently); traced ones
    (under jit) are the caller's to bound with position_reach, as the model does."""
    if isinstance(q_pos, jax.core.Tracer) or isinstance(k_pos, jax.core.Tracer):
        return
    # numpy: under jit, jnp on concrete positions captured from outside is staged, a tracer
    q_pos, k_pos = np.asarray(q_pos), np.asarray(k_pos)
    # a row's queries meet only that row's keys ([1, L] stands for every row)
    spread = int(np.max(np.maximum(k_pos.max(-1) - q_pos.min(-1),
                                   q_pos.max(-1) - k_pos.min(-1))))
    if spread > radius:
        raise ValueError(
            f"multi_head_attention: flash_bias tabulates the bias up to distance {radius} "
            f"(position_reach, else the longer sequence's length, less 1) and these positions "
            f"lie {spread} apart: pass position_reach={spread + 1}")


def auto_impl(encoding: Encoding, length: int, dense_max_len: int, platform: str, dtype, *,
              sink: bool = False, softcap: bool = False) -> str:
    """The kernel `auto` runs for this encoding at this (static) length, platform and dtype
    (sink, softcap: a learned sink logit or logit soft-capping is present, which neither
    cuDNN nor flash_bias carries: dense or chunked then).

    fused where cuDNN's kernel serves it (GPU, bfloat16/float16, an encoding it carries): at
    every length without a bias (flash attention is O(L) in memory), up to dense_max_len with
    one (the bias is materialised as [1 or B, H, L, L]). Above dense_max_len on a GPU, an
    encoding that declares one of flash_bias's forms (bias_table: ALiBi, T5, KERPLE;
    bias_rows_columns: FoX) gets flash_bias, whose bias never exists as [L, L], where chunked
    ran before. Elsewhere dense up to dense_max_len and chunked above: XLA's fused path
    computes what dense computes, and measured no faster on CPU (experiments/bench).
    The switch is for memory, not speed: on an H200 cuDNN with the [1, H, L, L] bias ran ALiBi
    1.46x and T5 2.1x flash_bias's tokens/s at 4096 tokens and 1.56x and 1.77x at 8192, holding
    up to 3.6x its memory (experiments/bench/nvidia-h200/call10_end); a larger dense_max_len
    keeps cuDNN where the bias fits.
    """
    plain = not (sink or softcap)
    cudnn = (plain and IMPLS["fused"].carries(encoding)
             and fused.implementation(dtype, platform) == "cudnn")
    if cudnn and (encoding.bias is None or length <= dense_max_len):
        return "fused"
    if length <= dense_max_len:
        return "dense"
    flash = IMPLS["flash_bias"]
    if (platform == "gpu" and plain and flash.carries(encoding)
            and any(getattr(encoding, f.method) is not None for f in flash.forms)):
        return "flash_bias"
    return "chunked"


def _auto_path(q, k, v, *, dense_max_len, encoding, **kw):
    length = max(q.shape[1], k.shape[1])
    impl = auto_impl(encoding, length, dense_max_len, jax.default_backend(), q.dtype,
                     sink=kw.get("sink") is not None, softcap=bool(kw.get("softcap")))
    return IMPLS[impl].run(q, k, v, encoding=encoding, dense_max_len=dense_max_len, **kw)


def _linear_path(q, k, v, *, linear_feature, dense_max_len, x, q_seg, k_seg,
                 position_reach=0, attention_chunk=0, **kw):
    # no [L, L] matrix, content site or distance table; the chunks are in the segment ids
    del dense_max_len, x, position_reach, attention_chunk
    if whole_rows(q_seg, k_seg):
        q_seg, k_seg = _one_segment(q), _one_segment(k)
    return linear.linear_attention(q, k, v, feature=linear_feature, q_seg=q_seg,
                                   k_seg=k_seg, **kw)


class Form(NamedTuple):
    """A form in which a kernel reads an encoder site: the site, the Encoding method that
    declares it in that form (None on an encoding that does not), and what the form is."""

    site: str
    method: str
    what: str


TABLE = Form("bias", "bias_table", "a table over k_pos - q_pos")
ROWS_COLUMNS = Form("content_score", "bias_rows_columns", "row and column terms u_i + w_j")


class Kernel(NamedTuple):
    """An attention kernel: `run(q, k, v, *, encoding, params, q_pos, k_pos, q_seg, k_seg,
    causal, x, dense_max_len, block_size, linear_feature) -> [B, Lq, H, Dv]` for q [B, Lq, H,
    Dh], k [B, Lk, H, Dh], v [B, Lk, H, Dv], positions and segment ids int32[B, L] (segment
    ids None: whole rows, `whole_rows`); a kernel that carries a sink logit (`carries_sink`)
    also takes `sink=` float32[H], passed only when there is one, and one that carries a
    sliding window (`carries_window`) takes `window=` W > 0, passed only when there is one,
    and one that carries logit soft-capping (`carries_softcap`) `softcap=` c > 0 likewise;
    `position_reach` (static, every position below it: a model's Dims.max_len) is passed
    when it is set: a kernel takes what it does not read as **options."""

    run: Callable[..., jax.Array]
    # The encoder sites the kernel can carry, and why not the others (None: every site).
    sites: frozenset[str] | None = None
    why_not: str = ""
    # The sites it reads only in a declared form (the flash kernel's TABLE, ROWS_COLUMNS).
    forms: tuple[Form, ...] = ()
    where: str = "anywhere (XLA)"
    # True when `run` takes a learned sink logit per head (sink=float32[H]); else why not.
    carries_sink: bool = False
    why_no_sink: str = "this kernel does not declare a sink logit (register(carries_sink=True))"
    # True when `run` takes a sliding window (window=W > 0); else why not.
    carries_window: bool = False
    why_no_window: str = ("this kernel does not declare a sliding window "
                          "(register(carries_window=True))")
    # True when `run` takes logit soft-capping (softcap=c > 0); else why not.
    carries_softcap: bool = False
    why_no_softcap: str = ("this kernel does not declare logit soft-capping "
                           "(register(carries_softcap=True))")
    # True when it computes softmax attention (the kernels that do give the same scores,
    # up to rounding, so one may score a run trained with another).
    softmax: bool = True

    def lacking_forms(self, encoding: Encoding) -> list[Form]:
        """The forms this kernel needs for sites `encoding` uses and does not declare."""
        return [f for f in self.forms if getattr(encoding, f.site) is not None
                and getattr(encoding, f.method) is None]

    def carries(self, encoding: Encoding) -> bool:
        if self.lacking_forms(encoding):
            return False
        if self.sites is None:
            return True
        return set(encoding.sites()) <= self.sites and not encoding.replaces_content

    def refused_sites(self, encoding: Encoding) -> str:
        """The sites of `encoding` this kernel cannot carry, for the error message: "bias
        site", "rel_score/rel_value site", or "bias site, not as a table over k_pos - q_pos"
        for a form it lacks."""
        sites = [s for s in encoding.sites() if self.sites is not None and s not in self.sites]
        refused = [f"{'/'.join(sites)} site"] if sites else []
        refused += [f"{f.site} site, not as {f.what}" for f in self.lacking_forms(encoding)]
        return "; ".join(refused) or "score"


IMPLS = Registry("attention implementation")


def register(name: str, run: Callable[..., jax.Array], sites: frozenset[str] | None = None,
             why_not: str = "", *, forms: tuple[Form, ...] = (),
             where: str = "anywhere (XLA)", carries_sink: bool = False,
             why_no_sink: str = "", carries_window: bool = False,
             why_no_window: str = "", carries_softcap: bool = False,
             why_no_softcap: str = "", softmax: bool = True) -> Kernel:
    """Make `run` (the `Kernel.run` contract) the kernel of `model.attention = name`; `sites`
    (default: every site) are the encoder sites it carries, `why_not` says why not the
    others in the error an encoding it cannot carry gets; `forms`: the sites it reads only
    in a declared form (an encoding that uses one without declaring it is refused);
    `where`: the platforms it runs on, for `posjax list attention`; `carries_sink`: run
    takes a learned sink logit per head (`sink=`), `why_no_sink` says why not in the error
    a sink gets; `carries_window`, `why_no_window`: the same for a sliding window
    (`window=`), `carries_softcap`, `why_no_softcap` for logit soft-capping (`softcap=`);
    `softmax`: False for a kernel that computes another attention than softmax
    (linear)."""
    kernel = Kernel(run, sites, why_not, forms, where, carries_sink,
                    carries_window=carries_window, carries_softcap=carries_softcap,
                    softmax=softmax)
    reasons = {"why_no_sink": why_no_sink, "why_no_window": why_no_window,
               "why_no_softcap": why_no_softcap}
    return IMPLS.add(name, kernel._replace(**{k: v for k, v in reasons.items() if v}))


# The sites that never touch the score matrix (the same set as encoders.base.SCORE_FREE_SITES:
# this package does not import the encoders to run).
_QK = frozenset({"embed", "rotate", "rotate_value"})
register("dense", _kernel_path("dense"), carries_sink=True, carries_window=True,
         carries_softcap=True)
register("chunked", _kernel_path("chunked"), carries_sink=True, carries_window=True,
         carries_softcap=True)
register("fused", _fused_path, _QK | {"bias"},
         "jax.nn.dot_product_attention adds a bias to the scores but never exposes q and k"
         " (a content-position or content-dependent term) nor the logits of every head at"
         " once (a mix across heads)",
         where="cuDNN's flash kernel on NVIDIA GPUs in bfloat16 (model.dtype auto or "
               "bfloat16), XLA elsewhere",
         why_no_sink="cuDNN's jax.nn.dot_product_attention has no sink term in its softmax's"
         " denominator", carries_window=True,
         why_no_softcap="cuDNN's jax.nn.dot_product_attention takes no logit soft-capping")
register("flash_bias", _flash_bias_path, _QK | {"bias", "content_score"},
         "the Pallas kernel reads a bias only as a table over k_pos - q_pos (bias_table:"
         " ALiBi, T5, KERPLE) and a content term only as row and column terms u_i + w_j"
         " (bias_rows_columns: FoX), never a per-pair function of both positions or of the"
         " content", forms=(TABLE, ROWS_COLUMNS),
         where="Pallas on NVIDIA GPUs (Triton); interpret mode elsewhere (slow)",
         why_no_sink="the Pallas flash_bias kernel's online softmax has no sink term",
         carries_window=True,
         why_no_softcap="the Pallas flash_bias kernel does not cap its logits")
register("auto", _auto_path,
         where="anywhere: fused, flash_bias, dense or chunked by platform and length",
         carries_sink=True, carries_window=True, carries_softcap=True)
register("linear", _linear_path, _QK, "linear attention never forms the score matrix",
         why_no_sink="linear attention has no softmax, so no denominator for a sink logit",
         why_no_window="linear attention's prefix sums carry every earlier key, so no key can"
         " fall out of a window",
         why_no_softcap="linear attention never forms the logits a cap would squash",
         softmax=False)


def _label(encoding: Encoding) -> str:
    return repr(encoding.name or type(encoding).__name__)


def _settings_refused(encoding: Encoding, path: Kernel) -> list[str]:
    """["key=value", ...]: the settings of `encoding` that keep `path` from carrying it where
    its registered defaults fit (RoPE with ReRoPE's rerope_window: a per-pair score), each
    found by setting it back alone; [] where the defaults do not fit either."""
    from posjax import encoders  # the registry, as in encodings_carried_by

    default = encoders.get(encoding.name) if encoding.name in encoders.names() else None
    if default is None or not path.carries(default):
        return []
    refused = []
    for field in dataclasses.fields(encoding):
        value = getattr(encoding, field.name)
        if field.init and value != getattr(default, field.name):
            try:
                undone = dataclasses.replace(encoding, **{field.name: getattr(default,
                                                                              field.name)})
            except ConfigError:  # another setting needs this one
                continue
            if path.carries(undone):
                refused.append(f"{field.name}={value}")
    return refused


def interpreted_here(impl: str) -> bool:
    """Whether `impl` runs as the Pallas interpreter on this machine's devices (flash_bias
    off an NVIDIA GPU): its numbers are exact, its speed is not the kernel's."""
    return impl == "flash_bias" and jax.devices()[0].platform != "gpu"


INTERPRETED = "the Pallas kernel in interpret mode (exact; its speed is a GPU's, with Triton)"


def encodings_carried_by(impl: str) -> list[str]:
    """The registered encodings the kernel `impl` can carry (posjax list attention)."""
    # Imported here: the registry imports every encoder module, which attention should not
    # need just to run.
    from posjax import encoders

    return [n for n in encoders.names() if IMPLS[impl].carries(encoders.get(n))]


def check_compatible(encoding: Encoding, impl: str, causal: bool, *, sink: bool = False,
                     window: int = 0, softcap: float = 0.0) -> None:
    """Raise a one-line ConfigError when `encoding` cannot run with attention `impl`.

    Unknown impl -> the valid names; a site the impl cannot carry (bias or content-position
    with linear, content-position with fused) -> the encodings that fit and the impls that
    take this one; a causal-only encoding (xPos, FIRE) in bidirectional attention -> use a
    causal model; sink (a learned sink logit, model.sink_logit) with a kernel that cannot
    carry it (fused, flash_bias, linear) -> the kernel by name, why, and those that can; a
    sink with an encoding whose weights are not a softmax (stick-breaking) -> why not; a
    sliding window (window > 0, model.window) with a kernel that cannot carry it (linear),
    with an encoding that cannot (Encoding.why_no_window) or in bidirectional attention -> by
    name, and what fits; logit soft-capping (softcap, model.attn_softcap) below 0, with a
    kernel that cannot carry it or with an encoding whose weights are not a softmax -> the
    same.
    """
    path = IMPLS.lookup(impl)
    name = _label(encoding)
    if window and not path.carries_window:
        fit = " or ".join(n for n, p in IMPLS.items() if p.carries_window)
        raise ConfigError(
            f"a sliding window of {window} (model.window, or a layer_pattern entry's) cannot run "
            f"with attention={impl!r}: {path.why_no_window}; use attention={fit}, or window 0 "
            "for this layer"
        )
    if window and encoding.why_no_window:
        raise ConfigError(
            f"encoding {name} cannot run in a layer with a sliding window of {window} "
            f"(model.window, or a layer_pattern entry's): {encoding.why_no_window}; give its "
            f"layers window 0 (a layer_pattern entry such as {encoding.name}(window=0)), or "
            "pick another encoding"
        )
    if window and not causal:
        raise ConfigError(
            f"a sliding window of {window} (model.window, or a layer_pattern entry's) keeps a "
            f"query's {window} latest keys, a causal rule, and this attention is "
            "bidirectional; use a causal model kind (causal_lm) or window 0"
        )
    if sink and not path.carries_sink:
        fit = " or ".join(n for n, p in IMPLS.items() if p.carries_sink)
        raise ConfigError(
            f"a learned sink logit (model.sink_logit) cannot run with attention={impl!r}: "
            f"{path.why_no_sink}; use attention={fit}"
        )
    if sink and not encoding.normalizes:
        raise ConfigError(
            f"encoding {name} weighs keys without a softmax, so a learned sink logit "
            "(model.sink_logit) has no denominator to join: turn model.sink_logit off or "
            "pick a softmax encoding"
        )
    _check_softcap(softcap, path, impl, name, encoding.normalizes)
    if not path.carries(encoding):
        used = path.refused_sites(encoding)
        fit = ", ".join(encodings_carried_by(impl))
        other = " or ".join(n for n, p in IMPLS.items() if p.carries(encoding))
        settings = ", ".join(_settings_refused(encoding, path))
        raise ConfigError(
            f"encoding {name}{f' with {settings}' if settings else ''} cannot run with "
            f"attention={impl!r} (its {used}): {path.why_not}, so only these encodings fit"
            f"{' at their defaults' if settings else ''}: {fit}; use attention={other} for "
            f"{name}{f', or drop {settings}' if settings else ''}"
        )
    if encoding.causal_only and not causal:
        raise ConfigError(
            f"encoding {name} is defined only for causal attention and this attention is"
            " bidirectional; use it in a causal model or pick another encoding"
        )


def _check_softcap(softcap: float, path: Kernel, impl: str, name: str, normalizes: bool):
    """check_compatible's one-line errors for logit soft-capping."""
    if softcap < 0:
        raise ConfigError(f"attn_softcap={softcap}: a logit cap is c > 0 (logits become "
                          "c tanh(s / c); Gemma 2: 50), or 0 for none")
    if softcap and not path.carries_softcap:
        fit = " or ".join(n for n, p in IMPLS.items() if p.carries_softcap)
        raise ConfigError(
            f"logit soft-capping (model.attn_softcap={softcap}) cannot run with "
            f"attention={impl!r}: {path.why_no_softcap}; use attention={fit}")
    if softcap and not normalizes:
        raise ConfigError(
            f"encoding {name} weighs keys without a softmax (its logits are log-weights), so "
            f"capping them (model.attn_softcap={softcap}) would change what the weights mean: "
            "set model.attn_softcap=0 or pick a softmax encoding")


def _check_inputs(q, k, v, q_pos, k_pos, q_seg, k_seg, *, window: int, block_size: int,
                  attention_chunk: int = 0) -> None:
    """A ValueError naming the argument where multi_head_attention's inputs break its
    docstring's shapes, dtypes or static settings (otherwise a broadcast or vmap error deep
    inside JAX, or a silently truncated integer result)."""
    def bad(message: str):
        raise ValueError(f"multi_head_attention: {message}")

    shapes = {"q": jnp.shape(q), "k": jnp.shape(k), "v": jnp.shape(v)}
    if any(len(shape) != 4 for shape in shapes.values()):
        bad(f"q, k and v are [B, L, H, Dh]; got shapes {shapes['q']}, {shapes['k']}, "
            f"{shapes['v']}: add the missing batch or head axis (x[None] or x[:, :, None])")
    dtypes = {name: jnp.result_type(a) for name, a in (("q", q), ("k", k), ("v", v))}
    if not all(jnp.issubdtype(dtype, jnp.floating) for dtype in dtypes.values()):
        bad(f"q, k and v must be floating point; got {', '.join(map(str, dtypes.values()))}: "
            "cast them, e.g. q.astype(jnp.float32)")
    (b, lq, h, dh), (bk, lk, hk, dk), (bv, lv, hv, _) = shapes.values()
    if not b == bk == bv or lk != lv:
        bad(f"q {shapes['q']}, k {shapes['k']} and v {shapes['v']} differ in batch, or k and v "
            "in length: give every example's keys and values")
    if not h == hk == hv:
        bad(f"q has {h} heads, k {hk} and v {hv}: for grouped-query attention repeat k's and "
            f"v's heads to q's first (jnp.repeat(k, {h} // {hk}, axis=2), as "
            "posjax.models.layers.Attention does)")
    if dh != dk:
        bad(f"q's head_dim {dh} differs from k's {dk}: scores are q.k per head")
    if not lq or not lk:
        bad(f"an empty sequence (q {lq} tokens, k {lk}): attention needs at least one of each")
    for name, pos, length in (("q_pos", q_pos, lq), ("k_pos", k_pos, lk)):
        if jnp.ndim(pos) not in (2, 3) or jnp.shape(pos)[1] != length:
            bad(f"{name} has shape {jnp.shape(pos)} for {length} tokens: positions are "
                f"int32[B, {length}] (or [1, {length}] for every row, [B, {length}, A] for A "
                "position axes)")
    for name, seg, length in (("q_seg", q_seg, lq), ("k_seg", k_seg, lk)):
        if seg is not None and jnp.shape(seg) != (b, length):
            bad(f"{name} has shape {jnp.shape(seg)}: segment ids are int32[{b}, {length}] "
                "(or None for whole rows)")
    if window < 0:
        bad(f"window={window}: a sliding window is W > 0 keys, or 0 for none")
    if attention_chunk < 0:
        bad(f"attention_chunk={attention_chunk}: a chunk is C > 0 tokens, or 0 for none")
    if block_size <= 0:
        bad(f"block_size={block_size}: the chunked and flash kernels' block is a positive "
            "number of tokens")


def _check_encoding_inputs(encoding: Encoding, q, k, sink) -> None:
    """A content-dependent site with cross-attention lengths (ValueError), a sink of the
    wrong shape (ConfigError): each in one line."""
    if encoding.content_score is not None and q.shape[1] != k.shape[1]:
        raise ValueError(
            f"multi_head_attention: encoding {_label(encoding)}'s content-dependent site reads "
            f"one sequence's hidden states x and segment ids, so it needs as many queries as "
            f"keys (self-attention); got {q.shape[1]} queries and {k.shape[1]} keys")
    if sink is not None and jnp.shape(sink) != (q.shape[2],):
        raise ConfigError(
            f"sink has shape {jnp.shape(sink)}; a learned sink logit is one per head: "
            f"float32[{q.shape[2]}]"
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
    x=None,
    impl: str = "dense",
    dense_max_len: int = 1024,
    block_size: int = 256,
    linear_feature: str = "elu",
    sink=None,
    window: int = 0,
    attention_chunk: int = 0,
    position_reach: int = 0,
    softcap: float = 0.0,
):
    """Attention of every head of every example, with `encoding` at its sites.

    q: [B, Lq, H, Dh], k: [B, Lk, H, Dh], v: [B, Lk, H, Dv]; q_pos: int32[B, Lq] (or
    [B, Lq, A] when encoding.position_axes = A), k_pos likewise; q_seg: int32[B, Lq],
    k_seg: int32[B, Lk] segment ids (0 = padding, never attended; a padding query gets 0);
    segment ids None: every row is one whole segment at the same positions (`whole_rows`);
    q_pos, k_pos int32[1, L]: one row of positions for every example, the position terms
    built once (`one_row`; the caller vouches that the encoding's attention is the same as at
    each row's own positions: `Encoding.distance_only` with gapless segments);
    causal masks by token index; x: [B, L, D], the layer's input, read by a content-dependent
    site (FoX's forget gates; None when the encoding has none). impl, causal, dense_max_len,
    block_size and linear_feature are static (Python values under jit). sink: None, or a
    learned sink logit per head, float32[H], in each head's softmax denominator (module
    docstring; the kernels that cannot carry it refuse it by name). window: static, W > 0 a
    causal sliding window (a query sees its W latest keys by token index, itself included;
    0 = none; module docstring). attention_chunk: static, C > 0 keeps a key only in its
    query's chunk of C token indices (0 = none; module docstring). position_reach: static,
    every position is below it (0: below the longer sequence's length, token indices);
    flash_bias sizes its distance table by it (positions given concretely are checked
    against it; under jit they are the caller's to bound, or farther distances read the
    last entry). softcap: static, c > 0 caps every logit to c tanh(s / c) (module
    docstring; 0 = none). -> [B, Lq, H, Dv] in v.dtype. See the module docstring for the
    impls.
    """
    check_compatible(encoding, impl, causal, sink=sink is not None, window=window,
                     softcap=softcap)
    _check_inputs(q, k, v, q_pos, k_pos, q_seg, k_seg, window=window, block_size=block_size,
                  attention_chunk=attention_chunk)
    if attention_chunk:  # the segments rule then keeps each query's chunk
        q_seg, k_seg = masks.chunk_segments(q_seg, k_seg, *q.shape[:2], k.shape[1],
                                            attention_chunk)
    _check_encoding_inputs(encoding, q, k, sink)
    if q_pos.shape[0] != q.shape[0] and not (
            impl in _TAKES_ONE_ROW and set(encoding.sites()) <= {"bias"}):
        q_pos, k_pos = _every_row(q_pos, q.shape[0]), _every_row(k_pos, k.shape[0])
    if encoding.rotate_value is not None:
        v = encoding.rotate_value(params, v, k_pos)
    out = IMPLS[impl].run(
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
        x=x,
        dense_max_len=dense_max_len,
        block_size=block_size,
        linear_feature=linear_feature,
        **({} if sink is None else {"sink": sink}),
        **({"window": window} if window else {}),
        **({"attention_chunk": attention_chunk} if attention_chunk else {}),
        **({"position_reach": position_reach} if position_reach else {}),
        **({"softcap": softcap} if softcap else {}),
    )
    if encoding.rotate_value is not None:
        out = encoding.unrotate_output(params, out, q_pos, k_pos)
    return out
