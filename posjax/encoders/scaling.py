"""Length extension for RoPE at inference: frequency maps and log-n query scaling.

A frequency map turns RoPE's inverse frequencies `theta_i = theta^(-2i/d)` into the ones a
model should use past its training length L_train. The maps are configured with a mapping in
Hugging Face's `rope_scaling` format (or transformers v5's `rope_parameters`), accepted as is
(a dict, a ConfigDict, or a tuple of (key, value) pairs, which is how hashable encodings store
it):

    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512, ...}

Every key is either honoured or refused with a one-line ConfigError, never ignored:
  - the map's name, `rope_type`, or the older `type` (the two must agree when both are given);
  - `rope_theta` and `partial_rotary_factor` (v5 blocks): RoPE's base and rotary share are the
    encoding's own `theta` and `fraction`, so a block must repeat them or leave them out;
  - the training length L_train, `original_max_position_embeddings`, else
    `max_position_embeddings` (Hugging Face reads the model config's max_position_embeddings
    where the block has none; copy it into the block). Every map accepts both, since posjax's
    evaluation methods record L_train in every map they build; only dynamic, yarn and llama3
    read it;
  - the map's own keys, listed in its `ScalingMap.keys`. Anything else is refused.
A null value (Hugging Face's way to write "absent") counts as absent. Every map is the identity
at factor 1 (dynamic: also at any factor while the current length is <= L_train). The maps
live in the string-keyed registry `SCALINGS`; `s` below is the factor.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from posjax.encoders.base import inverse_frequencies
from posjax.errors import ConfigError, did_you_mean, unknown

ScalingConfig = Mapping[str, Any] | tuple[tuple[str, Any], ...]

_REQUIRED = object()
_ORIGINAL, _MAX = "original_max_position_embeddings", "max_position_embeddings"
# Keys any map accepts: its name, the encoding's own hyperparameters (checked by `validate`
# against theta and fraction), and the training length.
_COMMON = ("rope_type", "type", "rope_theta", "partial_rotary_factor", _ORIGINAL, _MAX)


def as_dict(scaling: ScalingConfig) -> dict[str, Any]:
    """A plain dict copy of a `rope_scaling` mapping or of its tuple-of-items form."""
    items = scaling.items() if hasattr(scaling, "items") else scaling
    return dict(items)


def parse(spec: ScalingConfig | str | None, train_len: int | None = None) -> dict | None:
    """A `rope_scaling` mapping from what a user writes, or None for "" / None:

        a mapping                                   as is (a copy)
        '{"rope_type": "yarn", "factor": 4, ...}'   a JSON object, e.g. a Hugging Face block
        NAME:FACTOR                                 the short form, e.g. linear:4

    train_len fills original_max_position_embeddings where the block gives neither it nor
    max_position_embeddings (the short form never does). Malformed text is a one-line
    ConfigError; the block's keys are checked where it is used (`validate`).
    """
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        return None
    if isinstance(spec, str) and spec.lstrip().startswith("{"):
        try:
            cfg = json.loads(spec)
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"rope_scaling {spec!r} is not valid JSON ({e.msg}: character {e.pos}): "
                'write it as \'{"rope_type": "yarn", "factor": 4.0}\''
            ) from None
        if not isinstance(cfg, dict):
            raise ConfigError(f"rope_scaling {spec!r} must be a JSON object {{...}}")
    elif isinstance(spec, str):
        name, _, factor = spec.strip().partition(":")
        if name not in SCALINGS:
            raise unknown("rope_scaling type", name, SCALINGS)
        if name == "default":
            cfg = {"rope_type": name}
        else:
            try:
                cfg = {"rope_type": name, "factor": float(factor)}
            except ValueError:
                raise ConfigError(
                    f"rope_scaling {spec!r} needs a numeric factor (new length / trained "
                    f"length): write {name}:4, or a JSON mapping for the other fields"
                ) from None
    else:
        cfg = as_dict(spec)
    if train_len is not None and cfg.get(_ORIGINAL) is None and cfg.get(_MAX) is None:
        cfg[_ORIGINAL] = int(train_len)
    return cfg


def freeze(scaling: ScalingConfig | None) -> tuple[tuple[str, Any], ...] | None:
    """The hashable form of a `rope_scaling` mapping: its items sorted by key, lists (LongRoPE's
    factors) as tuples (None stays None)."""
    if scaling is None:
        return None
    return tuple(sorted((key, tuple(value) if isinstance(value, list) else value)
                        for key, value in as_dict(scaling).items()))


def scaling_type(scaling: ScalingConfig) -> str:
    """The map's name: `rope_type`, else the older `type`; unknown names are a ConfigError."""
    cfg = as_dict(scaling)
    kind, old = cfg.get("rope_type"), cfg.get("type")
    if kind is not None and old is not None and kind != old:
        raise ConfigError(
            f"rope_scaling has rope_type={kind!r} but type={old!r}: drop 'type' (the older "
            "name of rope_type)"
        )
    kind = old if kind is None else kind
    if kind is None:
        raise ConfigError(
            f"rope_scaling {cfg} has no 'rope_type': add one of {', '.join(sorted(SCALINGS))}"
        )
    if kind not in SCALINGS:
        raise unknown("rope_scaling type", kind, SCALINGS)
    return kind


