"""FoPE: Fourier Position Embedding (Hua et al., ICML 2025, "Fourier Position Embedding:
Enhancing Attention's Periodic Extension for Length Generalization"; code
TsinghuaC3I/Fourier-Position-Embedding, on OLMo).

RoPE turns pair i of a query or key at position m by one frequency w_i. FoPE makes each pair a
Fourier series of several frequencies: its cosine and sine become

    C_hi(m) = sum_j A_hji cos(m w_j),    S_hi(m) = sum_j B_hji sin(m w_j)

and the pair (a, b) maps to (a C - b S, b C + a S), the same map on queries and keys. The
frequencies are RoPE's w_j = theta^(-2j/Dh) clipped: those below 2 pi / L_train (that do not
complete a period within the training length) are zeroed and dropped, leaving the D highest.
The coefficients A, B (float32[H, D, d], d = min(D, Dh/4), one set per head and per layer)
start as a strided identity (pair i on frequency i * ceil(D/d)) plus Xavier-normal noise of
gain `init_gain`; the other Dh/2 - d pairs take no position. Those follow the authors' code:
it pads their C and S with 1, so such a pair (a, b) becomes (a - b, b + a) on queries and
keys alike: a position-free map that doubles their part of q.k.

With noise the score is no longer a function of n - m alone (the cross terms of two series);
with init_gain 0 and D <= Dh/4 it is RoPE on the kept frequencies. Query/key site: every
kernel carries it.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from posjax.encoders import register
from posjax.encoders.base import Dims, Encoding, Params, inverse_frequencies
from posjax.encoders.rotary import LAYOUTS, frequencies, rotate_with_tables
from posjax.errors import ConfigError, unknown

__all__ = ["FoPE", "kept_frequencies", "pair_tables", "strided_identity"]


def kept_frequencies(head_dim: int, theta: float, max_len: int) -> int:
    """D: how many of RoPE's Dh/2 frequencies (decreasing) complete a period within max_len,
    w_j >= 2 pi / max_len; the others are clipped to zero."""
    # NumPy, not jax: init may run under a trace (the model's jitted init), and D is a shape
    inv_freq = inverse_frequencies(head_dim, theta, xp=np).astype(np.float32)
    return int((inv_freq >= np.float32(2 * math.pi / max_len)).sum())


def strided_identity(num_freqs: int, num_pairs: int) -> np.ndarray:
    """float32[D, d]: 1 at (i * ceil(D/d), i) for each pair i whose index stays below D (the
    identity when D = d): pair i starts on frequency i * ceil(D/d)."""
    eye = np.zeros((num_freqs, num_pairs), np.float32)
    step = math.ceil(num_freqs / num_pairs)
    rows = np.arange(num_pairs) * step
    keep = rows < num_freqs
    eye[rows[keep], np.arange(num_pairs)[keep]] = 1.0
    return eye


def pair_tables(cos: jax.Array, sin: jax.Array, layout: str) -> tuple[jax.Array, jax.Array]:
    """(cos, sin) float32[..., R/2] per pair -> the full-width (cos, signed sin) tables
    [..., R] that `rotate_with_tables` takes: pair (a, b) gets (cos, cos) and (-sin, sin)."""
    if LAYOUTS[layout].pair_axis == -2:
        return jnp.concatenate([cos, cos], -1), jnp.concatenate([-sin, sin], -1)
    return (jnp.stack([cos, cos], -1).reshape(*cos.shape[:-1], -1),
            jnp.stack([-sin, sin], -1).reshape(*sin.shape[:-1], -1))


@register("fope")
@dataclasses.dataclass(frozen=True)
class FoPE(Encoding):
    """FoPE: each pair's cosine and sine a Fourier series over RoPE's clipped frequencies.

    theta: RoPE's base for the frequencies w_j = theta^(-2j/Dh).
    layout: "interleaved" pairs (2i, 2i+1) as posjax's RoPE, or "half" (i, i + Dh/2), the
        authors' rotate_half.
    init_gain: the Xavier-normal gain of the coefficients' noise (the authors' configs: 0.3
        at 60M, 0.4 at 180M, 0.6 at 1.2B parameters).
    learnable: True trains the coefficients as every posjax encoding parameter; False keeps
        them at their initial draw (stop_gradient), the authors' default
        (fourier_learnable=False). The model's decoupled weight decay still shrinks matrices
        of parameters without a gradient, so pair learnable=False with train.weight_decay=0.
    Params {"cos_coef", "sin_coef"}: float32[H, D, d] (A and B above), drawn from `rng`.
    """

    theta: float = 10000.0
    layout: str = "interleaved"
    init_gain: float = 0.3
    learnable: bool = True

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise unknown("fope layout", self.layout, LAYOUTS)
        if not self.theta > 0:
            raise ConfigError(f"fope theta must be > 0, got {self.theta}: the usual base is 10000")
        if not self.init_gain >= 0:
            raise ConfigError(f"fope init_gain={self.init_gain} must be >= 0 (the authors: 0.3)")

    def sizes(self, dims: Dims) -> tuple[int, int]:
        """(D kept frequencies, d Fourier pairs per head)."""
        kept = kept_frequencies(dims.head_dim, self.theta, dims.max_len)
        return kept, min(kept, dims.head_dim // 4)

    def check(self, dims: Dims) -> None:
        super().check(dims)
        if dims.head_dim % 2 or dims.head_dim < 4:
            raise ConfigError(f"fope needs an even head_dim >= 4 (Dh/4 Fourier pairs), got "
                              f"{dims.head_dim}")
        if self.sizes(dims)[0] == 0:
            raise ConfigError(
                f"fope keeps no frequency: none of theta={self.theta}'s completes a period "
                f"within the training length {dims.max_len} (2 pi / L = "
                f"{2 * math.pi / dims.max_len:.3g} > 1); train on longer sequences")

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        kept, pairs = self.sizes(dims)
        shape = (dims.num_heads, kept, pairs)
        # torch's xavier_normal_ on [H, D, d]: fan_in = D d, fan_out = H d
        std = self.init_gain * math.sqrt(2.0 / (kept * pairs + dims.num_heads * pairs))
        eye = jnp.asarray(strided_identity(kept, pairs))
        k_cos, k_sin = jax.random.split(rng)
        return {"cos_coef": eye + std * jax.random.normal(k_cos, shape, jnp.float32),
                "sin_coef": eye + std * jax.random.normal(k_sin, shape, jnp.float32)}

    def tables(self, params: Params, positions: jax.Array, head_dim: int):
        """positions [B, L] -> (cos, signed sin) float32[B, L, H, Dh] for rotate_with_tables."""
        coef = {n: params[n].astype(jnp.float32) for n in ("cos_coef", "sin_coef")}
        if not self.learnable:
            coef = lax.stop_gradient(coef)
        kept, pairs = coef["cos_coef"].shape[1:]
        angles = positions.astype(jnp.float32)[..., None] * frequencies(head_dim, self.theta)[
            :kept]

        def series(wave, c):
            return jnp.einsum("blj,hji->blhi", wave(angles), c, precision=lax.Precision.HIGHEST)

        cos, sin = series(jnp.cos, coef["cos_coef"]), series(jnp.sin, coef["sin_coef"])
        # the position-free pairs: the authors pad C and S with 1
        pad = jnp.ones((*cos.shape[:-1], head_dim // 2 - pairs), jnp.float32)
        return pair_tables(jnp.concatenate([cos, pad], -1), jnp.concatenate([sin, pad], -1),
                           self.layout)

    def rotate(self, params, q, k, q_pos, k_pos):
        """q: [B, Lq, H, Dh], k: [B, Lk, H, Dh] mapped by their own positions' series."""
        head_dim = q.shape[-1]
        q_tables = self.tables(params, q_pos, head_dim)
        k_tables = q_tables if k_pos is q_pos else self.tables(params, k_pos, head_dim)
        return (rotate_with_tables(q, q_tables, self.layout),
                rotate_with_tables(k, k_tables, self.layout))
