"""The encoder contract shared by every position encoding.

An encoding is a frozen (hashable) dataclass of its hyperparameters with pure methods for the
*sites* where position enters attention. A site the encoding does not use is `None`:

  embed(params, x, positions) -> x                         input site
      x: [B, L, D], positions: int32[B, L]   (x + p(pos) or x * p(pos))
  rotate(params, q, k, q_pos, k_pos) -> (q, k)             query/key site
      q: [B, Lq, H, Dh], k: [B, Lk, H, Dh], q_pos: int32[B, Lq], k_pos: int32[B, Lk]
  bias(params, q_pos, k_pos, num_heads) -> float32[H, Lq, Lk]   logits site (one example)
      q_pos: int32[Lq], k_pos: int32[Lk]; num_heads = H, a Python int (ALiBi's slopes
      depend on it, and nothing else tells a parameter-free encoding)
  rel_score(params, q, k, q_pos, k_pos, head) -> float32[Lq, Lk]   content-position site
      one example and one head: q: [Lq, Dh], k: [Lk, Dh]; `head` is a (possibly traced)
      int32 scalar selecting this head's parameters. Returned terms are already scaled and
      are added to `logit_scale * q.k`, or replace it when `replaces_content` is True.
  rel_value(params, probs, q_pos, k_pos, head) -> [Lq, Dh]        content-position site
      probs: float32[Lq, Lk] attention weights; the result is added to `probs @ v`.
  content_prepare(params, x, q, k, segment_ids) -> (q_side, k_side)   content-dependent site
      x: [B, L, D] the layer's input, q, k: [B, L, H, Dh] after the query/key site,
      segment_ids: int32[B, L]; leaves of q_side / k_side are [B, L, H, ...] (or None):
      gates, cumulative sums, projections
  content_score(params, logits, ok, q_side, k_side, carry) -> (float32[lq, lk], carry)
      one head and one block of queries and keys: logits float32[lq, lk] the scores so far
      (scale * q.k plus the other sites' terms), ok bool[lq, lk] the pairs attention
      allows, q_side / k_side this block's slices, carry what the key blocks after this one
      passed on (blocks are visited last to first). Returns the term added to the logits
      and the carry for the block before.
  content_carry(q_side) -> carry                     the carry before the last key block
      (default: float32[lq] zeros; q_side: one head's block, leaves leading with lq)
      Positions that depend on the content (FoX's forget gates, CoPE's gated counts) live
      here; the dense and chunked kernels carry it, fused and linear attention cannot.
      Where the term is u_i + w_j, a row term plus a column term, the encoding may also
      declare it as `bias_rows_columns` (below), and the flash_bias kernel carries it too.
  rotate_value(params, v, k_pos) -> v                 value site
      v: [B, Lk, H, Dv], k_pos: int32[B, Lk]; transforms the values by the keys' positions
      before attention, and its inverse by the queries' positions runs on the output:
  unrotate_output(params, out, q_pos, k_pos) -> out
      out: [B, Lq, H, Dv], q_pos: int32[B, Lq]; k_pos: int32[B, Lk] as rotate_value got it
      (a length-dependent map reads its length from the keys on both sides). Between the
      two the kernel only sums weighted values, so every kernel carries this site (VO-RoPE:
      sum_j a_ij R_{j-i} v_j).
  mix_logits(params, logits, bias) -> float32[H, lq, lk]      cross-head site
      logits: float32[H, lq, lk] every head's scale * q.k of a block of pairs, bias: the
      same block of the bias site's B; the result is added to logits + bias (DAPE's
      f(A, B), an MLP across the heads of each pair). The dense and chunked kernels carry
      it with all heads together (posjax.attention.mixing); fused and linear cannot.

A site may split its work so a chunked kernel does the query- and key-side part once for the
whole sequence instead of once per pair of blocks (optional; the plain method stays the
reference and is the two composed):
  rel_prepare(params, q, k, q_pos, k_pos, head) -> (q_side, k_side)
  prepared_score(params, q_side, k_side, q_pos, k_pos, head) -> float32[Lq, Lk]  = rel_score
  bias_prepare(params, q_pos, k_pos, num_heads) -> (q_side, k_side)
  prepared_bias(params, q_side, k_side, q_pos, k_pos, num_heads) -> float32[H, Lq, Lk] = bias
      q_side / k_side: pytrees whose leaves lead with Lq / Lk (the kernel slices blocks of
      them beside the positions); prepared_* read only their block.

Positions are int32[B, L] unless the encoding declares `position_axes` = A, for positions
int32[B, L, A] (2-D RoPE: A = 2, one coordinate per image axis).
Relative position is always `key_pos - query_pos` (the T5 / Hugging Face convention).
Angles and biases are computed in float32 whatever the activation dtype.
Parameters are explicit: `init(rng, dims)` returns a pytree (a dict, empty when the encoding
has none), and an encoding never draws hidden randomness.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from posjax.errors import ConfigError

Params = dict[str, Any]

SITES = ("embed", "rotate", "bias", "rel_score", "rel_value", "content_score", "rotate_value",
         "mix_logits")
# The sites inside attention: an encoding with any of them has parameters in every layer.
ATTENTION_SITES = ("rotate", "bias", "rel_score", "rel_value", "content_score", "rotate_value",
                   "mix_logits")


def grid_position_form(encoding) -> str:
    """How an encoding's attention sites read a grid's (row, col) patches: "axial" (it reads
    those 2 components: rope2d, rope_mixed), "image" (it reads (t, h, w): M-RoPE, given an
    image's (0, row, col) as Qwen2-VL places one), else "raster" (a 1-D encoding: the index
    row * grid_width + col)."""
    if encoding.position_axes is not None:
        return "axial"
    return "image" if encoding.reads_positions(3) else "raster"


# The sites that never touch the score matrix: any kernel (fused, linear) carries them.
SCORE_FREE_SITES = frozenset({"embed", "rotate", "rotate_value"})
# Sites that read hidden states, q and k but no positions (stick-breaking's, FoX's, ...).
POSITION_FREE_SITES = {"content_prepare", "content_score", "mix_logits"}


def inverse_frequencies(dim: int, base, *, xp=jnp):
    """`base^(-2i/dim)` for i = 0 .. ceil(dim/2) - 1: the sinusoid and rotary frequencies.

    -> float32[ceil(dim / 2)] with xp = jax.numpy (`base` may be a traced scalar: dynamic
    NTK's base), float64 with xp = numpy (analysis). Vaswani et al. 2017 sec. 3.5; RoFormer
    (Su et al. 2021) eq. 15.
    """
    dtype = xp.float32 if xp is jnp else xp.float64
    # 2i / dim, then the power: the float ops of the copies this replaced (the sinusoid's,
    # RoPE's, the analysis's), so trained results reproduce bit for bit.
    exponents = xp.arange(0, dim, 2, dtype=dtype) / dim
    return xp.power(xp.asarray(base, dtype), -exponents)


@dataclasses.dataclass(frozen=True)
class Dims:
    """The sizes an encoding needs to create and check its parameters.

    max_len is the training length: the size of a learned table and the L_train of
    length-extension methods.
    """

    d_model: int
    num_heads: int
    head_dim: int
    max_len: int = 512

    def __post_init__(self):
        small = [f"{field.name}={getattr(self, field.name)}" for field in dataclasses.fields(self)
                 if getattr(self, field.name) < 1]
        if small:
            raise ConfigError(f"Dims {', '.join(small)}: every size of a model is >= 1 "
                              "(max_len is the training length in tokens)")


@dataclasses.dataclass(frozen=True)
class Encoding:
    """Base class: no sites, no parameters (NoPE behaves exactly like this)."""

    name: ClassVar[str] = ""
    # True when rel_score (or content_score) is the whole attention score (ReRoPE's two-pass
    # score, PaTH's transported q.k).
    replaces_content: ClassVar[bool] = False
    # True when the encoding only makes sense for causal attention (xPos, FIRE's max(L, i)).
    causal_only: ClassVar[bool] = False
    # Why a layer with a sliding window (model.window) cannot carry the encoding, "" where it
    # can (SSMax: its n counts every key of the query's segment, which the window hides).
    why_no_window: ClassVar[str] = ""
    # False when content_score gives log-weights that attention uses as they are, without a
    # softmax (stick-breaking); remainder_to_self: the weight they leave, 1 - sum_j w_ij, goes
    # to the query's own value.
    normalizes: ClassVar[bool] = True
    remainder_to_self: ClassVar[bool] = False
    # True when attention reads positions only through k_pos - q_pos at the bias site (NoPE,
    # ALiBi, T5, KERPLE): where every segment's positions count up by one, one row of positions
    # serves every example (the masked pairs are the only ones whose gaps differ), so the
    # bias is built once per batch (posjax.attention.one_row).
    distance_only: ClassVar[bool] = False

    embed = None
    rotate = None
    bias = None
    # The bias as a table over distances, for the flash kernel (posjax.attention.flash_bias):
    # bias_table(params, num_heads, radius) -> float32[H, 2 radius + 1], entry radius + r the
    # bias at k_pos - q_pos = r, where the bias reads positions only through that distance.
    # table_radius: the distance past which the bias no longer changes (T5's max_distance),
    # or None when it always does (ALiBi, KERPLE: the kernel then covers the sequence).
    bias_table = None
    table_radius = None
    # The content-dependent site as row and column terms, for the same kernel:
    # bias_rows_columns(params, x) -> (u float32[B, H, L] or None, w float32[B, H, L] or None)
    # from the layer's input x [B, L, D] (queries and keys are its L tokens), where the
    # content site adds u_i + w_j to the logits and nothing else (FoX: u = c_i, w = -c_j).
    bias_rows_columns = None
    rel_score = None
    rel_value = None
    rel_prepare = None
    prepared_score = None
    bias_prepare = None
    prepared_bias = None
    content_prepare = None
    content_score = None
    rotate_value = None
    unrotate_output = None
    mix_logits = None

    def content_carry(self, q_side) -> jax.Array:
        """The content site's carry before the last key block: float32[lq] zeros, lq the
        leading size of q_side's leaves (one head's block of queries)."""
        return jnp.zeros(jax.tree.leaves(q_side)[0].shape[:1], jnp.float32)

    def for_model(self, causal: bool) -> Encoding:
        """This encoding as a model of the given causality uses it: a `bidirectional` left
        None (T5, TUPE, ALiBi) follows the model, causal buckets and slopes in a causal model
        and bidirectional ones in an encoder. An explicit value is kept."""
        if getattr(self, "bidirectional", False) is None:
            return dataclasses.replace(self, bidirectional=not causal)
        return self

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        """Parameters for a model of these sizes (an empty dict when there are none)."""
        del rng
        self.check(dims)
        return {}

    def check(self, dims: Dims) -> None:
        """Raise ConfigError (one line: the problem and the fix) if dims cannot carry this."""
        if dims.num_heads < 1:
            raise ConfigError(f"num_heads={dims.num_heads} < 1: a model needs at least one head")

    def logit_scale(self, head_dim: int) -> float:
        """The factor on q.k; DeBERTa and TUPE change it to keep the summed terms' variance."""
        return 1.0 / math.sqrt(head_dim)

    def max_positions(self, dims: Dims) -> int | None:
        """Largest position count this encoding defines, or None if unbounded."""
        del dims
        return None

    @property
    def position_axes(self) -> int | None:
        """None when the sites read positions int32[B, L]; A for int32[B, L, A]."""
        return None

    def reads_positions(self, axes: int | None) -> bool:
        """Whether the attention sites read positions int32[B, L] (axes None) or
        int32[B, L, axes]: `position_axes` only, unless an encoding reads several forms."""
        return axes == self.position_axes

    def sites(self) -> tuple[str, ...]:
        """The names of the sites this encoding uses."""
        return tuple(s for s in SITES if getattr(self, s) is not None)

    @property
    def position_free(self) -> bool:
        """True when no site reads positions (NoPE; stick-breaking's, FoX's, CoPE's and PaTH's
        read hidden states, q and k only): PoSE or randomized positions would change
        nothing it computes."""
        return not set(self.sites()) - POSITION_FREE_SITES

    @property
    def scores_only_through_qk(self) -> bool:
        """True when every site is embed, rotate or rotate_value, so linear attention can
        carry it."""
        return set(self.sites()) <= SCORE_FREE_SITES and not self.replaces_content


