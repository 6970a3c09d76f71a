"""VO-RoPE (Su 2025, the "second kind" of rotary position encoding): positions in the values.

Each value is rotated by its key's position and the attention output by the inverse rotation
at the query's position,

    o_i = R_i^T sum_j a_ij R_j v_j = sum_j a_ij R_{j-i} v_j,

so what a query aggregates carries the relative position of each key, as RoPE's q.k does for
the weights. The rotation is RoPE's (the same theta, layout, fraction, p and scaling). Two
names: `vo_rope` rotates only values and outputs (the weights see no position, NoPE-like),
`qkvo_rope` also rotates q and k as RoPE does.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from posjax.encoders import register
from posjax.encoders.base import Params
from posjax.encoders.rotary import RoPE, apply_rotary
from posjax.errors import ConfigError


@register("qkvo_rope")
@dataclasses.dataclass(frozen=True)
class RoPEWithValues(RoPE):
    """RoPE on q and k, values rotated by the key's position and outputs back by the query's."""

    def __post_init__(self):
        super().__post_init__()
        if self.rerope_window:
            raise ConfigError(
                f"{self.name} rerope_window={self.rerope_window}: ReRoPE's capped distances "
                "would hold for the weights but not for the rotated values; use rope with "
                "rerope_window"
            )

    def _value_freq(self, params: Params, head_dim: int, positions: jax.Array) -> jax.Array:
        return self._inv_freq(params, head_dim, jnp.max(positions) + 1)

    def rotate_value(self, params: Params, v, k_pos):
        """v: [B, Lk, H, Dv] rotated by the keys' positions k_pos int32[B, Lk]."""
        return apply_rotary(v, k_pos, self._value_freq(params, v.shape[-1], k_pos), self.layout)

    def unrotate_output(self, params: Params, out, q_pos, k_pos):
        """out: [B, Lq, H, Dv] rotated back by the queries' positions q_pos int32[B, Lq], with
        the frequencies the values turned by (a dynamic map's length is the keys', k_pos)."""
        inv_freq = self._value_freq(params, out.shape[-1], k_pos)
        return apply_rotary(out, -q_pos, inv_freq, self.layout)


@register("vo_rope")
@dataclasses.dataclass(frozen=True)
class ValueRoPE(RoPEWithValues):
    """VO-RoPE alone: values rotated by the key's position, outputs back by the query's."""

    def __post_init__(self):
        super().__post_init__()
        if self.temperature_floor:
            raise ConfigError(
                f"vo_rope temperature_floor={self.temperature_floor}: VO-RoPE leaves q and k "
                "as they are, so the query temperature would change nothing; use qkvo_rope or "
                "rope with temperature_floor")

    @property
    def rotate(self):
        return None
