"""Flax NNX models: `build_model(model_cfg, encoding, kind=..., ...)`.

Kinds (`KINDS`, by `model.kind`): "causal_lm" (CausalLM), "mixed_lm" (MixedLM: text and
image tokens with multi-component positions), "mlm" (MLMEncoder), "classifier" (Classifier:
the MLM encoder's body with a pooled classification head, for fine-tuning), "patch2d"
(PatchModel); each is one class registered with `@register(name)`. All share the pre-norm block in
`posjax.models.layers` and take the encoding object from `posjax.encoders.get`.
"""

from posjax.models.layers import MLPS, NORMS, Block, ModelConfig
from posjax.models.transformer import (
    KINDS,
    Backbone,
    CausalLM,
    Classifier,
    MixedLM,
    MLMEncoder,
    PatchModel,
    abstract_model,
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
    "Classifier",
    "MixedLM",
    "MLMEncoder",
    "ModelConfig",
    "PatchModel",
    "abstract_model",
    "build_model",
    "model_kind",
    "register",
]
