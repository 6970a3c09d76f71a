"""Flax NNX models: `build_model(model_cfg, encoding, kind=..., ...)`.

Kinds: "causal_lm" (CausalLM), "mlm" (MLMEncoder), "patch2d" (PatchModel); all share the
pre-norm block in `posjax.models.layers` and take the encoding object from
`posjax.encoders.get`.
"""

from posjax.models.layers import MLPS, NORMS, Block, ModelConfig
from posjax.models.transformer import (
    MODELS,
    Backbone,
    CausalLM,
    MLMEncoder,
    PatchModel,
    build_model,
    position_axes,
)

__all__ = [
    "MLPS",
    "MODELS",
    "NORMS",
    "Backbone",
    "Block",
    "CausalLM",
    "MLMEncoder",
    "ModelConfig",
    "PatchModel",
    "build_model",
    "position_axes",
]
