"""Flax NNX models: `build_model(model_cfg, encoding, kind=..., ...)`.

Kinds (`KINDS`, by `model.kind`): "causal_lm" (CausalLM), "mlm" (MLMEncoder), "patch2d"
(PatchModel); each is one class registered with `@register(name)`. All share the pre-norm
block in `posjax.models.layers` and take the encoding object from `posjax.encoders.get`.
"""

from posjax.models.layers import MLPS, NORMS, Block, ModelConfig
from posjax.models.transformer import (
    KINDS,
    Backbone,
    CausalLM,
    MLMEncoder,
    PatchModel,
    build_model,
    model_kind,
    register,
)

__all__ = [
    "KINDS",
    "MLPS",
    "NORMS",
    "Backbone",
    "Block",
    "CausalLM",
    "MLMEncoder",
    "ModelConfig",
    "PatchModel",
    "build_model",
    "model_kind",
    "register",
]