def _read(scaling: ScalingConfig) -> tuple[str, dict[str, Any]]:
    """(map name, dict) of a block whose every key the map accepts; a ConfigError names others."""
    kind = scaling_type(scaling)
    cfg = as_dict(scaling)
    accepted = (*SCALINGS[kind].keys, *_COMMON)
    extra = sorted(str(key) for key in cfg if key not in accepted)
    if extra:
        raise ConfigError(
            f"rope_scaling type {kind!r} does not read {', '.join(map(repr, extra))}"
            f"{did_you_mean(extra[0], accepted)}: drop "
            f"{'it' if len(extra) == 1 else 'them'}; {kind} accepts {', '.join(accepted)}"
        )
    return kind, cfg


def _get(cfg: Mapping[str, Any], key: str, kind: str, default: Any = _REQUIRED) -> float:
    # HF configs write an absent optional value as null, so None falls back to the default.
    value = cfg.get(key)
    if value is None:
        if default is _REQUIRED:
            raise ConfigError(f"rope_scaling type {kind!r} needs {key!r}: add it to the mapping")
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"rope_scaling {key!r} must be a number, got {value!r}")
    if not math.isfinite(value):  # nan scores nan everywhere, inf a map of no use
        raise ConfigError(f"rope_scaling {key!r} must be a finite number, got {value!r}")
    return float(value)


def _factor(cfg: Mapping[str, Any], kind: str, default: Any = _REQUIRED) -> float:
    s = _get(cfg, "factor", kind, default)
    if s < 1.0:
        raise ConfigError(
            f"rope_scaling factor {s:g} < 1: the factor is new length / trained length, use >= 1"
        )
    return s


