"""DAPE, data-adaptive positional encoding (Zheng et al., NeurIPS 2024, "DAPE: Data-Adaptive
Positional Encoding for Length Extrapolation"; chuanyang-zheng/DAPE).

A static bias B (ALiBi, KERPLE or FIRE) is corrected by the content of each query-key pair:

    logits_h(i, j) = A_h(i, j) + B_h(i, j) + f([A(i, j); B(i, j)])_h,

A = q.k / sqrt(Dh), and f a two-layer MLP with LeakyReLU from the 2H logits and biases of a
pair to H corrections, the same for every pair. Because f reads every head of a pair, DAPE
uses the cross-head site (posjax.encoders.base), which the dense and chunked kernels carry
with the heads together (posjax.attention.mixing).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from posjax import encoders
from posjax.encoders import register
from posjax.encoders.base import Dims, Encoding, Params
from posjax.encoders.content import _linear
from posjax.encoders.relative import FIRE_ACTIVATIONS
from posjax.errors import ConfigError, unknown

# The static biases DAPE's paper builds on (its B): encodings whose only site is the bias.
BASES = ("alibi", "kerple_log", "kerple_power", "fire")
# Bases with an activation: the one DAPE gives them when `base_activation` is None (the DAPE
# authors' choice) and the names it may take.
BASE_ACTIVATION = {"fire": ("leaky_relu", tuple(FIRE_ACTIVATIONS))}


@register("dape")
@dataclasses.dataclass(frozen=True)
class DAPE(Encoding):
    """Logits A + B + f([A; B]): a static bias B and an MLP f across the heads of each pair.

    B comes from `base`, one of BASES.

    width: the MLP's hidden width (the paper's D_DAPE, 32 by default); its layers start as
    PyTorch's nn.Linear (U(+-1/sqrt(fan_in))). bidirectional: passed to a base that has it
    (ALiBi); None follows the model. base_activation: the activation of a base that has one
    (FIRE's MLP: posjax.encoders.relative.FIRE_ACTIVATIONS); None (default) is the DAPE
    authors' choice, BASE_ACTIVATION: their FIRE inside DAPE (chuanyang-zheng/DAPE,
    FIRE_DAPE and FIRE_C) uses LeakyReLU where plain FIRE (the FIRE paper, and its authors'
    plain FIRE class) uses ReLU, and DAPE's numbers come from that code; base_activation=relu
    is DAPE on posjax's plain `fire`. A base without an activation refuses a value.
    params: {"base": the base's, "w1" [2H, width], "b1" [width], "w2" [width, H], "b2" [H]}.
    """

    base: str = "kerple_log"
    width: int = 32
    bidirectional: bool | None = None
    base_activation: str | None = None

    def __post_init__(self):
        if self.base not in BASES:
            raise ConfigError(f"dape base={self.base!r} is not a static bias DAPE builds on; "
                              f"use one of {', '.join(BASES)}")
        if self.width < 1:
            raise ConfigError(f"dape width={self.width} must be >= 1 (the paper: 32)")
        if self.base_activation is None:
            return
        if self.base not in BASE_ACTIVATION:
            raise ConfigError(
                f"dape base_activation={self.base_activation!r}: base={self.base!r} has no "
                f"activation; drop it or use base={' or '.join(BASE_ACTIVATION)}")
        if self.base_activation not in BASE_ACTIVATION[self.base][1]:
            raise unknown(f"dape base_activation (base={self.base})", self.base_activation,
                          BASE_ACTIVATION[self.base][1])

    @property
    def bias_encoding(self) -> Encoding:
        """The base encoding B comes from, with the direction and activation DAPE gives it."""
        takes = encoders.hparams(self.base)
        hparams = {"bidirectional": self.bidirectional} if "bidirectional" in takes else {}
        if self.base in BASE_ACTIVATION:
            hparams["activation"] = self.base_activation or BASE_ACTIVATION[self.base][0]
        return encoders.get(self.base, **hparams)

    @property
    def causal_only(self) -> bool:  # type: ignore[override]
        return self.bias_encoding.causal_only

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        k_base, k_w1, k_b1, k_w2, k_b2 = jax.random.split(rng, 5)
        heads, width = dims.num_heads, self.width
        return {"base": self.bias_encoding.init(k_base, dims),
                "w1": _linear(k_w1, 2 * heads, (2 * heads, width)),
                "b1": _linear(k_b1, 2 * heads, (width,)),
                "w2": _linear(k_w2, width, (width, heads)),
                "b2": _linear(k_b2, width, (heads,))}

    def bias(self, params: Params, q_pos, k_pos, num_heads: int) -> jax.Array:
        """float32[H, Lq, Lk]: the base's static bias B."""
        return self.bias_encoding.bias(params["base"], q_pos, k_pos, num_heads)

    def mix_logits(self, params: Params, logits, bias):
        """float32[H, lq, lk]: f([A; B]) of every pair, from logits A and bias B [H, lq, lk]."""
        features = jnp.concatenate([logits, bias], axis=0).astype(jnp.float32)
        hidden = jnp.einsum("fqk,fw->wqk", features, params["w1"]) + params["b1"][:, None, None]
        hidden = jax.nn.leaky_relu(hidden, negative_slope=0.01)
        return jnp.einsum("wqk,wh->hqk", hidden, params["w2"]) + params["b2"][:, None, None]
