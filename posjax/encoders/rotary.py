"""Rotary encodings: RoPE and its variants, all at the query/key site.

RoPE (Su et al. 2021, RoFormer) rotates each pair of a query/key vector by `position * theta_i`
so that `<R_m q, R_n k> = q^T R_{n-m} k` depends on the relative position n - m only
(key minus query, the convention of the whole package). Registered here:

  rope        1-D RoPE: base theta, interleaved | half layout, partial rotary, learned
              frequencies, length-extension maps (scaling.py), log-n query scaling, ReRoPE
  xpos        RoPE with an exponential decay per pair (Sun et al. 2022), causal only
  rope2d      N-D axial RoPE (Su, 2-D RoPE): one block of pairs per position axis
  rope_mixed  RoPE-Mixed (Heo et al., ECCV 2024): learned per-head frequencies per axis

Angles are always float32 (a bfloat16 position above 256 is not even an exact integer); the
rotated vectors are cast back to the activation dtype at the end.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from posjax.encoders import register
from posjax.encoders.base import Dims, Encoding, Params
from posjax.encoders.scaling import (
    ScalingConfig,
    attention_factor,
    freeze,
    logn_scale,
    parse,
    scaled_inv_freq,
    scaling_type,
    temperature_tuning,
    validate,
)
from posjax.errors import ConfigError, unknown

__all__ = [
    "LAYOUTS",
    "RoPE",
    "RoPEMixed",
    "RoPEND",
    "XPos",
    "apply_rotary",
    "attention_factor",
    "frequencies",
    "rotary_tables",
    "rotate_by_angles",
    "rotate_with_tables",
    "rotation_tables",
]


def frequencies(
    dim: int, theta: float = 10000.0, scaling: ScalingConfig | None = None, seq_len: Any = None
) -> jax.Array:
    """RoPE inverse frequencies float32[dim // 2]: `theta_i = theta^(-2i/dim)` (RoFormer eq. 15).

    scaling: None or a Hugging Face `rope_scaling` mapping ({"rope_type": "default" | "linear" |
    "dynamic" | "yarn" | "llama3" | "ntk", "factor": s, "original_max_position_embeddings":
    L_train, ...}; the older key "type" works too), applied by the registry in scaling.py; a
    key the map does not read is a ConfigError, and so is a `rope_theta` other than `theta`.
    seq_len: the current length, read by "dynamic" only; it may be a traced jnp scalar.
    """
    if dim < 2 or dim % 2:
        raise ConfigError(f"RoPE frequencies of dim={dim}: RoPE rotates pairs of dimensions, so "
                          "dim is even and >= 2 (a head_dim, or its rotated part)")
    _check_theta("RoPE", theta)
    return scaled_inv_freq(dim, theta, scaling, seq_len)


class Layout(NamedTuple):
    """How a vector's rotary dims form pairs: swap the members of every pair in place, and
    where a pair's two members sit once [..., R] is viewed as pairs: [..., R/2, 2] (-1,
    interleaved) or [..., 2, R/2] (-2, half)."""

    swap: Callable[[jax.Array], jax.Array]
    pair_axis: int


def _swap_interleaved(x):
    # A reversed axis of 2, not strided slices: XLA:CPU vectorises this copy, not those.
    return jnp.flip(x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2), -1).reshape(x.shape)


def _swap_half(x):
    half = x.shape[-1] // 2
    return jnp.concatenate([x[..., half:], x[..., :half]], axis=-1)


# interleaved: pairs (2i, 2i+1), RoFormer and GPT-J; half: pairs (i, i + R/2), GPT-NeoX and Llama.
# The two are the same rotation after a fixed permutation of the q/k dims (of W_Q, W_K).
LAYOUTS: dict[str, Layout] = {
    "interleaved": Layout(_swap_interleaved, -1),
    "half": Layout(_swap_half, -2),
}


def _layout(name: str) -> Layout:
    if name not in LAYOUTS:
        raise unknown("rotary layout", name, LAYOUTS)
    return LAYOUTS[name]


def rotation_tables(angles: jax.Array, layout: str = "interleaved",
                    gain: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """The full-width (cos, signed sin) tables that rotate pair i by angles[..., i].

    angles: float32 [..., R/2] -> two float32 [..., R] in the layout's dim order: pair (a, b)
    gets (cos, cos) and (-sin, sin), times gain if given (xPos). Built once and materialised
    (see both_members): left to fusion, XLA:CPU recomputed the cos and sin inside every
    consumer loop, once per head and per element, which made RoPE apply 5-20x slower than a
    copy of q and k. Several arrays rotated by the same positions share one pair of tables.
    """
    pair_axis = _layout(layout).pair_axis
    angles = angles.astype(jnp.float32)
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    if gain is not None:
        cos, sin = cos * gain, sin * gain

    def both_members(values, signs):
        # [..., R/2] -> [..., R] through a 0/+-1 matrix: a dot is never fused into its
        # consumers, so the cos and sin are computed once per position and frequency, and
        # each output is one exact product (HIGHEST keeps TPUs from rounding it to bfloat16).
        half = values.shape[-1]
        pairs = jnp.eye(half, dtype=jnp.float32)[..., None] * jnp.asarray(signs, jnp.float32)
        if pair_axis == -2:
            pairs = jnp.swapaxes(pairs, -1, -2)
        return jnp.dot(values, pairs.reshape(half, 2 * half), precision=lax.Precision.HIGHEST)

    return both_members(cos, (1.0, 1.0)), both_members(sin, (-1.0, 1.0))


def rotate_with_tables(x: jax.Array, tables: tuple[jax.Array, jax.Array],
                       layout: str = "interleaved") -> jax.Array:
    """x [..., D] rotated by `rotation_tables` broadcastable to [..., R], R <= D:
    `x * cos + swap(x) * signed sin`, swap exchanging the members of each pair, so pair (a, b)
    becomes `(a cos - b sin, b cos + a sin)`. Dims R..D pass through (partial rotary).
    Computed in float32, returned in x.dtype."""
    cos, signed_sin = tables
    rot = cos.shape[-1]
    if rot > x.shape[-1]:
        raise ConfigError(
            f"rotary dim {rot} exceeds the vector size {x.shape[-1]}: give at most "
            f"{x.shape[-1] // 2} frequencies"
        )
    rotated = x[..., :rot].astype(jnp.float32)
    out = (rotated * cos + _layout(layout).swap(rotated) * signed_sin).astype(x.dtype)
    if rot == x.shape[-1]:
        return out
    return jnp.concatenate([out, x[..., rot:]], axis=-1)


def rotate_by_angles(
    x: jax.Array, angles: jax.Array, layout: str = "interleaved", gain: jax.Array | None = None
) -> jax.Array:
    """Rotate pair i of the first R = 2 * angles.shape[-1] dims of x by angles[..., i].

    x: [..., D]; angles: float32, broadcastable to [..., R/2], R <= D; gain: optional float32
    broadcastable to [..., R/2] multiplying pair i (xPos). Per pair (a, b):
    `(a cos - b sin, b cos + a sin)`, i.e. `x * cos + rotate(x) * sin` with
    `rotate(x) = (-x1, x0, -x3, x2, ...)` in the interleaved layout. Dims R..D pass through
    (partial rotary). Computed in float32, returned in x.dtype.
    """
    return rotate_with_tables(x, rotation_tables(angles, layout, gain), layout)


def apply_rotary(
    x: jax.Array, positions: jax.Array, inv_freq: jax.Array, layout: str = "interleaved"
) -> jax.Array:
    """RoPE: x [..., L, H, D] rotated by positions [..., L] (int or float) -> [..., L, H, D].

    Angle of pair i at position m: `m * inv_freq[i]`, both cast to float32 before the product.
    Only the first `2 * len(inv_freq)` dims rotate (partial rotary); the rest pass through.
    """
    return rotate_with_tables(x, rotary_tables(x, positions, inv_freq, layout), layout)


def rotary_tables(x: jax.Array, positions: jax.Array, inv_freq: jax.Array,
                  layout: str = "interleaved") -> tuple[jax.Array, jax.Array]:
    """`rotation_tables` of positions [..., L] for arrays shaped like x [..., L, H, D]:
    two float32 [..., L, 1, R]."""
    if positions.ndim != x.ndim - 2:
        raise ConfigError(
            f"apply_rotary takes positions [..., L] for x [..., L, H, D]; got positions "
            f"{positions.shape} for x {x.shape}: 2-D positions need rope2d or rope_mixed"
        )
    angles = positions.astype(jnp.float32)[..., None] * inv_freq.astype(jnp.float32)
    return rotation_tables(angles[..., None, :], layout)


def _scale(x: jax.Array, gain: jax.Array | float) -> jax.Array:
    """x * gain computed in float32, returned in x.dtype."""
    return (x.astype(jnp.float32) * gain).astype(x.dtype)


def _check_layout_theta(name: str, layout: str, theta: float) -> None:
    _layout(layout)
    _check_theta(name, theta)


def _check_theta(name: str, theta: float) -> None:
    if not theta > 0:
        raise ConfigError(f"{name} theta must be > 0, got {theta}: the usual base is 10000")


def _check_even_head_dim(name: str, dims: Dims, multiple: int = 2, why: str = "") -> None:
    if dims.head_dim % multiple:
        lower = dims.head_dim - dims.head_dim % multiple
        if multiple == 2:
            raise ConfigError(
                f"{name} needs an even head_dim, got {dims.head_dim}: choose an even head_dim"
            )
        raise ConfigError(
            f"{name} needs head_dim divisible by {multiple}{why}, got {dims.head_dim}: choose "
            f"head_dim {lower or multiple} or {lower + multiple}"
        )


# Where YaRN's attention factor applies with partial rotary (RoPE.attention_factor_dims).
ATTENTION_FACTOR_DIMS = ("all", "rotated")


@register("rope")
@dataclasses.dataclass(frozen=True)
class RoPE(Encoding):
    """RoPE (Su et al. 2021) with its length-extension and efficiency variants.

    theta: the base of `theta_i = theta^(-2i/R)`, R the rotary dim.
    layout: "interleaved" pairs (2i, 2i+1); "half" pairs (i, i + R/2) (GPT-NeoX, Llama).
    fraction: partial rotary, R = head_dim * fraction rounded down to even (GPT-NeoX: 0.25).
    p: p-RoPE (Barbero et al., ICLR 2025, "Round and Round We Go!"): only the highest
        floor(p * R/2) frequencies rotate (Gemma's and transformers' "proportional" rope:
        int(p * head_dim // 2)), with their full-width spacing theta^(-2i/R); the
        lowest ones are set to 0, so those pairs pass through unrotated (unlike `fraction`,
        which spaces its frequencies over the rotated dims alone). 1.0 = plain RoPE.
    learned_freqs: train the R/2 frequencies (params {"inv_freq"}), initialised to theta^(-2i/R)
        (Su reports they barely move). With `scaling` too, the map's per-pair ratio to plain
        RoPE multiplies the learned frequencies.
    scaling: a Hugging Face `rope_scaling` mapping or transformers-v5 `rope_parameters` block
        (scaling.py), also as JSON text or the short form NAME:FACTOR (`scaling.parse`; "" is
        none), stored as sorted items. Its `rope_theta` and `partial_rotary_factor`, if
        given, must equal theta and fraction (a ConfigError says which to set). "dynamic" reads
        the current length as max(k_pos) + 1 (Hugging Face's rule), so it cannot combine with
        ReRoPE, whose score may see one block of keys at a time, and it is recomputed from
        each call's own length: posjax equals a fresh Hugging Face module's first call at that
        length, not HF's stateful module, which keeps the frequencies of its longest input for
        later shorter ones (above the training length); a pure function keeps no such cache,
        so the same input gives the same output whatever ran before. YaRN's attention factor
        multiplies q and k; for DeepSeek blocks (mscale, mscale_all_dim) it is DeepSeek's
        whole factor mscale(s, mscale), where Hugging Face puts mscale(s, mscale) /
        mscale(s, mscale_all_dim) on the rotation and mscale(s, mscale_all_dim)^2 in its
        attention's softmax scale: the q.k multiplier is the same (1.8739 for DeepSeek-V3),
        the rotary factor alone is not (1.3689 against HF's 1.0). See scaling.py.
    attention_factor_dims: where that factor applies with partial rotary: "all" dims (default:
        the logits get exactly its square, as YaRN's paper states it) or only the "rotated"
        ones (Hugging Face, whose cos and sin carry the factor, so the pass-through dims keep
        their scale).
    logn_train_len: 0 = off; else q at position m is multiplied by max(1, log(m+1)/log(L_train)).
    rerope_window: 0 = off; else ReRoPE (Su 2023), `a_ij = q_i^T R_{max(j - i, -w)} k_j`, the
        key-minus-query distance capped at -w. It needs two score passes, so the encoding then
        uses the rel_score site (replacing q.k) instead of rotate, and is causal only.
    self_extend_group: 0 = off; G >= 1 = Self-Extend (Jin et al. 2024, "LLM Maybe LongLM") with
        rerope_window as its neighbour window w: past w the query sits at position
        floor(i/G) + w - floor(w/G) and the key at floor(j/G), so distances beyond the window
        are grouped G to one and stay within the trained range; within w, plain RoPE.
        G = 1 is plain RoPE everywhere.
    sink_tokens: 0 = off; s > 0 = attention sinks, StreamingLLM (Xiao et al. 2024, "Efficient
        Streaming Language Models with Attention Sinks"), with rerope_window as its window w:
        a query sees the keys at positions < s and the last w keys, nothing else; positions
        are those in the cache, so a window key is at its plain distance and a sink j at
        distance min(i, s + w - 1) - j.
    rerope_leak: 0 = hard cap; k > 1 = leaky ReRoPE, `R_{max(j-i, (j-i+w)/k - w)}`: past the
        window, distances keep growing at slope 1/k.
    temperature_floor: 0 = off; F > 0 = Llama 4's attention temperature tuning, q at position
        m multiplied by 1 + temperature_scale * log(floor((m + 1) / F) + 1): 1 below position
        F - 1, then growing in steps of F (Llama 4 puts it on its NoPE layers, F = 8192 and
        scale 0.1: `rope(p=0,temperature_floor=8192)`; transformers' modeling_llama4).
    temperature_scale: its slope (Llama 4's attn_scale, 0.1).
    temperature_offset: the position's offset in floor((m + offset) / F): 1 Llama 4's; 0 the
        Mistral 3 models' (Ministral 3, Mistral Large 3: llama_4_scaling_beta with F their
        original_max_position_embeddings; transformers' get_llama_4_attn_scale).
    """

    theta: float = 10000.0
    layout: str = "interleaved"
    fraction: float = 1.0
    p: float = 1.0
    learned_freqs: bool = False
    scaling: Any = None
    logn_train_len: int = 0
    rerope_window: int = 0
    rerope_leak: float = 0.0
    self_extend_group: int = 0
    sink_tokens: int = 0
    attention_factor_dims: str = "all"
    temperature_floor: int = 0
    temperature_scale: float = 0.1
    temperature_offset: int = 1

    @property
    def _windowed(self) -> str:
        """The method rerope_window is the window of, for messages."""
        if self.self_extend_group:
            return "Self-Extend"
        if self.sink_tokens:
            return "attention sinks"
        return "leaky ReRoPE" if self.rerope_leak else "ReRoPE"

    def __post_init__(self):
        object.__setattr__(self, "scaling", freeze(parse(self.scaling)))
        if self.attention_factor_dims not in ATTENTION_FACTOR_DIMS:
            raise unknown("rope attention_factor_dims", self.attention_factor_dims,
                          ATTENTION_FACTOR_DIMS)
        _check_layout_theta("rope", self.layout, self.theta)
        if not 0.0 < self.fraction <= 1.0:
            raise ConfigError(
                f"rope fraction={self.fraction} must be in (0, 1]: it is the rotated share of "
                "each head (1.0 = all dims)"
            )
        if not 0.0 <= self.p <= 1.0:
            raise ConfigError(
                f"rope p={self.p} must be in [0, 1]: it is the share of frequencies p-RoPE "
                "keeps (1.0 = all, 0.0 = NoPE)"
            )
        validate(self.scaling, theta=self.theta, fraction=self.fraction)
        if self.logn_train_len < 0 or self.logn_train_len == 1:
            raise ConfigError(
                f"rope logn_train_len={self.logn_train_len}: use 0 (off) or the training "
                "length (>= 2)"
            )
        if self.rerope_window < 0:
            raise ConfigError(f"rope rerope_window={self.rerope_window}: use 0 (off) or w > 0")
        if self.temperature_floor < 0:
            raise ConfigError(f"rope temperature_floor={self.temperature_floor}: use 0 (off) or "
                              "F > 0 (Llama 4's 8192)")
        if self.temperature_offset not in (0, 1):
            raise ConfigError(f"rope temperature_offset={self.temperature_offset}: use 1 "
                              "(Llama 4's floor((m + 1) / F)) or 0 (Mistral 3's floor(m / F))")
        if self.rerope_leak and not self.rerope_leak > 1.0:
            raise ConfigError(
                f"rope rerope_leak={self.rerope_leak}: use 0 (hard cap) or k > 1 (slope 1/k past "
                "the window; k = 1 is plain RoPE)"
            )
        if self.rerope_leak and not self.rerope_window:
            raise ConfigError("rope rerope_leak needs rerope_window > 0: set the window too")
        if self.self_extend_group < 0 or (self.self_extend_group and not self.rerope_window):
            raise ConfigError(
                f"rope self_extend_group={self.self_extend_group}: use 0 (off), or G >= 1 with "
                "rerope_window > 0 as Self-Extend's neighbour window"
            )
        if self.sink_tokens < 0 or (self.sink_tokens and not self.rerope_window):
            raise ConfigError(
                f"rope sink_tokens={self.sink_tokens}: use 0 (off), or s > 0 with "
                "rerope_window > 0 as StreamingLLM's window"
            )
        past_window = [n for n in ("rerope_leak", "self_extend_group", "sink_tokens")
                       if getattr(self, n)]
        if len(past_window) > 1:
            raise ConfigError(f"rope {' and '.join(past_window)} each set what lies past the "
                              "window: choose one")
        if self.rerope_window and self.scaling and scaling_type(self.scaling) == "dynamic":
            raise ConfigError(
                "rope rerope_window cannot combine with dynamic scaling: its length would come "
                "from one block of keys; use a fixed-factor map (ntk, yarn, linear)"
            )

    # Sites and flags depend on rerope_window, so they are properties, not class attributes.
    @property
    def replaces_content(self) -> bool:
        return self.rerope_window > 0

    @property
    def causal_only(self) -> bool:
        # ReRoPE caps past distances only (j - i <= -w); future keys would stay uncapped.
        return self.rerope_window > 0

    @property
    def rotate(self):
        return None if self.rerope_window else self._rotate

    @property
    def rel_score(self):
        return self._rerope_score if self.rerope_window else None

    @property
    def rel_prepare(self):
        return self._rerope_prepare if self.rerope_window else None

    @property
    def prepared_score(self):
        return self._rerope_prepared_score if self.rerope_window else None

    def rot_dim(self, head_dim: int) -> int:
        """The rotated dims per head: head_dim * fraction rounded down to even."""
        return 2 * math.floor(round(self.fraction * head_dim / 2, 6))

    def check(self, dims: Dims) -> None:
        super().check(dims)
        _check_even_head_dim("rope", dims)
        rot = self.rot_dim(dims.head_dim)
        if rot < 2:
            raise ConfigError(
                f"rope fraction={self.fraction} rotates no pair of head_dim {dims.head_dim}: "
                f"use fraction >= {2 / dims.head_dim:.3g}"
            )
        validate(self.scaling, rot, self.theta, self.fraction)
        if self.rerope_window and self.rerope_window >= dims.max_len:
            raise ConfigError(
                f"rope rerope_window={self.rerope_window} >= training length {dims.max_len}: "
                f"no trained distance is capped, so {self._windowed} collapses to plain RoPE; "
                "use a window below the training length (Su uses L_train / 2)"
            )

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        del rng
        self.check(dims)
        if not self.learned_freqs:
            return {}
        return {"inv_freq": frequencies(self.rot_dim(dims.head_dim), self.theta)}

    def _inv_freq(self, params: Params, head_dim: int, seq_len: jax.Array | None) -> jax.Array:
        rot = self.rot_dim(head_dim)
        inv_freq = frequencies(rot, self.theta, self.scaling, seq_len)
        if self.learned_freqs:  # scaled by the map's ratio, as the fixed ones are
            learned = params["inv_freq"].astype(jnp.float32)
            inv_freq = learned if self.scaling is None else (
                learned * inv_freq / frequencies(rot, self.theta))
        if self.p < 1.0:  # p-RoPE: the lowest frequencies do not turn, learned or not
            turning = int(self.p * rot // 2)  # as Gemma's code and transformers' count them
            inv_freq = jnp.where(jnp.arange(rot // 2) < turning, inv_freq, 0.0)
        return inv_freq

    def _scaled_qk(self, q, k, q_pos):
        """q, k: [..., L, H, Dh] times their gains, skipped when exactly 1.

        Both get the scaling map's attention factor (YaRN's, DeepSeek's), unless no pair
        rotates (p = 0: a NoPE layer, whose scores a map of frequencies leaves alone, as
        Llama 4's NoPE layers under its rope_scaling); q also gets the log-n scale and Llama
        4's temperature at its position.
        """
        factor = attention_factor(self.scaling) if self.p > 0 else 1.0
        rot = self.rot_dim(q.shape[-1])
        if factor != 1.0 and self.attention_factor_dims == "rotated" and rot < q.shape[-1]:
            q, k = (jnp.concatenate([_scale(x[..., :rot], factor), x[..., rot:]], axis=-1)
                    for x in (q, k))
            factor = 1.0
        if self.logn_train_len or self.temperature_floor:
            gain = factor
            if self.logn_train_len:
                gain = gain * logn_scale(q_pos, self.logn_train_len)
            if self.temperature_floor:
                gain = gain * temperature_tuning(q_pos, self.temperature_floor,
                                                 self.temperature_scale, self.temperature_offset)
            q = _scale(q, gain[..., None, None])
        elif factor != 1.0:
            q = _scale(q, factor)
        if factor != 1.0:
            k = _scale(k, factor)
        return q, k

    def _rotate(self, params, q, k, q_pos, k_pos):
        """q: [B, Lq, H, Dh], k: [B, Lk, H, Dh] rotated by their own positions."""
        _check_even_head_dim(self.name or "rope", Dims(1, 1, q.shape[-1], 1))
        inv_freq = self._inv_freq(params, q.shape[-1], jnp.max(k_pos) + 1)
        q, k = self._scaled_qk(q, k, q_pos)
        q_tables = rotary_tables(q, q_pos, inv_freq, self.layout)
        # Self-attention passes one positions array for both: one pair of tables serves both.
        k_tables = q_tables if k_pos is q_pos else rotary_tables(k, k_pos, inv_freq, self.layout)
        return (rotate_with_tables(q, q_tables, self.layout),
                rotate_with_tables(k, k_tables, self.layout))

    def _rerope_score(self, params, q, k, q_pos, k_pos, head):
        """ReRoPE's whole score float32[Lq, Lk] for one example and head (q: [Lq, Dh]).

        Pass 1 (exact relative, used where j - i > -w): (R_i q_i) . (R_j k_j) = q^T R_{j-i} k.
        Pass 2 (j - i <= -w): hard cap, q rotated by position w and k unrotated, giving
        q^T R_{-w} k. Leaky (k > 1): q rotated by i/k + w(1 - 1/k) and k by j/k, giving
        q^T R_{(j-i+w)/k - w} k. Self-Extend (group G): q rotated by i // G + w - w // G and
        k by j // G. Attention sinks: q at min(i, s + w - 1), k at j, keys j >= s dropped.
        All include 1/sqrt(Dh): this term replaces q.k.
        """
        sides = self._rerope_prepare(params, q, k, q_pos, k_pos, head)
        return self._rerope_prepared_score(params, *sides, q_pos, k_pos, head)

    def _rerope_prepare(self, params, q, k, q_pos, k_pos, head):
        """-> ({"inside", "outside"} q rotated for each pass [Lq, Dh], the same for k): the
        rotations, done once for the sequence, so a block's score is two matmuls."""
        del head
        head_dim = q.shape[-1]
        inv_freq = self._inv_freq(params, head_dim, seq_len=None)
        q, k = self._scaled_qk(q[:, None, :], k[:, None, :], q_pos)
        q, k = q[:, 0, :], k[:, 0, :]
        w = float(self.rerope_window)

        def rot(x, pos):
            return apply_rotary(x[:, None, :], pos, inv_freq, self.layout)[:, 0, :]

        q_sides, k_sides = {"inside": rot(q, q_pos)}, {"inside": rot(k, k_pos)}
        if self.sink_tokens:
            cache_end = self.sink_tokens + self.rerope_window - 1
            q_sides["outside"] = rot(q, jnp.minimum(q_pos, cache_end))
            k_sides["outside"] = rot(k, k_pos)
        elif self.self_extend_group:
            group = self.self_extend_group
            shift = self.rerope_window - self.rerope_window // group
            q_sides["outside"] = rot(q, q_pos // group + shift)
            k_sides["outside"] = rot(k, k_pos // group)
        elif self.rerope_leak:
            kk = self.rerope_leak
            qf = q_pos.astype(jnp.float32) / kk + w * (1.0 - 1.0 / kk)
            q_sides["outside"] = rot(q, qf)
            k_sides["outside"] = rot(k, k_pos.astype(jnp.float32) / kk)
        else:
            q_sides["outside"] = rot(q, jnp.full(q_pos.shape, w, jnp.float32))
            k_sides["outside"] = k
        return q_sides, k_sides

    def _rerope_prepared_score(self, params, q_side, k_side, q_pos, k_pos, head):
        del params, head

        def dot(a, b):
            return jnp.matmul(a, b.T, preferred_element_type=jnp.float32)

        relative = k_pos[None, :] - q_pos[:, None]
        outside = dot(q_side["outside"], k_side["outside"])
        if self.sink_tokens:  # StreamingLLM's cache holds no other key: weight exp(-1e30) = 0
            outside = jnp.where(k_pos[None, :] < self.sink_tokens, outside, -1e30)
        score = jnp.where(relative > -float(self.rerope_window),
                          dot(q_side["inside"], k_side["inside"]), outside)
        return score * self.logit_scale(q_side["inside"].shape[-1])


@register("xpos")
@dataclasses.dataclass(frozen=True)
class XPos(Encoding):
    """xPos (Sun et al. 2022): RoPE with a per-pair exponential decay, causal only.

    Rotated q at position m is scaled by `zeta_i^(m/scale_base)` and k at n by
    `zeta_i^(-n/scale_base)`, `zeta_i = (2i + 0.4 d) / (1.4 d)` < 1, so pair i of the score is
    multiplied by `zeta_i^((m - n)/scale_base)`, a decay in the distance. Positions are first
    centred on the middle c of the example's position range: the score depends on m - n only,
    and exponents of at most (range / 2) / scale_base keep the scales finite in float32 at
    any absolute position (uncentred, zeta^(10^6 / 512) underflows to 0).
    """

    theta: float = 10000.0
    layout: str = "interleaved"
    scale_base: float = 512.0
    causal_only: ClassVar[bool] = True

    def __post_init__(self):
        _check_layout_theta("xpos", self.layout, self.theta)
        if not self.scale_base > 0:
            raise ConfigError(f"xpos scale_base={self.scale_base} must be > 0 (the paper: 512)")

    def check(self, dims: Dims) -> None:
        super().check(dims)
        _check_even_head_dim("xpos", dims)

    def rotate(self, params, q, k, q_pos, k_pos):
        """q: [B, Lq, H, Dh], k: [B, Lk, H, Dh]; q_pos: int32[B, Lq], k_pos: int32[B, Lk]."""
        del params
        head_dim = q.shape[-1]
        inv_freq = frequencies(head_dim, self.theta)
        pairs = jnp.arange(head_dim // 2, dtype=jnp.float32)
        log_zeta = jnp.log((2.0 * pairs + 0.4 * head_dim) / (1.4 * head_dim))
        low = jnp.minimum(q_pos.min(axis=-1), k_pos.min(axis=-1))
        high = jnp.maximum(q_pos.max(axis=-1), k_pos.max(axis=-1))
        # Integer centre and subtraction (written not to overflow int32): exact before the cast.
        centre = (low + (high - low) // 2)[..., None]

        def turn(x, pos, sign):
            offset = (pos - centre).astype(jnp.float32)[..., None]
            angles = pos.astype(jnp.float32)[..., None] * inv_freq
            gain = jnp.exp(sign * offset / self.scale_base * log_zeta)
            return rotate_by_angles(x, angles[..., None, :], self.layout, gain[..., None, :])

        return turn(q, q_pos, 1.0), turn(k, k_pos, -1.0)


def _check_nd_positions(name: str, ndim: int, positions: jax.Array) -> None:
    if positions.ndim != 3 or positions.shape[-1] != ndim:
        raise ConfigError(
            f"{name} needs positions int32[B, L, {ndim}] (one coordinate per axis), got shape "
            f"{tuple(positions.shape)}: use a patch2d dataset, or rope for 1-D positions"
        )


def _check_ndim(name: str, ndim: int) -> None:
    if ndim < 1:
        raise ConfigError(f"{name} ndim={ndim} must be >= 1 (2 for images)")


@dataclasses.dataclass(frozen=True)
class _AxialRotary(Encoding):
    """What the rotations of N-D positions share: `ndim` position axes, one block of pairs
    per axis (head_dim divisible by 2 * ndim), and their checks."""

    theta: float = 100.0
    ndim: int = 2
    layout: str = "interleaved"

    def __post_init__(self):
        _check_layout_theta(self.name, self.layout, self.theta)
        _check_ndim(self.name, self.ndim)

    @property
    def position_axes(self) -> int:
        return self.ndim

    def check(self, dims: Dims) -> None:
        super().check(dims)
        _check_even_head_dim(
            self.name, dims, 2 * self.ndim, " (2 * ndim: one block of pairs per axis)"
        )

    def check_positions(self, q_pos: jax.Array, k_pos: jax.Array) -> None:
        """q_pos, k_pos: int32[B, L, ndim], else a one-line ConfigError."""
        _check_nd_positions(self.name, self.ndim, q_pos)
        _check_nd_positions(self.name, self.ndim, k_pos)


@register("rope2d")
@dataclasses.dataclass(frozen=True)
class RoPEND(_AxialRotary):
    """N-D axial RoPE (Su 2021, 2-D RoPE): `R_{x,y} = blockdiag(R_x, R_y)`.

    The Dh/2 pairs form `ndim` equal blocks; block a turns by the axis-a position with the
    frequencies theta^(-2i/(Dh/ndim)). It is relative (`R_{x1,y1}^T R_{x2,y2} =
    R_{x2-x1, y2-y1}`) and invertible (the position can be read back), and needs head_dim
    divisible by 2 * ndim. theta defaults to 100 as in RoPE-ViT's axial variant (Heo et al.
    2024): a patch grid spans tens of positions, not thousands of tokens.
    """

    def rotate(self, params, q, k, q_pos, k_pos):
        """q: [B, Lq, H, Dh], k: [B, Lk, H, Dh]; q_pos: int32[B, Lq, ndim], k_pos likewise."""
        del params
        self.check_positions(q_pos, k_pos)
        inv_freq = frequencies(q.shape[-1] // self.ndim, self.theta)

        def turn(x, pos):
            # [B, L, ndim, Dh/(2 ndim)] -> [B, L, Dh/2]: axis-major, so block a is axis a.
            angles = pos.astype(jnp.float32)[..., None] * inv_freq
            return rotate_by_angles(x, angles.reshape(*pos.shape[:-1], 1, -1), self.layout)

        return turn(q, q_pos), turn(k, k_pos)


@register("rope_mixed")
@dataclasses.dataclass(frozen=True)
class RoPEMixed(_AxialRotary):
    """RoPE-Mixed (Heo et al., ECCV 2024): learned per-head frequencies mixing the axes.

    Pair p of head h turns by `sum_a pos_a * f[a, h, p]` (2-D: `x f_x + y f_y`), params
    {"freqs": float32[ndim, H, Dh/2]}; linear in the position, so still relative. Init as in
    the paper: the Dh/2 pairs form `ndim` blocks with magnitudes theta^(-2i/(Dh/ndim)) (theta
    = 10); block b of head h points along direction b of a random rotation of the axes drawn
    per head from `rng` (2-D: angle phi ~ U[0, 2 pi), directions phi and phi + pi/2).
    """

    theta: float = 10.0

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        magnitude = frequencies(dims.head_dim // self.ndim, self.theta)
        # Haar orthogonal matrices with the last row's sign fixed: uniform over rotations.
        frames = jax.random.orthogonal(rng, self.ndim, shape=(dims.num_heads,))
        sign = jnp.sign(jnp.linalg.det(frames))
        frames = frames.at[:, -1, :].multiply(sign[:, None])
        # frames[h, b, a]: axis-a component of head h's direction b.
        freqs = jnp.einsum("hba,i->ahbi", frames, magnitude)
        return {"freqs": freqs.reshape(self.ndim, dims.num_heads, dims.head_dim // 2)}

    def rotate(self, params, q, k, q_pos, k_pos):
        """q: [B, Lq, H, Dh], k: [B, Lk, H, Dh]; q_pos: int32[B, Lq, ndim], k_pos likewise."""
        self.check_positions(q_pos, k_pos)
        freqs = params["freqs"].astype(jnp.float32)

        def turn(x, pos):
            angles = jnp.einsum("bla,ahp->blhp", pos.astype(jnp.float32), freqs)
            return rotate_by_angles(x, angles, self.layout)

        return turn(q, q_pos), turn(k, k_pos)