def _train_len(cfg: Mapping[str, Any], kind: str, default: Any = _REQUIRED) -> float:
    """L_train: original_max_position_embeddings, else max_position_embeddings, else default."""
    key = _MAX if cfg.get(_ORIGINAL) is None and cfg.get(_MAX) is not None else _ORIGINAL
    if cfg.get(key) is None and default is _REQUIRED:
        raise ConfigError(
            f"rope_scaling type {kind!r} needs {_ORIGINAL!r}: add the model's training length "
            f"(its config's {_MAX})"
        )
    length = _get(cfg, key, kind, default)
    if length < 1:
        raise ConfigError(f"rope_scaling {key}={length:g} must be the training length (>= 1)")
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
    """Dynamic NTK: base * ((s L / L_train) - (s - 1))^(d/(d-2)) when L > L_train.

    L is the current length `seq_len` (a Python int or a traced scalar); None means "not longer
    than training", which is plain RoPE. At L = L_train the new base equals the old one, so the
    map is continuous in L. This is Hugging Face's formula, but posjax keeps it stateless: the
    frequencies depend on the current L only. Hugging Face's rotary module is stateful: it
    grows its frequencies when an input is longer than any before, keeps them for later,
    shorter inputs, and resets them only for an input shorter than L_train; so posjax matches
    a fresh Hugging Face module run once at length L, not one that has seen a longer input.
    Hugging Face's L_train here is the model's max_position_embeddings (it never reads
    original_max_position_embeddings), so a block giving both must give one value.
    """
    s = _factor(cfg, "dynamic")
    train = _train_len(cfg, "dynamic")
    if _get(cfg, _MAX, "dynamic", train) != train:
        raise ConfigError(
            f"rope_scaling dynamic has {_ORIGINAL}={train:g} but {_MAX}={cfg[_MAX]}: Hugging "
            f"Face grows past {_MAX}; keep the training length in one of them"
        )
    exponent = _ntk_exponent(dim, "dynamic")
    if seq_len is None:
        return inverse_frequencies(dim, theta)
    length = jnp.asarray(seq_len, jnp.float32)
    # The floor keeps the branch jnp.where discards free of NaNs (a negative base to a power).
    grown = jnp.maximum(s * length / train - (s - 1.0), 1.0)
    base = jnp.where(length > train, theta * grown**exponent, theta)
    return inverse_frequencies(dim, base)


def _yarn_factor(cfg: Mapping[str, Any]) -> float:
    # Hugging Face reads a null factor as max_position_embeddings / L_train (for DeepSeek-V3
    # style configs, its comment says).
    if cfg.get("factor") is None and cfg.get(_MAX) is not None:
        cfg = {**cfg, "factor": _get(cfg, _MAX, "yarn") / _train_len(cfg, "yarn")}
    return _factor(cfg, "yarn")


