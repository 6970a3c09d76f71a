"""Multimodal RoPE (M-RoPE; Qwen2-VL, Wang et al. 2024) and its interleaved allocation
(MRoPE-Interleave; Qwen3-VL, Huang et al. 2025, "Revisiting Multimodal Positional Encoding in
Vision-Language Models").

A token's position has three components (temporal, height, width). RoPE's frequency pairs are
split among them: pair i turns by component a(i) of the position times theta^(-2i/Dh).

  sections (Qwen2-VL): contiguous blocks of s_t, s_h, s_w pairs, lowest frequencies last
      (Hugging Face's `mrope_section`, [16, 24, 24] of a 128-dim head);
  interleaved (Qwen3-VL): pair i reads h where i = 1 (mod 3) and i < 3 s_h, w where
      i = 2 (mod 3) and i < 3 s_w, t elsewhere ([24, 20, 20]), so every component spans high
      and low frequencies.

Text tokens carry the same 1-D position in all three components, where both reduce to RoPE
with these frequencies; positions int32[B, L] are read that way (a text-only model), and
int32[B, L, 3] give each token its own (t, h, w). `mrope_positions` is Qwen2-VL's rule for a
sequence that mixes text and image grids (`get_rope_index`); `rope_tv_positions` is Su's rule
(RoPE-Tie-v2) for the same sequence, read by axial 2-D RoPE.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from posjax.encoders import register
from posjax.encoders.base import Dims, Encoding, Params
from posjax.encoders.rotary import (
    _check_even_head_dim,
    _check_layout_theta,
    frequencies,
    rotate_by_angles,
)
from posjax.errors import ConfigError

# Qwen2-VL's and Qwen3-VL's sections of 64 pairs, scaled to other heads when none is given.
QWEN2_SECTION = (16, 24, 24)
QWEN3_SECTION = (24, 20, 20)


def default_section(pairs: int, interleaved: bool) -> tuple[int, int, int]:
    """Qwen's proportions for `pairs` frequency pairs: h and w get their share (rounded
    down), t the rest."""
    share = (QWEN3_SECTION if interleaved else QWEN2_SECTION)[1] / 64
    spatial = int(pairs * share)
    return (pairs - 2 * spatial, spatial, spatial)


def pair_axes(section: Sequence[int], interleaved: bool) -> np.ndarray:
    """int32[sum(section)]: the position component (0 = t, 1 = h, 2 = w) pair i turns by."""
    pairs = sum(section)
    if not interleaved:
        return np.repeat(np.arange(3), section).astype(np.int32)
    axes = np.zeros(pairs, np.int32)
    for axis in (1, 2):
        axes[axis:3 * section[axis]:3] = axis
    return axes


def mrope_positions(parts: Sequence[int | tuple[int, int, int]]) -> np.ndarray:
    """Qwen2-VL's position rule (Hugging Face `Qwen2VLModel.get_rope_index`) -> int32[L, 3].

    parts: in order, an int n for a run of n text tokens, or a grid (t, h, w) of image
    tokens after the vision encoder's merging, raster order (t slowest). A text run continues
    from `next`, all three components equal; a grid's tokens are (next + t_i, next + h_i,
    next + w_i); after either, `next` is the largest position used + 1 (for a grid,
    next + max(t, h, w), which is Hugging Face's next + max(h, w) for the images it has,
    t = 1).
    """
    def place(start: int, t: int, h: int, w: int) -> tuple[np.ndarray, int]:
        grid = np.stack(np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij"),
                        axis=-1)
        return grid.reshape(-1, 3) + start, start + max(t, h, w)

    return _mixed_positions(parts, 3, place)


def _mixed_positions(parts: Sequence[int | tuple[int, int, int]], components: int,
                     place) -> np.ndarray:
    """int32[L, components]: text runs continue from `next` in every component; a grid's
    rows and the next `next` come from place(next, t, h, w)."""
    start, rows = 0, []
    for part in parts:
        if isinstance(part, (int, np.integer)):
            ids = start + np.arange(part)
            rows.append(np.stack([ids] * components, axis=-1))
            start += int(part)
            continue
        grid, start = place(start, *part)
        rows.append(grid)
    if not rows:
        return np.zeros((0, components), np.int32)
    return np.concatenate(rows).astype(np.int32)


def rope_tv_positions(parts: Sequence[int | tuple[int, int, int]]) -> np.ndarray:
    """Su's mixed text-and-image positions for 2-D RoPE (RoPE-Tie-v2, "RoPE-TV", kexue.fm
    10352, 2024) -> int32[L, 2] (h, w).

    parts: as `mrope_positions`, images as (1, h, w) grids. A text token at 1-D position n
    sits at (n, n), where 2-D RoPE is RoPE-1D. An image of h x w patches counts as h * w
    tokens (the text after it continues h * w later, as in the flattened sequence), its
    patches one apart, and it sits centred in that span: with n the position of the token
    before it, patch (i, j) is at (n + b_h + i, n + b_w + j) with b_h = (h w - h) / 2 + 1,
    b_w = (h w - w) / 2 + 1, so the gap from the text before to the first patch equals the
    gap from the last patch to the text after. The post states these three principles
    (text as RoPE-1D, an image worth its patches, symmetric gaps) with patch spacing 1; the
    offsets are solved from them here. Needs h w - h and h w - w even (any square grid).
    """
    def place(start: int, t: int, h: int, w: int) -> tuple[np.ndarray, int]:
        if t != 1 or (h * w - h) % 2 or (h * w - w) % 2:
            raise ConfigError(f"rope_tv positions take images (1, h, w) with h*w - h and "
                              f"h*w - w even (a square grid); got {(t, h, w)}")
        grid = np.stack(np.meshgrid(np.arange(h), np.arange(w), indexing="ij"), axis=-1)
        offset = np.array([(h * w - h) // 2, (h * w - w) // 2])
        return grid.reshape(-1, 2) + start + offset, start + h * w

    return _mixed_positions(parts, 2, place)


@register("mrope")
@dataclasses.dataclass(frozen=True)
class MRoPE(Encoding):
    """RoPE with its pairs split among (t, h, w) position components (Qwen2-VL, Qwen3-VL).

    Hugging Face's rotate_half layout by default; the allocation: module docstring.

    section: pairs per component "t+h+w" (e.g. "16+24+24"), summing to head_dim / 2; ""
    scales Qwen's (`default_section`). interleaved: Qwen3-VL's allocation instead of
    Qwen2-VL's contiguous sections.
    """

    theta: float = 10000.0
    layout: str = "half"
    section: str = ""
    interleaved: bool = False

    def __post_init__(self):
        _check_layout_theta("mrope", self.layout, self.theta)
        if self.section and not all(p.strip().isdigit() for p in self.section.split("+")):
            raise ConfigError(f"mrope section={self.section!r}: write three pair counts "
                              "joined by '+' (t+h+w, e.g. 16+24+24), or '' for Qwen's")

    def reads_positions(self, axes: int | None) -> bool:
        """Text positions int32[B, L], or (t, h, w) int32[B, L, 3]."""
        return axes in (None, 3)

    def sections(self, head_dim: int) -> tuple[int, ...]:
        """The pairs of (t, h, w) for a head of head_dim dims."""
        if not self.section:
            return default_section(head_dim // 2, self.interleaved)
        return tuple(int(p) for p in self.section.split("+"))

    def check(self, dims: Dims) -> None:
        super().check(dims)
        _check_even_head_dim("mrope", dims)
        section = self.sections(dims.head_dim)
        pairs = dims.head_dim // 2
        example = "+".join(map(str, default_section(pairs, self.interleaved)))
        if len(section) != 3 or sum(section) != pairs:
            raise ConfigError(f"mrope section={self.section!r} must be three pair counts "
                              f"summing to head_dim / 2 = {pairs}, e.g. {example}")
        if self.interleaved:
            # Qwen3-VL's interleaving gives h the pairs 1, 4, ... below 3 s_h and w the pairs
            # 2, 5, ... below 3 s_w: past head_dim / 2, a section's share would go to t
            kept = tuple(np.bincount(pair_axes(section, True), minlength=3))
            if kept != tuple(section):
                raise ConfigError(
                    f"mrope section={self.section!r} with interleaved=True would turn "
                    f"{'+'.join(map(str, kept))} pairs by t+h+w, not "
                    f"{'+'.join(map(str, section))}: interleaving "
                    f"fits at most {(pairs + 1) // 3} h and {pairs // 3} w pairs in "
                    f"{pairs}; give such a section (e.g. {example}) or interleaved=False")

    def angles(self, positions: jax.Array, head_dim: int) -> jax.Array:
        """positions int32[..., 3] (t, h, w) -> float32[..., head_dim / 2]."""
        axes = pair_axes(self.sections(head_dim), self.interleaved)
        return positions.astype(jnp.float32)[..., axes] * frequencies(head_dim, self.theta)

    def rotate(self, params: Params, q, k, q_pos, k_pos):
        """q: [B, Lq, H, Dh], k: [B, Lk, H, Dh]; positions int32[B, L] (text: the same in
        all three components) or int32[B, L, 3]."""
        del params

        def turn(x, pos):
            if pos.ndim == x.ndim - 2:
                pos = jnp.stack([pos] * 3, axis=-1)
            elif pos.shape[-1] != 3:
                raise ConfigError(f"mrope takes positions [B, L] (text) or [B, L, 3] (t, h, w), "
                                  f"got shape {tuple(pos.shape)}")
            return rotate_by_angles(x, self.angles(pos, x.shape[-1])[..., None, :], self.layout)

        return turn(q, q_pos), turn(k, k_pos)
