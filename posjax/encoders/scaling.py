"""Length extension for RoPE at inference: frequency maps and log-n query scaling.

A frequency map turns RoPE's inverse frequencies `theta_i = theta^(-2i/d)` into the ones a
model should use past its training length L_train. The maps are configured with a mapping in
Hugging Face's `rope_scaling` format, accepted as is (a dict, a ConfigDict, or a tuple of
(key, value) pairs, which is how hashable encodings store it):

    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512, ...}

The older key "type" is read when "rope_type" is absent. Keys a map does not use are ignored,
so a `rope_scaling` block copied from a Hugging Face config works unchanged. Every map is the
identity at factor 1 (dynamic: also at any factor while the current length is <= L_train).
The maps live in the string-keyed registry `SCALINGS`; `s` below is the factor.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from posjax.encoders.base import inverse_frequencies
from posjax.errors import ConfigError, unknown

ScalingConfig = Mapping[str, Any] | tuple[tuple[str, Any], ...]

_REQUIRED = object()


def as_dict(scaling: ScalingConfig) -> dict[str, Any]:
    """A plain dict copy of a `rope_scaling` mapping or of its tuple-of-items form."""
    items = scaling.items() if hasattr(scaling, "items") else scaling
    return dict(items)


def freeze(scaling: ScalingConfig | None) -> tuple[tuple[str, Any], ...] | None:
    """The hashable form of a `rope_scaling` mapping: its items sorted by key (None stays None)."""
    if scaling is None:
        return None
    return tuple(sorted(as_dict(scaling).items()))


def scaling_type(scaling: ScalingConfig) -> str:
    """The map's name: `rope_type`, else the older `type`; unknown names are a ConfigError."""
    cfg = as_dict(scaling)
    kind = cfg.get("rope_type", cfg.get("type"))
    if kind is None:
        raise ConfigError(
            f"rope_scaling {cfg} has no 'rope_type': add one of {', '.join(sorted(SCALINGS))}"
        )
    if kind not in SCALINGS:
        raise unknown("rope_scaling type", kind, SCALINGS)
    return kind


def _get(cfg: Mapping[str, Any], key: str, kind: str, default: Any = _REQUIRED) -> float:
    # HF configs write an absent optional value as null, so None falls back to the default.
    value = cfg.get(key)
    if value is None:
        if default is _REQUIRED:
            raise ConfigError(f"rope_scaling type {kind!r} needs {key!r}: add it to the mapping")
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"rope_scaling {key!r} must be a number, got {value!r}")
    return float(value)


def _factor(cfg: Mapping[str, Any], kind: str, default: Any = _REQUIRED) -> float:
    s = _get(cfg, "factor", kind, default)
    if s < 1.0:
        raise ConfigError(
            f"rope_scaling factor {s} < 1: the factor is new length / trained length, use >= 1"
        )
    return s


def _train_len(cfg: Mapping[str, Any], kind: str, default: Any = _REQUIRED) -> float:
    length = _get(cfg, "original_max_position_embeddings", kind, default)
    if length < 1:
        raise ConfigError(
            f"rope_scaling original_max_position_embeddings={length:g} must be the training "
            "length (>= 1)"
        )
    return length


def _ntk_exponent(dim: int, kind: str) -> float:
    if dim <= 2:
        raise ConfigError(
            f"rope_scaling type {kind!r} needs a rotary dim > 2 (its exponent is d/(d-2)), "
            f"got {dim}: raise head_dim or the rotary fraction"
        )
    return dim / (dim - 2)


def _default(dim, theta, cfg, seq_len):
    """Hugging Face's "default": plain RoPE."""
    del cfg, seq_len
    return inverse_frequencies(dim, theta)


def _linear(dim, theta, cfg, seq_len):
    """Position Interpolation (Chen et al. 2023): m -> m / s, i.e. every frequency / s."""
    del seq_len
    return inverse_frequencies(dim, theta) / _factor(cfg, "linear")


