"""Multi-head latent attention with decoupled RoPE (DeepSeek-V2, arXiv 2405.04434, sec. 2.1).

Keys and values come from one latent c_KV per token, shared by the heads, and RoPE cannot
ride on them (a rotation between q and W_UK would stop W_UK being absorbed into W_Q at
inference), so the positions take their own dims: each head's query and key are
[rotated part | latent part], the rotated part of every key one projection shared by all
heads. Per token t, with Dh = R + Dn (R rotated, Dn = Dv from the latent):

    c_KV = RMSNorm(x W_DKV)                       [d_c]           (model.kv_lora_rank = d_c)
    k_C = c_KV W_UK,  v = c_KV W_UV               [H, Dn], [H, Dn]
    k_R = x W_KR                                  [R], the same for every head
    c_Q = RMSNorm(x W_DQ) (model.q_lora_rank = d_c' > 0), else x
    [q_R | q_C] = c_Q W_Q                         [H, R + Dn]
    q = [q_R | q_C],  k = [k_R | k_C]             softmax scale 1 / sqrt(Dh)

and the encoding rotates the first R dims of q and k as it would any head's (RoPE with
fraction = R / Dh, which RoPE rounds down to even dims: DeepSeek-V2 and V3 rotate R = 64 of
Dh = 192, fraction=0.34), so the positional part of a score is q_R . Rot(n - m) k_R. R is
the encoding's rotated width (`RoPE.rot_dim`); an encoding with no rotation (NoPE, a bias)
gets R = 0 and all of each key from the latent.
The order of the parts differs from DeepSeek's code (q_nope before q_pe): posjax's partial
rotary rotates the leading dims. The projections that read x (W_DKV, W_KR, W_DQ or the
full-rank W_Q) take model.qkv_bias; the up-projections from a latent take none, as in
DeepSeek's code.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from posjax.encoders import Encoding
from posjax.errors import ConfigError
from posjax.models.layers import Attention, ModelConfig, _rms_norm, dense


def rotated_width(encoding: Encoding, head_dim: int) -> int:
    """R: the dims of each query and key head that `encoding` rotates (RoPE's `rot_dim`),
    0 for an encoding that rotates none; ConfigError where no latent dims would be left or
    the encoding rotates without saying which dims."""
    if hasattr(encoding, "rot_dim"):
        width = encoding.rot_dim(head_dim)
    elif encoding.rotate is None:
        return 0
    else:
        raise ConfigError(
            f"model.kv_lora_rank: latent attention shares the rotated dims of the keys across "
            f"heads and reads which they are from RoPE's fraction; {encoding.name} rotates "
            "without one: use rope (with fraction < 1) or an encoding with no rotation")
    if width >= head_dim:
        raise ConfigError(
            f"model.kv_lora_rank: {encoding.name} rotates all {head_dim} dims of each head, "
            "leaving no key dims to the latent: give the encoding fraction < 1 (DeepSeek-V2 "
            "and V3 rotate 64 of 192 dims: fraction=0.34, rounded down to 64)")
    return width


class LatentAttention(Attention):
    """Attention whose keys and values come from a latent of model.kv_lora_rank dims and whose
    keys' rotated dims are one projection shared by the heads (module docstring). Params:
    kv_down [D, d_c] and kv_norm, key_up and value_up [d_c, H, Dn], key_rope [D, 1, R]
    (R > 0), q_down [D, d_c'] and q_norm with model.q_lora_rank, query [d_c' or D, H, Dh]."""

    def _projections(self, cfg: ModelConfig, encoding: Encoding, rngs: nnx.Rngs) -> int:
        head_dim = cfg.resolved_head_dim
        self.rotated = rotated_width(encoding, head_dim)
        latent_dim = head_dim - self.rotated
        self.kv_down = dense(cfg.d_model, cfg.kv_lora_rank, cfg, rngs, use_bias=cfg.qkv_bias)
        self.kv_norm = _rms_norm(cfg.kv_lora_rank, cfg, rngs)
        self.key_up = dense(cfg.kv_lora_rank, (cfg.num_heads, latent_dim), cfg, rngs,
                            use_bias=False)
        self.value_up = dense(cfg.kv_lora_rank, (cfg.num_heads, latent_dim), cfg, rngs,
                              use_bias=False)
        self.key_rope = (dense(cfg.d_model, (1, self.rotated), cfg, rngs, use_bias=cfg.qkv_bias)
                         if self.rotated else None)
        if cfg.q_lora_rank:
            self.q_down = dense(cfg.d_model, cfg.q_lora_rank, cfg, rngs, use_bias=cfg.qkv_bias)
            self.q_norm = _rms_norm(cfg.q_lora_rank, cfg, rngs)
            self.query = dense(cfg.q_lora_rank, (cfg.num_heads, head_dim), cfg, rngs,
                               use_bias=False)
        else:
            self.q_down = self.q_norm = None
            self.query = dense(cfg.d_model, (cfg.num_heads, head_dim), cfg, rngs,
                               use_bias=cfg.qkv_bias)
        self.group = 1
        return latent_dim

    def project(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(q, k [B, L, H, Dh], v [B, L, H, Dn]) from x [B, L, D]: k[..., :R] the same for
        every head."""
        latent = self.kv_norm(self.kv_down(x))
        k, v = self.key_up(latent), self.value_up(latent)
        if self.key_rope is not None:
            shared = self.key_rope(x)  # [B, L, 1, R]
            k = jnp.concatenate([jnp.broadcast_to(shared, (*k.shape[:-1], self.rotated)), k],
                                axis=-1)
        q_in = x if self.q_down is None else self.q_norm(self.q_down(x))
        return self.query(q_in), k, v
