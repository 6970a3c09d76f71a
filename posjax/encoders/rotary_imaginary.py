"""RoPE++ (Liu et al. 2025, "Beyond Real: Imaginary Extension of Rotary Position Embeddings
for Long-Context LLMs", arXiv 2512.07525; code OpenMOSS/rope_pp).

RoPE's score is the real part of a complex product, Re[sum_i q_i conj(k_i) e^{i (m - n) t_i}]
(pairs as complex numbers, m the query's position, n the key's). RoPE++ gives some heads the
imaginary part instead:

    Im[...] = sum_i (q . k)_i sin((m - n) t_i) - (q x k)_i cos((m - n) t_i)

which is the real part after the query is turned by a further -pi/2: the rotated query's
pairs (a, b) become (b, -a), exactly (a swap and a sign, no rounding), so it stays at the
query/key site and every kernel carries it. The authors stack each query head's real and
imaginary copies as heads 2h and 2h + 1 sharing that head's key and value (`imag_heads="odd"`):
RoPE++_EH (imag1) halves the q, k, v projections to keep the head count, RoPE++_EC (imag2)
keeps them and doubles the heads. Here a head's q, k and v come from the model's own
projections, so RoPE++ is the pattern of imaginary heads; EH and EC are the same with the
projections of heads 2h and 2h + 1 tied (tests/test_encodings_polar_fourier.py ties them to
match the authors' attention output). The score still depends only on n - m.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from posjax.encoders import register
from posjax.encoders.base import Dims
from posjax.encoders.rotary import LAYOUTS, RoPE
from posjax.errors import ConfigError, unknown

__all__ = ["IMAGINARY_HEADS", "RoPEPlusPlus", "quarter_turn"]

# Which heads take the imaginary part: bool[H] from the head count.
IMAGINARY_HEADS: dict[str, Callable[[int], np.ndarray]] = {
    # the authors' order (imag1, imag2): real and imaginary copies of a head side by side
    "odd": lambda heads: np.arange(heads) % 2 == 1,
    # their ablation `imagh`: the second half of the heads imaginary
    "second_half": lambda heads: np.arange(heads) >= heads // 2,
    # their ablation `imago`: every head imaginary
    "all": lambda heads: np.ones(heads, bool),
}


def quarter_turn(x: jax.Array, layout: str = "interleaved") -> jax.Array:
    """x [..., D] with each pair (a, b) turned by -pi/2 to (b, -a) (times -i as a complex
    number), in the layout's pairing; exact in any dtype."""
    spec = LAYOUTS[layout]
    sign = jnp.asarray([1, -1], x.dtype)
    half = x.shape[-1] // 2
    signs = jnp.tile(sign, half) if spec.pair_axis == -1 else jnp.repeat(sign, half)
    return spec.swap(x) * signs


@register("rope_pp")
@dataclasses.dataclass(frozen=True)
class RoPEPlusPlus(RoPE):
    """RoPE++: RoPE whose `imag_heads` score the imaginary part of the rotary product.

    imag_heads: "odd" (heads 1, 3, ...: the authors' interleaving), "second_half" or "all".
    Every RoPE hyperparameter applies (theta, layout, p, learned_freqs, scaling,
    logn_train_len: the authors extend the context with linear, NTK and YaRN scaling), except
    partial rotary (`fraction` < 1: the pass-through dims have no imaginary part) and
    ReRoPE's two-pass score (rerope_window and what needs it).
    """

    imag_heads: str = "odd"

    def __post_init__(self):
        super().__post_init__()
        if self.imag_heads not in IMAGINARY_HEADS:
            raise unknown("rope_pp imag_heads", self.imag_heads, IMAGINARY_HEADS)
        if self.fraction != 1.0:
            raise ConfigError(
                f"rope_pp fraction={self.fraction}: the pass-through dims of partial rotary "
                "have no imaginary part; use fraction=1.0 (or p < 1 to leave pairs unrotated)")
        if self.rerope_window:
            raise ConfigError(
                "rope_pp cannot take rerope_window: ReRoPE replaces the query/key site RoPE++ "
                "turns; use encoding=rope for ReRoPE")

    def imaginary(self, num_heads: int) -> np.ndarray:
        """bool[H]: the heads that score the imaginary part."""
        return IMAGINARY_HEADS[self.imag_heads](num_heads)

    def check(self, dims: Dims) -> None:
        super().check(dims)
        if not self.imaginary(dims.num_heads).any():
            raise ConfigError(
                f"rope_pp imag_heads={self.imag_heads} makes none of {dims.num_heads} heads "
                "imaginary: use imag_heads=all or at least 2 heads")

    def _rotate(self, params, q, k, q_pos, k_pos):
        """q: [B, Lq, H, Dh], k: [B, Lk, H, Dh] rotated by their own positions; the query of
        each imaginary head turned a further -pi/2."""
        q, k = super()._rotate(params, q, k, q_pos, k_pos)
        imag = jnp.asarray(self.imaginary(q.shape[-2]))[:, None]
        return jnp.where(imag, quarter_turn(q, self.layout), q), k