def _ntk(dim, theta, cfg, seq_len):
    """NTK-aware scaling (bloc97 2023): base -> base * s^(d/(d-2)).

    The exponent makes the lowest frequency exactly interpolated (divided by s) while the
    highest stays put.
    """
    del seq_len
    s = _factor(cfg, "ntk")
    return inverse_frequencies(dim, theta * s ** _ntk_exponent(dim, "ntk"))


def _dynamic(dim, theta, cfg, seq_len):
    """Dynamic NTK (Hugging Face): base * ((s L / L_train) - (s - 1))^(d/(d-2)) when L > L_train.

    L is the current length `seq_len` (a Python int or a traced scalar); None means "not longer
    than training", which is plain RoPE. At L = L_train the new base equals the old one, so the
    map is continuous in L.
    """
    s = _factor(cfg, "dynamic")
    train = _train_len(cfg, "dynamic")
    exponent = _ntk_exponent(dim, "dynamic")
    if seq_len is None:
        return inverse_frequencies(dim, theta)
    length = jnp.asarray(seq_len, jnp.float32)
    # The floor keeps the branch jnp.where discards free of NaNs (a negative base to a power).
    grown = jnp.maximum(s * length / train - (s - 1.0), 1.0)
    base = jnp.where(length > train, theta * grown**exponent, theta)
    return inverse_frequencies(dim, base)