def check_site_shapes(encoding: Encoding, params: Params, dims: Dims,
                      sites: tuple[str, ...] = ATTENTION_SITES) -> None:
    """Trace each of `encoding`'s `sites` once on a few positions (shapes only: jax.eval_shape
    computes nothing) and raise a one-line ConfigError naming the encoding, the site, the
    shape or dtype it returned and the one the contract expects: a term of the wrong shape
    would otherwise broadcast silently (an [Lq, Lk] bias shared by every head) or fail deep
    inside a kernel. Models call it once per encoding they are built with; `params` is what
    `encoding.init` returned."""
    probe = _SiteProbe(encoding, params, dims)
    for site, check in _SITE_CHECKS.items():
        if getattr(encoding, site) is not None and site in sites:
            for function in _CALLED_WITH[site]:
                probe.check_signature(function)
            check(probe)


def checked_logits(encoding: Encoding, site: str, out, num_heads: int, lq: int, lk: int):
    """`out`, the [H, Lq, Lk] term `site` (bias, prepared_bias) returned for a call at lengths
    `lq`, `lk`, refused in one line where its shape is another: the model's build checks a
    few positions (check_site_shapes), and a term right there can still be wrong at another
    length (a table of fixed size). Shapes are static, so the check runs once, when traced."""
    want = [num_heads, lq, lk]
    got = list(out.shape) if hasattr(out, "shape") else None
    if got != want:
        raise ConfigError(_refusal(
            encoding, site, f"shape {got}" if got is not None else f"a {type(out).__name__}",
            f"[H, Lq, Lk] at this call's lengths, H={num_heads} heads, Lq={lq}, Lk={lk}", want))
    return out