def _beta(cfg: Mapping[str, Any], key: str, default: float) -> float:
    # Hugging Face writes `config.get(key) or default`, so 0 means the default too.
    beta = _get(cfg, key, "yarn", default) or default
    if beta < 0:
        raise ConfigError(
            f"rope_scaling {key}={beta:g} must be > 0: it counts rotations over L_train "
            f"(default {default:g})"
        )
    return beta


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
    where low/high are the indices turning beta_fast (32) / beta_slow (1) times over L_train
    (a beta of 0 means its default, as in Hugging Face); `truncate` (default true) rounds them
    outward to whole pairs. `theta_i' = (1 - gamma_i) theta_i / s + gamma_i theta_i`: fast
    pairs extrapolate, slow pairs interpolate. The attention part is `attention_factor`.
    """
    del seq_len
    s = _yarn_factor(cfg)
    truncate = cfg.get("truncate", True)
    if not isinstance(truncate, bool):
        raise ConfigError(f"rope_scaling 'truncate' must be true or false, got {truncate!r}")
    low, high = _yarn_ramp_bounds(
        dim, theta, _train_len(cfg, "yarn"), _beta(cfg, "beta_fast", 32.0),
        _beta(cfg, "beta_slow", 1.0), truncate,
    )
    ramp = jnp.clip((jnp.arange(dim // 2, dtype=jnp.float32) - low) / (high - low), 0.0, 1.0)
    gamma = 1.0 - ramp
    plain = inverse_frequencies(dim, theta)
    return (1.0 - gamma) * plain / s + gamma * plain


def _mscale(s: float, mscale: float = 1.0) -> float:
    return 1.0 if s <= 1.0 else 0.1 * mscale * math.log(s) + 1.0


def _deepseek_mscales(cfg: Mapping[str, Any]) -> tuple[float, float] | None:
    """(mscale, mscale_all_dim) of a DeepSeek block, None for a plain YaRN block."""
    given = {key: _get(cfg, key, "yarn", None) for key in ("mscale", "mscale_all_dim")}
    if all(value is None for value in given.values()):
        return None
    if any(value is None or value <= 0 for value in given.values()):
        raise ConfigError(
            f"rope_scaling yarn has mscale={given['mscale']} and mscale_all_dim="
            f"{given['mscale_all_dim']}: DeepSeek's pair needs both, > 0 (DeepSeek-V3: 1.0 and "
            "1.0); give both or neither"
        )
    if cfg.get("attention_factor") is not None:
        raise ConfigError(
            "rope_scaling yarn has attention_factor and mscale/mscale_all_dim: posjax's "
            "attention_factor is the whole factor on q and k; keep one of them"
        )
    return given["mscale"], given["mscale_all_dim"]


def hugging_face_yarn(block: dict[str, Any]) -> dict[str, Any]:
    """A yarn block as Hugging Face's rotary module reads it for a model whose attention adds
    no mscale term of its own (Llama, Mistral, Qwen2, GPT-NeoX): with no attention_factor,
    `mscale` and `mscale_all_dim` (both nonzero) give attention_factor = mscale(s, mscale) /
    mscale(s, mscale_all_dim); a lone one, or a pair beside attention_factor, is not read
    there and is dropped. Other blocks are returned as they are."""
    if (block.get("rope_type") or block.get("type")) != "yarn":
        return block
    block = dict(block)
    mscale, all_dim = block.pop("mscale", None), block.pop("mscale_all_dim", None)
    if mscale and all_dim and block.get("attention_factor") is None:
        s = _yarn_factor(block)
        block["attention_factor"] = _mscale(s, mscale) / _mscale(s, all_dim)
    return block


def _yarn_attention(cfg):
    """YaRN's factor on q and on k (logits scale by its square).

    `attention_factor` if given; for DeepSeek's blocks (`mscale` and `mscale_all_dim`) the
    factor DeepSeek's model applies in total, mscale(s, mscale) = 0.1 mscale ln s + 1;
    otherwise mscale(s) = 0.1 ln s + 1 (Peng et al.). Hugging Face's rotary module returns
    mscale(s, mscale) / mscale(s, mscale_all_dim) only, because its DeepSeek-V3 attention
    (transformers/models/deepseek_v3/modeling_deepseek_v3.py, `yarn_apply_mscale` in
    `DeepseekV3Attention.__init__`, after DeepSeek's own modeling_deepseek.py `softmax_scale`)
    multiplies the softmax scale by mscale(s, mscale_all_dim)^2; the two make q.k scale by
    mscale(s, mscale)^2. posjax's attention has no such term, so the ratio alone would run
    DeepSeek-V3 (s = 40, both mscales 1) 1.87x colder. DeepSeek scales its unrotated (nope)
    dims by mscale(s, mscale_all_dim)^2, so `validate` refuses unequal mscales under partial
    rotary. A non-DeepSeek model whose Hugging Face block carries the pair gets only the
    ratio there: `hugging_face_yarn` turns the pair into that `attention_factor` (the
    pretrained loader does so for every family it loads).
    """
    s = _yarn_factor(cfg)
    mscales = _deepseek_mscales(cfg)
    if mscales is not None:
        return _mscale(s, mscales[0])
    return _get(cfg, "attention_factor", "yarn", _mscale(s))


def _llama3(dim, theta, cfg, seq_len):
    """Llama 3.1's frequency bands (Meta 2024), as Hugging Face computes them.

    Wavelengths above L_old / low_freq_factor are divided by s, those below
    L_old / high_freq_factor kept, and in between `(1 - a) theta_i / s + a theta_i` with
    `a = (L_old / wavelength - low) / (high - low)`. Defaults: s = 8, low = 1, high = 4,
    L_old = 8192 (Llama 3.1's values; Hugging Face requires every key).
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


def _pair_factors(cfg: Mapping[str, Any], key: str, dim: int) -> jax.Array:
    """float32[dim // 2]: LongRoPE's per-pair factors under `key`; a one-line ConfigError if
    they are missing, not numbers, or not one per rotated pair."""
    value = cfg.get(key)
    if not isinstance(value, list | tuple) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        raise ConfigError(f"rope_scaling type 'longrope' needs {key!r}: a list of one factor "
                          "per rotated pair")
    if not all(math.isfinite(v) and v > 0 for v in value):  # theta_i / f_i: 0 makes inf
        raise ConfigError(f"rope_scaling longrope {key} holds "
                          f"{next(v for v in value if not (math.isfinite(v) and v > 0))!r}: "
                          "each factor divides a frequency, so give finite factors > 0")
    if len(value) != dim // 2:
        raise ConfigError(
            f"rope_scaling longrope {key} has {len(value)} factors but the rotary dim {dim} "
            f"has {dim // 2} pairs: give one factor per pair"
        )
    return jnp.asarray(value, jnp.float32)


def _longrope(dim, theta, cfg, seq_len):
    """LongRoPE (Ding et al. 2024, "LongRoPE: Extending LLM Context Window Beyond 2 Million
    Tokens"; Phi-3), as Hugging Face computes it: theta_i / f_i with searched per-pair factors
    f, `long_factor` when the current length (max position + 1) exceeds L_train and
    `short_factor` otherwise. seq_len None means "not longer than training"."""
    train = _train_len(cfg, "longrope")
    plain = inverse_frequencies(dim, theta)
    short = plain / _pair_factors(cfg, "short_factor", dim)
    long = plain / _pair_factors(cfg, "long_factor", dim)
    if seq_len is None:
        return short
    return jnp.where(jnp.asarray(seq_len, jnp.float32) > train, long, short)


def _longrope_attention(cfg):
    """`attention_factor` if given, else sqrt(1 + ln s / ln L_train) for s > 1 (1 otherwise),
    s the block's `factor`, else max_position_embeddings / original_max_position_embeddings
    (Phi-3's config.json gives no factor), else 1: Hugging Face 5's rule."""
    given = _get(cfg, "attention_factor", "longrope", None)
    if given is not None:
        return given
    train = _train_len(cfg, "longrope")
    s = _get(cfg, "factor", "longrope", None)
    if s is None:
        s = _get(cfg, _MAX, "longrope", train) / train
    return math.sqrt(1.0 + math.log(s) / math.log(train)) if s > 1.0 else 1.0


@dataclasses.dataclass(frozen=True)
class ScalingMap:
    """One registry entry: the frequency map, the keys it reads, its attention factor.

    inv_freq(dim, theta, cfg, seq_len) -> float32[dim // 2]; keys: the block keys the map
    reads besides the ones every map accepts (`_COMMON`); attention(cfg) -> float;
    per_pair: a key holding one value per rotated pair, which fixes the rotary dim.
    """

    inv_freq: Callable[[int, float, Mapping[str, Any], Any], jax.Array]
    keys: tuple[str, ...] = ()
    attention: Callable[[Mapping[str, Any]], float] = lambda cfg: 1.0
    per_pair: str | None = None


# Each map's keys are the ones transformers' init function for it reads besides `_COMMON`
# (modeling_rope_utils.py, ROPE_INIT_FUNCTIONS); ntk is posjax's own.
SCALINGS: dict[str, ScalingMap] = {
    "default": ScalingMap(_default),
    "linear": ScalingMap(_linear, ("factor",)),
    "ntk": ScalingMap(_ntk, ("factor",)),
    "dynamic": ScalingMap(_dynamic, ("factor",)),
    "yarn": ScalingMap(
        _yarn,
        ("factor", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
         "truncate"),
        _yarn_attention,
    ),
    "llama3": ScalingMap(_llama3, ("factor", "low_freq_factor", "high_freq_factor")),
    "longrope": ScalingMap(_longrope, ("factor", "attention_factor", "long_factor",
                                       "short_factor"), _longrope_attention, "long_factor"),
}


def _check_theta(cfg: Mapping[str, Any], kind: str, theta: float) -> None:
    rope_theta = _get(cfg, "rope_theta", kind, None)
    if rope_theta is not None and rope_theta != float(theta):
        raise ConfigError(
            f"rope_scaling has rope_theta={rope_theta:g} but theta={theta:g}: set "
            f"theta={rope_theta:g} (encoding hyperparameter) or drop rope_theta"
        )


def scaled_inv_freq(
    dim: int, theta: float, scaling: ScalingConfig | None, seq_len: Any = None
) -> jax.Array:
    """Inverse frequencies float32[dim // 2] after the `rope_scaling` map (plain RoPE for None).

    dim: the rotary dimension; theta: the base (a Python float), which the block's
    `rope_theta`, if any, must equal; seq_len: the current length, read by "dynamic" only (a
    Python int, a traced jnp scalar, or None).
    """
    if scaling is None:
        return inverse_frequencies(dim, theta)
    kind, cfg = _read(scaling)
    _check_theta(cfg, kind, theta)
    return SCALINGS[kind].inv_freq(dim, theta, cfg, seq_len)


def attention_factor(scaling: ScalingConfig | None) -> float:
    """The factor on q and on k (logits scale by its square): YaRN's (DeepSeek's), else 1.0."""
    if scaling is None:
        return 1.0
    kind, cfg = _read(scaling)
    return float(SCALINGS[kind].attention(cfg))


def validate(
    scaling: ScalingConfig | None, dim: int | None = None, theta: float = 10000.0,
    fraction: float = 1.0
) -> None:
    """Raise a one-line ConfigError now if `scaling` would fail or be misread at this size.

    dim: the rotary dim (None, before the model is known: the one a per-pair map's factors
    fix, else 64); theta, fraction: the encoding's base and rotary share, which the
    block's `rope_theta` and `partial_rotary_factor`, if given, must equal. Evaluating the map
    reads every key it needs, so this checks the same rules it applies.
    """
    if scaling is None:
        return
    if not hasattr(scaling, "items") and not isinstance(scaling, tuple):
        raise ConfigError(
            f"rope_scaling must be a mapping like {{'rope_type': 'linear', 'factor': 4.0}}, "
            f"got {scaling!r}"
        )
    kind, cfg = _read(scaling)
    share = _get(cfg, "partial_rotary_factor", kind, None)
    if share is not None and share != float(fraction):
        raise ConfigError(
            f"rope_scaling has partial_rotary_factor={share:g} but fraction={fraction:g}: set "
            f"fraction={share:g} (encoding hyperparameter) or drop partial_rotary_factor"
        )
    _train_len(cfg, kind, 1.0)
    if dim is None:
        per_pair = cfg.get(SCALINGS[kind].per_pair) if SCALINGS[kind].per_pair else None
        dim = 2 * len(per_pair) if isinstance(per_pair, list | tuple) else 64
    scaled_inv_freq(dim, theta, cfg, seq_len=None)
    attention_factor(cfg)
    mscales = _deepseek_mscales(cfg)
    if mscales and mscales[0] != mscales[1] and fraction < 1.0:
        raise ConfigError(
            f"rope_scaling mscale={mscales[0]:g} != mscale_all_dim={mscales[1]:g} needs "
            f"fraction=1.0, got {fraction:g}: DeepSeek scales its unrotated dims by another "
            "factor, posjax scales all dims alike"
        )


def temperature_tuning(positions: jax.Array, floor: int, scale: float,
                       offset: int = 1) -> jax.Array:
    """Llama 4's query scale float32[..., L] for positions [..., L] (attn_temperature_tuning,
    transformers' modeling_llama4): 1 + scale * log(floor((m + offset) / floor) + 1), offset
    1 as Llama 4's, 0 as the Mistral 3 models' (get_llama_4_attn_scale)."""
    steps = jnp.floor((positions.astype(jnp.float32) + offset) / floor)
    return 1.0 + scale * jnp.log1p(steps)


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
