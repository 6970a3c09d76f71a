"""Initialisation conventions of the model's own weights, by the name users pass as
`model.init`.

A convention sets the token embedding (and DeBERTa's absolute table, model.absolute_last_layers)
and every projection the model builds with `posjax.models.layers.dense` (attention, MLP, heads,
a recurrent layer's projections). Under every convention normalisation layers start at scale
1 and offset 0, and an encoding's parameters start as the encoding says (T5's table:
its `init_std`), so comparing conventions changes the network around the encoding only.

    posjax   (default) embeddings N(0, 0.02^2); kernels lecun-normal (a truncated normal of
             variance 1 / fan_in, Flax's default); biases 0.
    gpt2     GPT-2 (Radford et al. 2019; Hugging Face's GPT2PreTrainedModel._init_weights):
             N(0, 0.02^2) for embeddings and kernels, and for the projections that write into
             the residual stream (attention output, MLP down, the "c_proj" weights) N(0,
             (0.02 / sqrt(2 num_layers))^2); biases 0.
    pytorch  PyTorch's module defaults: nn.Embedding N(0, 1); nn.Linear's kaiming_uniform
             with a = sqrt(5), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for kernels and
             biases alike.
    xtransformers  x-transformers' (TransformerWrapper): token embeddings re-drawn by
             TokenEmbedding.init_ with kaiming_normal_, N(0, 2 / D) (fan_in = D, gain
             sqrt(2)); its linear layers keep PyTorch's defaults, as `pytorch`.

fan_in is the product of a projection's input axes (H * Dh for the attention output), as
nnx.LinearGeneral flattens them.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from collections.abc import Callable, Iterator

import jax.numpy as jnp
from flax import nnx
from jax.nn.initializers import Initializer

STD = 0.02  # GPT-2's and BERT's initializer_range


@dataclasses.dataclass(frozen=True)
class Convention:
    """One initialisation convention.

    embedding: the initializer of embedding tables [rows, D].
    kernel(residual, num_layers): the initializer of a projection's kernel, called with the
      flattened shape [fan_in, fan_out]; residual is True for a projection that writes into
      the residual stream.
    bias(fan_in): the initializer of that projection's bias [fan_out].
    """

    embedding: Initializer
    kernel: Callable[[bool, int], Initializer]
    bias: Callable[[int], Initializer]


def _gpt2_kernel(residual: bool, num_layers: int) -> Initializer:
    return nnx.initializers.normal(STD / math.sqrt(2 * num_layers) if residual else STD)


def _pytorch_bias(fan_in: int) -> Initializer:
    bound = 1.0 / math.sqrt(fan_in)
    return lambda key, shape, dtype=jnp.float32: nnx.initializers.uniform(2 * bound)(
        key, shape, dtype) - bound


INITS: dict[str, Convention] = {
    "posjax": Convention(
        embedding=nnx.initializers.normal(stddev=STD),
        kernel=lambda residual, num_layers: nnx.initializers.lecun_normal(),
        bias=lambda fan_in: nnx.initializers.zeros_init(),
    ),
    "gpt2": Convention(
        embedding=nnx.initializers.normal(stddev=STD),
        kernel=_gpt2_kernel,
        bias=lambda fan_in: nnx.initializers.zeros_init(),
    ),
    "pytorch": Convention(
        embedding=nnx.initializers.normal(stddev=1.0),
        # kaiming_uniform(a=sqrt(5)): bound = sqrt(6 / (1 + a^2) / fan_in) = 1 / sqrt(fan_in)
        kernel=lambda residual, num_layers: nnx.initializers.variance_scaling(
            1.0 / 3.0, "fan_in", "uniform"),
        bias=_pytorch_bias,
    ),
}
INITS["xtransformers"] = dataclasses.replace(
    INITS["pytorch"], embedding=nnx.initializers.variance_scaling(2.0, "fan_out", "normal",
                                                                  in_axis=0, out_axis=1))

# A convention whose every initializer gives zeros: what `shapes_only` builds with.
_ZEROS = Convention(embedding=nnx.initializers.zeros_init(),
                    kernel=lambda residual, num_layers: nnx.initializers.zeros_init(),
                    bias=lambda fan_in: nnx.initializers.zeros_init())
_SHAPES_ONLY = contextvars.ContextVar("shapes_only", default=False)


@contextlib.contextmanager
def shapes_only() -> Iterator[None]:
    """Within it every convention initialises with zeros, of the same shapes and dtypes, for
    a build whose values are never read (posjax.models.abstract_model): its trace then holds
    one operation per weight instead of a draw's dozens (a truncated normal's). The rng
    streams advance as in a real build: each layer still takes its key."""
    token = _SHAPES_ONLY.set(True)
    try:
        yield
    finally:
        _SHAPES_ONLY.reset(token)


def convention(name: str) -> Convention:
    """The convention `name` of INITS (model.init, which ModelConfig checks), zeros inside
    `shapes_only`."""
    return _ZEROS if _SHAPES_ONLY.get() else INITS[name]
