"""PoPE: polar coordinate position embedding (Gopalakrishnan et al. 2025, arXiv 2509.10534).

Each of the R = round(fraction * Dh) leading components c of a query or key becomes a complex
number whose magnitude comes from the content alone, `softplus(q_c)`, and whose phase comes
from the position alone, `m * theta_c` with `theta_c = theta^(-c/R)` (R frequencies, one per
component, not RoPE's R/2 per pair), so "what" and "where" no longer mix as they do when RoPE
rotates pairs of raw components. The key's phase also carries a learned offset `delta[h, c]`,
clamped to [-2 pi, 0]. The score is the real part of the Hermitian product:

    s_mn = sum_c softplus(q_mc) softplus(k_nc) cos((n - m) theta_c + delta_hc)  (+ q_rest.k_rest)

so for fixed content it depends on the positions only through n - m (key minus query).

Site: the real form of each complex vector is 2R wide, twice the component count, and the
kernels take q and k at the head_dim they were projected to; so PoPE is the whole score at
the content-position site (`rel_score`, `replaces_content`), prepared once per sequence as
[L, 2R + Dh - R] query and key sides whose dot product is the score. The dense and chunked
kernels carry it; fused, flash_bias and linear attention refuse it by name at construction.

Matches lucidrains/PoPE-pytorch (`apply_pope_to_qk`, `PoPE`), a port of the paper, not the
authors' own code: frequencies theta^(-c/R), softplus magnitudes, the bias on the key's phase
clamped to [-2 pi, 0], initialised to 0 (`bias_init="uniform"`: U[-2 pi, 0], the port's
`bias_uniform_init`), scale 1/sqrt(Dh) of the original head_dim.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import ClassVar

import jax
import jax.numpy as jnp

from posjax.encoders import register
from posjax.encoders.base import Dims, Encoding, Params
from posjax.errors import ConfigError, unknown

__all__ = ["BIAS_INITS", "PoPE", "polar_frequencies", "polar_sides"]

TWO_PI = 2.0 * math.pi

# The phase bias's initialisers, float32[H, R] from (rng, shape).
BIAS_INITS: dict[str, Callable[[jax.Array, tuple[int, int]], jax.Array]] = {
    "zeros": lambda rng, shape: jnp.zeros(shape, jnp.float32),
    "uniform": lambda rng, shape: jax.random.uniform(rng, shape, jnp.float32, -TWO_PI, 0.0),
}


def polar_frequencies(dim: int, theta: float = 10000.0) -> jax.Array:
    """float32[dim]: theta^(-c/dim) for c = 0 .. dim - 1, one frequency per component."""
    return jnp.power(jnp.float32(theta), -jnp.arange(dim, dtype=jnp.float32) / dim)


def polar_sides(x: jax.Array, positions: jax.Array, inv_freq: jax.Array,
                phase_bias: jax.Array | None = None, scale: float = 1.0) -> jax.Array:
    """The real form of PoPE's complex vectors, so that a dot product is the score.

    x: [L, D]; positions: int[L]; inv_freq: float32[R], R <= D; phase_bias: float32[R] or
    None (added to the phase: the key side); scale multiplies the whole side (the query's
    1/sqrt(Dh)). -> [L, 2R + D - R] in x.dtype: scale * [softplus(x_c) cos(phi_c),
    softplus(x_c) sin(phi_c), x_rest], phi = pos * inv_freq (+ bias), computed in float32.
    """
    rot = inv_freq.shape[-1]
    phase = positions.astype(jnp.float32)[:, None] * inv_freq.astype(jnp.float32)
    if phase_bias is not None:
        phase = phase + phase_bias
    magnitude = jax.nn.softplus(x[:, :rot].astype(jnp.float32))
    sides = [magnitude * jnp.cos(phase), magnitude * jnp.sin(phase),
             x[:, rot:].astype(jnp.float32)]
    return (jnp.concatenate(sides, axis=-1) * scale).astype(x.dtype)


@register("pope")
@dataclasses.dataclass(frozen=True)
class PoPE(Encoding):
    """PoPE (arXiv 2509.10534; as ported by lucidrains/PoPE-pytorch): content magnitudes,
    position phases, a learned phase offset per head and component.

    theta: the base of theta_c = theta^(-c/R).
    fraction: the share of each head in polar form, R = round(fraction * Dh); the other
        components enter the score as a plain dot product (the port's partial rotation).
    bias_init: "zeros" (the port's default) or "uniform" on [-2 pi, 0].
    Params {"bias": float32[H, R]}, clamped to [-2 pi, 0] where used (zero gradient outside,
    as torch.clamp).
    """

    theta: float = 10000.0
    fraction: float = 1.0
    bias_init: str = "zeros"
    replaces_content: ClassVar[bool] = True

    def __post_init__(self):
        if not self.theta > 0:
            raise ConfigError(f"pope theta must be > 0, got {self.theta}: the usual base is 10000")
        if not 0.0 < self.fraction <= 1.0:
            raise ConfigError(f"pope fraction={self.fraction} must be in (0, 1]: the share of "
                              "each head in polar form (1.0 = all)")
        if self.bias_init not in BIAS_INITS:
            raise unknown("pope bias_init", self.bias_init, BIAS_INITS)

    def polar_dim(self, head_dim: int) -> int:
        """R: the components in polar form."""
        return round(self.fraction * head_dim)

    def check(self, dims: Dims) -> None:
        super().check(dims)
        if self.polar_dim(dims.head_dim) < 1:
            raise ConfigError(f"pope fraction={self.fraction} puts no component of head_dim "
                              f"{dims.head_dim} in polar form: use fraction >= "
                              f"{1 / dims.head_dim:.3g}")

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        shape = (dims.num_heads, self.polar_dim(dims.head_dim))
        return {"bias": BIAS_INITS[self.bias_init](rng, shape)}

    def rel_score(self, params, q, k, q_pos, k_pos, head):
        """PoPE's whole score float32[Lq, Lk] for one example and head (q: [Lq, Dh]),
        1/sqrt(Dh) included."""
        sides = self.rel_prepare(params, q, k, q_pos, k_pos, head)
        return self.prepared_score(params, *sides, q_pos, k_pos, head)

    def rel_prepare(self, params, q, k, q_pos, k_pos, head):
        """-> (q side [Lq, 2R + Dh - R] times 1/sqrt(Dh), k side [Lk, 2R + Dh - R]), once per
        sequence, so a block's score is one matmul."""
        head_dim = q.shape[-1]
        inv_freq = polar_frequencies(self.polar_dim(head_dim), self.theta)
        bias = jnp.clip(params["bias"][head].astype(jnp.float32), -TWO_PI, 0.0)
        q_side = polar_sides(q, q_pos, inv_freq, scale=self.logit_scale(head_dim))
        return q_side, polar_sides(k, k_pos, inv_freq, bias)

    def prepared_score(self, params, q_side, k_side, q_pos, k_pos, head):
        del params, q_pos, k_pos, head
        return jnp.matmul(q_side, k_side.T, preferred_element_type=jnp.float32)