def _refusal(encoding: Encoding, site: str, got, expected: str, want=None) -> str:
    """The line naming the encoding, the site, what it returned and what was expected
    (`want`: its value here, where `expected` names it by its symbols)."""
    return (f"encoding {encoding.name or type(encoding).__name__!r}: {site} returned {got}, "
            f"expected {expected}{'' if want is None else f' = {want}'}; see the encoder "
            "contract in posjax/encoders/base.py")


@dataclasses.dataclass
class _SiteProbe:
    """Abstract inputs of the contract's shapes, and the checks of what a site returns."""

    encoding: Encoding
    params: Params
    dims: Dims

    def __post_init__(self):
        self.heads, self.dh, self.width = (self.dims.num_heads, self.dims.head_dim,
                                           self.dims.d_model)
        # sizes no head count or other axis can be mistaken for
        self.lq, self.lk = self.heads + 2, self.heads + 3
        self.axes = () if self.encoding.position_axes is None else (self.encoding.position_axes,)
        self.logits_names = f"[H, Lq, Lk] with H={self.heads} heads, Lq={self.lq}, Lk={self.lk}"

    @staticmethod
    def spec(*shape, dtype=jnp.float32):
        return jax.ShapeDtypeStruct(shape, dtype)

    def positions(self, *shape):
        return self.spec(*shape, *self.axes, dtype=jnp.int32)

    def traced(self, site: str, *args):
        """What `site` returns for abstract `args` after the parameters."""
        return jax.eval_shape(lambda p, *a: getattr(self.encoding, site)(p, *a),
                              self.params, *args)

    def check_signature(self, function: str) -> None:
        """The encoding's `function` must take the arguments the kernels pass it."""
        arguments = SITE_ARGUMENTS[function]
        try:
            inspect.signature(getattr(self.encoding, function)).bind(*arguments)
        except TypeError as e:
            raise ConfigError(
                f"encoding {self.encoding.name or type(self.encoding).__name__!r}: {function} "
                f"cannot be called as {function}({', '.join(arguments)}) ({e}); see the "
                "encoder contract in posjax/encoders/base.py") from None

    def refuse(self, site: str, got, expected: str, want=None) -> None:
        raise ConfigError(_refusal(self.encoding, site, got, expected, want))

    def check(self, site: str, out, like, names: str) -> None:
        """`out` must be one float array of `like`'s shape."""
        want = list(like.shape)
        if not hasattr(out, "shape"):
            self.refuse(site, f"a {type(out).__name__}", f"one array {names}", want)
        if list(out.shape) != want:
            self.refuse(site, f"shape {list(out.shape)}", names, want)
        if not jnp.issubdtype(out.dtype, jnp.floating):
            self.refuse(site, f"dtype {out.dtype}", "a float dtype such as float32")

    def check_pair(self, site: str, out, like) -> None:
        """`out` must be two arrays of `like`'s shape and dtype (q's and k's)."""
        if not isinstance(out, (tuple, list)):  # an array is traced as a ShapeDtypeStruct
            got = (f"one array of shape {list(out.shape)}" if hasattr(out, "shape")
                   else f"a {type(out).__name__}")
            self.refuse(site, got, "(q, k), two arrays of the shapes of q and k",
                        [list(like.shape)] * 2)
        got = [(list(getattr(x, "shape", ())), str(getattr(x, "dtype", type(x).__name__)))
               for x in jax.tree.leaves(out)]
        want = [(list(like.shape), str(like.dtype))] * 2
        if [g[0] for g in got] != [w[0] for w in want]:
            self.refuse(site, f"shapes {[g[0] for g in got]}",
                        "(q, k) of the shapes of q and k", [w[0] for w in want])
        if got != want:
            self.refuse(site, f"dtypes {[g[1] for g in got]}",
                        "(q, k) of the dtypes of q and k", [w[1] for w in want])