def _yarn_ramp_bounds(dim, theta, train, beta_fast, beta_slow, truncate):
    # The pair i whose wavelength 2 pi / theta_i fits `rotations` times in L_train solves
    # L_train theta^(-2i/d) = 2 pi rotations: i = d ln(L_train / (2 pi rotations)) / (2 ln theta).
    def index(rotations):
        return dim * math.log(train / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = index(beta_fast), index(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    # Hugging Face widens an empty ramp so the division below stays finite.
    return low, (high + 0.001 if high == low else high)


def _yarn(dim, theta, cfg, seq_len):
    """YaRN (Peng et al. 2023), frequency part, as Hugging Face computes it.

    The ramp runs over the pair index i: gamma_i = 1 - clip((i - low) / (high - low), 0, 1),
    where low/high are the indices turning beta_fast (32) / beta_slow (1) times over L_train;
    `theta_i' = (1 - gamma_i) theta_i / s + gamma_i theta_i`: fast pairs extrapolate, slow
    pairs interpolate. The attention part is `attention_factor`.
    """
    del seq_len
    s = _factor(cfg, "yarn")
    train = _train_len(cfg, "yarn")
    beta_fast = _get(cfg, "beta_fast", "yarn", 32.0)
    beta_slow = _get(cfg, "beta_slow", "yarn", 1.0)
    low, high = _yarn_ramp_bounds(
        dim, theta, train, beta_fast, beta_slow, bool(cfg.get("truncate", True))
    )
    ramp = jnp.clip((jnp.arange(dim // 2, dtype=jnp.float32) - low) / (high - low), 0.0, 1.0)
    gamma = 1.0 - ramp
    plain = inverse_frequencies(dim, theta)
    return (1.0 - gamma) * plain / s + gamma * plain


def _mscale(s: float, mscale: float = 1.0) -> float:
    return 1.0 if s <= 1.0 else 0.1 * mscale * math.log(s) + 1.0


def _yarn_attention(cfg):
    """YaRN's logit temperature: `attention_factor` if given, else 0.1 ln s + 1.

    With DeepSeek's `mscale` and `mscale_all_dim` both set, the ratio of the two mscales
    (Hugging Face's rule). Logits are multiplied by the square of the returned value.
    """
    s = _factor(cfg, "yarn")
    if cfg.get("attention_factor") is not None:
        return _get(cfg, "attention_factor", "yarn")
    mscale, mscale_all = cfg.get("mscale"), cfg.get("mscale_all_dim")
    if mscale and mscale_all:
        return _mscale(s, float(mscale)) / _mscale(s, float(mscale_all))
    return _mscale(s)


def _llama3(dim, theta, cfg, seq_len):
    """Llama 3.1's frequency bands (Meta 2024), as Hugging Face computes them.

    Wavelengths above L_old / low_freq_factor are divided by s, those below
    L_old / high_freq_factor kept, and in between `(1 - a) theta_i / s + a theta_i` with
    `a = (L_old / wavelength - low) / (high - low)`. Defaults: s = 8, low = 1, high = 4,
    L_old = 8192.
    """
    del seq_len
    s = _factor(cfg, "llama3", 8.0)
    low = _get(cfg, "low_freq_factor", "llama3", 1.0)
    high = _get(cfg, "high_freq_factor", "llama3", 4.0)
    old = _train_len(cfg, "llama3", 8192.0)
    if high <= low:
        raise ConfigError(
            f"rope_scaling llama3 needs high_freq_factor > low_freq_factor, got {high:g} <= {low:g}"
        )
    plain = inverse_frequencies(dim, theta)
    wavelength = 2.0 * math.pi / plain
    blend = (old / wavelength - low) / (high - low)
    smoothed = (1.0 - blend) * plain / s + blend * plain
    outer = jnp.where(wavelength > old / low, plain / s, plain)
    medium = (wavelength >= old / high) & (wavelength <= old / low)
    return jnp.where(medium, smoothed, outer)


@dataclasses.dataclass(frozen=True)
class ScalingMap:
    """One registry entry: the frequency map and the attention (logit temperature) factor.

    inv_freq(dim, theta, cfg, seq_len) -> float32[dim // 2]; attention(cfg) -> float.
    """

    inv_freq: Callable[[int, float, Mapping[str, Any], Any], jax.Array]
    attention: Callable[[Mapping[str, Any]], float] = lambda cfg: 1.0


SCALINGS: dict[str, ScalingMap] = {
    "default": ScalingMap(_default),
    "linear": ScalingMap(_linear),
    "ntk": ScalingMap(_ntk),
    "dynamic": ScalingMap(_dynamic),
    "yarn": ScalingMap(_yarn, _yarn_attention),
    "llama3": ScalingMap(_llama3),
}


def scaled_inv_freq(
    dim: int, theta: float, scaling: ScalingConfig | None, seq_len: Any = None
) -> jax.Array:
    """Inverse frequencies float32[dim // 2] after the `rope_scaling` map (plain RoPE for None).

    dim: the rotary dimension; theta: the base (a Python float); seq_len: the current length,
    read by "dynamic" only (a Python int, a traced jnp scalar, or None).
    """
    if scaling is None:
        return inverse_frequencies(dim, theta)
    return SCALINGS[scaling_type(scaling)].inv_freq(dim, theta, as_dict(scaling), seq_len)


def attention_factor(scaling: ScalingConfig | None) -> float:
    """The factor on q and on k (logits scale by its square): YaRN's 0.1 ln s + 1, else 1.0."""
    if scaling is None:
        return 1.0
    return float(SCALINGS[scaling_type(scaling)].attention(as_dict(scaling)))


def validate(scaling: ScalingConfig | None, dim: int = 64, theta: float = 10000.0) -> None:
    """Raise a one-line ConfigError now if `scaling` would fail when used at this size.

    Evaluating the map reads every key it needs, so this checks the same rules it applies.
    """
    if scaling is None:
        return
    if not hasattr(scaling, "items") and not isinstance(scaling, tuple):
        raise ConfigError(
            f"rope_scaling must be a mapping like {{'rope_type': 'linear', 'factor': 4.0}}, "
            f"got {scaling!r}"
        )
    scaled_inv_freq(dim, theta, scaling, seq_len=None)
    attention_factor(scaling)


def logn_scale(positions: jax.Array, train_len: int) -> jax.Array:
    """Log-n query scale float32[..., L] for positions [..., L] (Su, entropy-invariant attention).

    `max(1, log(n) / log(L_train))` with n = position + 1: positions are 0-based, so n is the
    number of tokens a causal query at that position sees (itself included), and n >= 1 keeps
    the logarithm defined at position 0. Queries within the training length are unchanged.
    """
    if train_len < 2:
        raise ConfigError(f"log-n scaling needs a training length >= 2, got {train_len}")
    n = positions.astype(jnp.float32) + 1.0
    return jnp.maximum(1.0, jnp.log(n) / math.log(train_len))