def _check_embed(p: _SiteProbe) -> None:
    x = p.spec(1, p.lq, p.width)
    p.check("embed", p.traced("embed", x, p.positions(1, p.lq)), x, "x's shape [B, L, D]")


def _check_bias(p: _SiteProbe) -> None:
    out = jax.eval_shape(lambda prm, a, b: p.encoding.bias(prm, a, b, p.heads), p.params,
                         p.positions(p.lq), p.positions(p.lk))
    p.check("bias", out, p.spec(p.heads, p.lq, p.lk), p.logits_names)
    if out.dtype != jnp.float32:
        p.refuse("bias", f"dtype {out.dtype}", "float32 (bfloat16 keeps 8 significant bits: "
                 "distances from 1024 to 2048 round to multiples of 8)")


def _check_rotate(p: _SiteProbe) -> None:
    q = p.spec(1, p.lq, p.heads, p.dh)
    p.check_pair("rotate", p.traced("rotate", q, q, p.positions(1, p.lq),
                                    p.positions(1, p.lq)), q)


def _check_rel_score(p: _SiteProbe) -> None:
    out = p.traced("rel_score", p.spec(p.lq, p.dh), p.spec(p.lk, p.dh), p.positions(p.lq),
                   p.positions(p.lk), p.spec(dtype=jnp.int32))
    p.check("rel_score", out, p.spec(p.lq, p.lk), f"[Lq, Lk] for one head with Lq={p.lq}, "
            f"Lk={p.lk}")


def _check_rel_value(p: _SiteProbe) -> None:
    out = p.traced("rel_value", p.spec(p.lq, p.lk), p.positions(p.lq), p.positions(p.lk),
                   p.spec(dtype=jnp.int32))
    p.check("rel_value", out, p.spec(p.lq, p.dh), f"[Lq, Dh] for one head with Lq={p.lq}, "
            f"Dh={p.dh}")


def _check_content(p: _SiteProbe) -> None:
    encoding, lq, lk = p.encoding, p.lq, p.lk

    def content(params, x, q, k, segments):
        # One example's one head, as the kernels slice content_prepare's [B, L, H, ...].
        q_side, k_side = jax.tree.map(lambda a: a[0, :, 0],
                                      encoding.content_prepare(params, x, q, k, segments))
        q_side = jax.tree.map(lambda a: a[:lq], q_side)
        return encoding.content_score(
            params, jnp.zeros((lq, lk), jnp.float32), jnp.ones((lq, lk), bool), q_side,
            k_side, encoding.content_carry(q_side))[0]

    qk = p.spec(1, lk, p.heads, p.dh)
    out = jax.eval_shape(content, p.params, p.spec(1, lk, p.width), qk, qk,
                         p.spec(1, lk, dtype=jnp.int32))
    p.check("content_score", out, p.spec(lq, lk),
            f"[lq, lk] for one head's block with lq={lq}, lk={lk}")


def _check_mix(p: _SiteProbe) -> None:
    logits = p.spec(p.heads, p.lq, p.lk)
    p.check("mix_logits", p.traced("mix_logits", logits, logits), logits, p.logits_names)


def _check_values(p: _SiteProbe) -> None:
    v, out = p.spec(1, p.lk, p.heads, p.dh), p.spec(1, p.lq, p.heads, p.dh)
    p.check("rotate_value", p.traced("rotate_value", v, p.positions(1, p.lk)), v,
            "v's shape [B, Lk, H, Dv]")
    p.check("unrotate_output", p.traced("unrotate_output", out, p.positions(1, p.lq),
                                        p.positions(1, p.lk)), out,
            "the output's shape [B, Lq, H, Dv]")


# The arguments the kernels call each function of a site with (the module docstring's
# signatures), and the functions each site's check calls.
SITE_ARGUMENTS = {
    "embed": ("params", "x", "positions"),
    "rotate": ("params", "q", "k", "q_pos", "k_pos"),
    "bias": ("params", "q_pos", "k_pos", "num_heads"),
    "rel_score": ("params", "q", "k", "q_pos", "k_pos", "head"),
    "rel_value": ("params", "probs", "q_pos", "k_pos", "head"),
    "content_prepare": ("params", "x", "q", "k", "segment_ids"),
    "content_score": ("params", "logits", "ok", "q_side", "k_side", "carry"),
    "content_carry": ("q_side",),
    "rotate_value": ("params", "v", "k_pos"),
    "unrotate_output": ("params", "out", "q_pos", "k_pos"),
    "mix_logits": ("params", "logits", "bias"),
}
_CALLED_WITH = {**{site: (site,) for site in SITES},
                "content_score": ("content_prepare", "content_score", "content_carry"),
                "rotate_value": ("rotate_value", "unrotate_output")}
# Each site's check, by the site it checks.
_SITE_CHECKS = {"embed": _check_embed, "bias": _check_bias, "rotate": _check_rotate,
                "rel_score": _check_rel_score, "rel_value": _check_rel_value,
                "content_score": _check_content, "mix_logits": _check_mix,
                "rotate_value": _check_values}
