"""Length extension chosen at evaluation time: the encoding a trained run is scored with.

A method spec is `name[:arg[:arg]]`, several joined with `+` ("ntk+logn", "rerope:64"), or a
Hugging Face `rope_scaling` block as JSON, taken as is ('{"rope_type": "llama3", "factor": 8,
"original_max_position_embeddings": 8192, ...}'; L_train fills the training length if the
block has none):

    linear | ntk | dynamic | yarn | llama3 [:factor]   a Hugging Face `rope_scaling` map
                                    (factor defaults to L / L_train at evaluation length L;
                                    dynamic's to 1: its map grows with the current length
                                    itself, so `dynamic` alone is NTK at factor L / L_train
                                    and `dynamic:s` is Hugging Face's dynamic at factor s)
    logn                            log-n query scaling against the training length
    rerope[:window]                 ReRoPE, window default L_train / 2
    leaky_rerope[:window[:k]]       leaky ReRoPE, k default 16
    sinks[:tokens[:window]]         attention sinks, StreamingLLM (Xiao et al. 2024): the first
                                    tokens (default 4) and a window of the last keys (default
                                    L_train - tokens, so the cache is the training length)
    self_extend[:window[:group]]    Self-Extend (Jin et al. 2024): neighbour window default
                                    L_train / 2, group default the smallest G that keeps
                                    every distance of length L within L_train
    global_only                     the other methods (a JSON block's too) on the layers
                                    without a sliding window only: the windowed layers keep
                                    the run's own encoding, as Gemma 3's and 4's code leaves
                                    their local layers' RoPE unscaled (`windowed_encoding`)

`length_encoding` is what every evaluation calls per length: the methods applied, and a
learned table that cannot reach the length swapped for its extension (`learned_extension`,
e.g. Su's hierarchical one) or refused with one line.
"""

from __future__ import annotations

import dataclasses

import jax

from posjax import attention, encoders
from posjax.encoders import rotary, scaling
from posjax.errors import ConfigError, unknown
from posjax.models.pattern import split_top
from posjax.models.transformer import layer_encodings, layer_recurrent, layer_windows

SCALED_ROPE_TYPES = ("linear", "ntk", "dynamic", "yarn", "llama3")


# Maps whose frequencies already grow with the current length: their factor defaults to 1
# (a factor of L / L_train on top would grow them twice).
GROW_WITH_LENGTH = ("dynamic",)

# The part of a spec that keeps the other methods off the layers with a sliding window.
GLOBAL_ONLY = "global_only"


def _scaling(rope_type: str):
    def apply(enc, args, train_len, length):
        if args:  # as given: a factor below 1 is refused, not clamped
            factor = args[0]
        else:
            factor = 1.0 if rope_type in GROW_WITH_LENGTH else max(length / train_len, 1.0)
        return dataclasses.replace(
            enc, scaling=scaling.parse(f"{rope_type}:{factor}", train_len))

    return apply


def _logn(enc, args, train_len, length):
    return dataclasses.replace(enc, logn_train_len=train_len)


def _window(name: str, args, default: int, train_len: int, at: int = 0) -> int:
    """The method's window (args[at], else `default`): at least 1, since the encoding's
    window 0 is off, plain RoPE under the method's name, and below the training length
    `train_len`, or no trained distance is capped (the encoding's own check, here in the
    words of --rope_scaling)."""
    window = int(args[at]) if len(args) > at else default
    if window < 1:
        raise ConfigError(f"--rope_scaling's {name} with a window of {window}: the window must "
                          f"be >= 1 (0 is off: plain RoPE under {name}'s name); give one, or "
                          f"drop {name}")
    if window >= train_len:
        raise ConfigError(f"--rope_scaling's {name} with a window of {window}: the window must "
                          f"be below the run's training length {train_len}, or no trained "
                          f"distance is capped; give a smaller one, or none for the default, "
                          f"{default}")
    return window


def _rerope(enc, args, train_len, length):
    window = _window("rerope", args, train_len // 2, train_len)
    return dataclasses.replace(enc, rerope_window=window)


def _leaky_rerope(enc, args, train_len, length):
    window = _window("leaky_rerope", args, train_len // 2, train_len)
    leak = float(args[1]) if len(args) > 1 else 16.0
    return dataclasses.replace(enc, rerope_window=window, rerope_leak=leak)


def _self_extend(enc, args, train_len, length):
    window = _window("self_extend", args, train_len // 2, train_len)
    # The largest grouped distance, (L - 1) // G + w - w // G, must stay below L_train.
    group = int(args[1]) if len(args) > 1 else next(
        g for g in range(1, length + 1) if (length - 1) // g + window - window // g < train_len)
    if group < 1:  # 0 is the encoding's "off": plain ReRoPE under Self-Extend's name
        raise ConfigError(f"--rope_scaling=self_extend:{window}:{group}: the group must be "
                          ">= 1 (distances past the window are divided by it; 1 divides none)")
    return dataclasses.replace(enc, rerope_window=window, self_extend_group=group)


def _global_only(enc, args, train_len, length):
    """Nothing on the encoding itself: `windowed_encoding` keeps the windowed layers'."""
    return enc


def windowed_encoding(encoding, spec: str | None):
    """The encoding of the layers with a sliding window under `spec`: the run's own
    `encoding` where spec has global_only (ModelConfig.window_encoding), else None (those
    layers take the methods like every other)."""
    return encoding if global_only(spec) else None


def global_only(spec: str | None) -> bool:
    """Whether `spec` keeps its methods off the layers with a sliding window."""
    return any(part.strip() == GLOBAL_ONLY for part in split_top(spec or "", "+"))


def attention_layers(experiment, applied, spec: str | None) -> list[tuple]:
    """Each attention layer's (encoding, sliding window or 0) of `experiment`'s model scored
    with `applied` (its encoding under `spec`'s methods); recurrent layers left out."""
    cfg = dataclasses.replace(experiment.model_config,
                              window_encoding=windowed_encoding(experiment.encoding, spec))
    return [(encoding, window) for encoding, window, recurrent in zip(
        layer_encodings(cfg, applied), layer_windows(cfg), layer_recurrent(cfg), strict=True)
        if recurrent is None]


def check_global_only(spec: str | None, experiment, layers: list[tuple]) -> None:
    """A one-line refusal of global_only where it would change nothing: `layers` (each
    attention layer's (encoding, window)) has no RoPE layer with a sliding window, or none
    without one for the other methods to act on; or where `experiment`'s model shares one
    copy of its encoding's parameters across layers (model.share_position_params), which
    a model with two encodings would hold twice."""
    if not global_only(spec):
        return
    rope = [window for encoding, window in layers if isinstance(encoding, rotary.RoPE)]
    if not any(rope) or all(rope):
        has = "no RoPE layer with a sliding window" if not any(rope) else (
            "a sliding window on every RoPE layer")
        raise ConfigError(f"--rope_scaling={spec}: global_only leaves the RoPE layers with a "
                          f"sliding window as trained, and this run has {has}: drop "
                          "+global_only")
    encoding = experiment.encoding
    if experiment.model_config.share_position_params and jax.tree.leaves(jax.eval_shape(
            lambda: encoding.init(jax.random.key(0), experiment.dims))):
        raise ConfigError(f"--rope_scaling={spec}: global_only gives the layers with a "
                          f"sliding window an encoding of their own, and this run shares one "
                          f"copy of {encoding.name}'s parameters across its layers "
                          "(model.share_position_params): drop +global_only")


def _sinks(enc, args, train_len, length):
    tokens = int(args[0]) if args else 4
    if not 1 <= tokens < train_len:  # the window's default, L_train - tokens, then misleads
        raise ConfigError(f"--rope_scaling's sinks with {tokens} sink tokens: they are the "
                          f"first tokens every query keeps, 1 to {train_len - 1} below the "
                          f"run's training length {train_len} (StreamingLLM keeps 4)")
    window = _window("sinks", args, train_len - tokens, train_len, at=1)
    if tokens + window > train_len:  # the farthest distance, tokens + window - 1, untrained
        raise ConfigError(f"--rope_scaling=sinks:{tokens}:{window}: {tokens} sink tokens and a "
                          f"window of {window} reach distances past the run's training length "
                          f"{train_len}; give a window of at most {train_len - tokens}")
    return dataclasses.replace(enc, rerope_window=window, sink_tokens=tokens)


# The methods that keep the one-pass softmax attention, named where a two-pass one is refused.
_ONE_PASS = ", ".join((*SCALED_ROPE_TYPES, "logn"))

# Methods that score by ReRoPE's two-pass attention (exact distances within a window): they
# set the encoding's rerope_window, which encodings without that score refuse.
TWO_PASS = ("rerope", "leaky_rerope", "self_extend", "sinks")


def _check_two_pass(encoding, spec: str, name: str) -> None:
    """A one-line refusal, in the words of --rope_scaling, of a two-pass method on an encoding
    that cannot take ReRoPE's window (ssmax, rope_pp, VO-RoPE)."""
    try:
        dataclasses.replace(encoding, rerope_window=1)
    except ConfigError:
        raise ConfigError(
            f"--rope_scaling={spec}: {name} scores by ReRoPE's two-pass attention, which "
            f"{encoding.name} runs cannot take: use one of the one-pass methods "
            f"(--rope_scaling={_ONE_PASS.replace(', ', '|')}), or drop --rope_scaling"
        ) from None


def check_kernel(encoding, spec: str | None, impl: str) -> None:
    """A one-line refusal, in the words of --rope_scaling, where the run's attention kernel
    (model.attention = `impl`) cannot carry what the methods of `spec` made of its encoding
    (ReRoPE's two-pass score, a per-pair term, through flash_bias, fused or linear)."""
    kernel = attention.IMPLS[impl]
    if spec and not kernel.carries(encoding):
        carrying = "|".join(name for name, k in attention.IMPLS.items()
                            if k.softmax and k.carries(encoding))
        raise ConfigError(
            f"--rope_scaling={spec} gives {encoding.name} a score attention={impl!r} (the "
            f"run's model.attention, or --attention) cannot carry (its "
            f"{kernel.refused_sites(encoding)}): score with --attention={carrying}, use one of "
            f"the one-pass methods (--rope_scaling={_ONE_PASS.replace(', ', '|')}), or drop "
            "--rope_scaling")


def check_window(encoding, spec: str | None, windows: list[int]) -> None:
    """A one-line refusal where the two-pass method of `spec` (its window: the encoding's
    rerope_window) would change nothing: every attention layer's sliding window (`windows`,
    0 for none) is at most the method's, so no query sees a key past the method's window,
    where alone it acts."""
    window = getattr(encoding, "rerope_window", 0)
    if not (spec and window and windows and all(0 < w <= window for w in windows)):
        return
    widest = max(windows)
    name = spec.split("+")[0].split(":")[0]
    raise ConfigError(
        f"--rope_scaling={spec} acts on keys past its window of {window} tokens, and every "
        f"layer of this run sees at most {widest} (its sliding window, model.window): it "
        f"would score the run unchanged: give the method a window below {widest} "
        f"({_window_example(name, widest)}), or drop --rope_scaling")


def windowed_layers_note(spec: str | None, layers: list[tuple],
                         trained: list[tuple]) -> str | None:
    """A line where the method of `spec` turns RoPE layers with a sliding window too
    (`layers`: each attention layer's (encoding, window), 0 for none, under the method;
    `trained`: the same without it), as posjax applies a method to every RoPE layer that
    does not set its own (a loaded Gemma 3's local layers do): Gemma 3's and 4's own code
    leave their local layers' RoPE unscaled."""
    slide = sum(isinstance(e, rotary.RoPE) and w > 0 and e != before
                for (e, w), (before, _) in zip(layers, trained, strict=True))
    if not spec or not slide or global_only(spec):
        return None
    if not any(isinstance(e, rotary.RoPE) and w == 0 for e, w in layers):
        return (f"posjax: --rope_scaling={spec} turns {slide} RoPE layer{'s' * (slide > 1)}, "
                "each with a sliding window (the full-attention layers take no RoPE, as "
                "SWAN-GPT's, Command R7B's and EXAONE 4's), so it changes angles within the "
                "window only")
    return (f"posjax: --rope_scaling={spec} applies to every RoPE layer, the {slide} with a "
            "sliding window too (Gemma 3's and Gemma 4's own code leave their local layers' "
            f"RoPE unscaled: --rope_scaling={spec}+{GLOBAL_ONLY})")


def _window_example(name: str, widest: int) -> str:
    """A spec of method `name` with a window below `widest` (sinks: 4 tokens first)."""
    return f"sinks:4:{max(widest - 4, 1)}" if name == "sinks" else f"{name}:{widest // 2}"


# What each method's ":"-separated arguments are, in order (none past these is read).
ARGUMENTS = {
    **{t: ("factor",) for t in SCALED_ROPE_TYPES},
    "logn": (),
    "rerope": ("window",),
    "leaky_rerope": ("window", "k"),
    "self_extend": ("window", "group"),
    "sinks": ("tokens", "window"),
    "global_only": (),
}


# Names the papers and other libraries give methods that posjax names otherwise: the fix.
OTHER_NAMES = {
    "pi": "Position Interpolation (Chen et al. 2023) is linear here, as in Hugging Face's "
          "rope_scaling: linear:FACTOR",
    "position_interpolation": "Position Interpolation (Chen et al. 2023) is linear here, as "
                              "in Hugging Face's rope_scaling: linear:FACTOR",
    "ntk-aware": "NTK-aware scaling is ntk here: ntk:FACTOR",
    "ntk_aware": "NTK-aware scaling is ntk here: ntk:FACTOR",
}


# The method arguments that count tokens, so take whole numbers.
WHOLE_ARGUMENTS = {"window", "group", "tokens"}


def _kinds(name: str) -> str:
    """What method `name`'s arguments take, for a refusal: "whole numbers", "numbers" or
    "numbers (window a whole number)"."""
    whole = [a for a in ARGUMENTS[name] if a in WHOLE_ARGUMENTS]
    if len(whole) == len(ARGUMENTS[name]):
        return "whole numbers"
    return "numbers" + (f" ({', '.join(whole)} a whole number)" if whole else "")


def _role(name: str) -> str:
    """What a method sets, of which a spec may hold one each."""
    if name in SCALED_ROPE_TYPES:
        return "frequency map"
    return "two-pass score" if name in TWO_PASS else name


def _parts(spec: str) -> list[tuple[str, str, list[str]]]:
    """(part, method name, its arguments) of each "+"-joined part of `spec`; a one-line
    refusal of a spec whose methods or arguments would not all be used: an argument past
    the method's (logn:3), or two methods that set one thing (yarn:4+yarn:2,
    rerope+self_extend), where the later one would replace the earlier one."""
    roles: dict[str, str] = {}
    parts = []
    for part in spec.split("+"):
        if not part.strip():
            raise ConfigError(f"--rope_scaling={spec} has an empty method: join each two "
                              "with one +, e.g. yarn:4+logn")
        name, *args = part.split(":")
        if name == "longrope":  # its factors are lists, one per pair: JSON only
            raise ConfigError(
                f"--rope_scaling={spec}: longrope needs its per-pair factors, so it is given "
                'as its JSON block: \'{"rope_type": "longrope", "factor": 4, "short_factor": '
                '[...], "long_factor": [...]}\'')
        if name.lower() in OTHER_NAMES:
            raise ConfigError(f"--rope_scaling={spec}: {OTHER_NAMES[name.lower()]}")
        if name not in METHODS:
            raise unknown("length-extension method", name, METHODS)
        takes = ARGUMENTS[name]
        if len(args) > len(takes):
            what = (f"at most {len(takes)} ({':'.join(takes)})" if takes else "no argument")
            raise ConfigError(f"--rope_scaling={spec}: {name} takes {what}, not {part}")
        role = _role(name)
        if role in roles:
            raise ConfigError(
                f"--rope_scaling={spec}: {roles[role]} and {part} both set the {role}, and the "
                f"second would replace the first: give one, joined with + to the others")
        roles[role] = part
        parts.append((part, name, args))
    return parts


# Each method maps (encoding, its ":"-separated args, training length, evaluation length) to the
# encoding used at that evaluation length.
METHODS = {
    **{t: _scaling(t) for t in SCALED_ROPE_TYPES},
    "logn": _logn,
    "rerope": _rerope,
    "leaky_rerope": _leaky_rerope,
    "self_extend": _self_extend,
    "sinks": _sinks,
    GLOBAL_ONLY: _global_only,
}


def apply_methods(encoding, spec: str | None, train_len: int, length: int):
    """The encoding with every method of `spec` ("ntk+logn", "rerope:64") applied."""
    if not spec:
        return encoding
    if not isinstance(encoding, rotary.RoPE):
        raise ConfigError(
            f"--rope_scaling={spec} applies to rotary encodings "
            f"({', '.join(encoders.names_of(rotary.RoPE))}); this run uses "
            f"{encoding.name!r}: drop --rope_scaling"
        )
    parts = [part.strip() for part in split_top(spec, "+")]
    blocks = [part for part in parts if part.startswith("{")]
    if blocks and len(parts) > 1 + (GLOBAL_ONLY in parts):
        raise ConfigError(
            f"--rope_scaling={spec}: a JSON block takes no other method joined with + "
            "(global_only aside): give its map in short form joined with them "
            "(yarn:4+logn), or the block alone")
    if blocks:  # a Hugging Face rope_scaling block, as is
        return dataclasses.replace(encoding, scaling=scaling.parse(blocks[0], train_len))
    parts = _parts(spec)
    # on the run's own encoding: what a two-pass method cannot combine with among the
    # others is the method's own refusal below, whichever comes first in `spec`
    for _, name, _ in parts:
        if name in TWO_PASS:
            _check_two_pass(encoding, spec, name)
    for part, name, args in parts:
        try:
            encoding = METHODS[name](encoding, args, train_len, length)
        except ConfigError:
            raise
        except ValueError:  # int("abc")
            raise ConfigError(f"--rope_scaling={spec}: {part}'s arguments "
                              f"({':'.join(ARGUMENTS[name])}) are {_kinds(name)}") from None
    return encoding


def extended(encoding, extension: str):
    """Encoding `extension` with the hyperparameters it shares with `encoding`."""
    return encoders.get(extension, **{k: getattr(encoding, k) for k in encoders.hparams(extension)
                                      if hasattr(encoding, k)})


def _param_shapes(encoding, dims: encoders.Dims):
    return jax.tree.map(lambda x: (x.shape, x.dtype),
                        jax.eval_shape(lambda key: encoding.init(key, dims), jax.random.key(0)))


def check_extension(encoding, extension: str, dims: encoders.Dims) -> None:
    """Refuse, in one line, a learned_extension that cannot read `encoding`'s parameters (a
    table read past its length needs an extension that takes the same table): only an
    encoding with a position limit that some encoding extends is ever extended, so only then
    is it checked (configs/lm.py's default, hierarchical, is moot for TUPE's table, which
    none extends: its lengths past the table are refused one by one, `length_encoding`)."""
    if not extension or encoding.max_positions(dims) is None:
        return
    found = _extensions(encoding, dims)
    if not found:
        return
    if extension not in encoders.names():
        raise unknown("learned_extension", extension, found)
    if _param_shapes(extended(encoding, extension), dims) != _param_shapes(encoding, dims):
        raise ConfigError(
            f"learned_extension={extension} cannot extend {encoding.name!r}: it does not read "
            f"the parameters {encoding.name} trained; give one that does: {', '.join(found)}")


def _extensions(encoding, dims: encoders.Dims) -> list[str]:
    """The encodings that read `encoding`'s parameters and reach past its limit."""
    shapes, limit = _param_shapes(encoding, dims), encoding.max_positions(dims)
    found = []
    for name in encoders.names():
        if name == encoding.name:
            continue
        try:
            other = extended(encoding, name)
            reach = other.max_positions(dims)
            if (reach is None or reach > limit) and _param_shapes(other, dims) == shapes:
                found.append(name)
        except (ConfigError, TypeError, ValueError):  # not buildable at these sizes
            continue
    return found


def length_encoding(base, spec: str | None, extension: str, train_len: int, length: int,
                    dims: encoders.Dims, within=None):
    """The encoding that scores `length` positions of a run trained on `train_len`, or a
    ConfigError naming why it cannot reach them; within(limit): what to score instead in
    the data's own unit (default: at most `limit` tokens)."""
    encoding = apply_methods(base, spec, train_len, length)
    limit = encoding.max_positions(dims)
    if limit is not None and length > limit:
        found = _extensions(encoding, dims)  # those that read its parameters
        if extension in found:
            other = extended(encoding, extension)
            if other.max_positions(dims) is None or other.max_positions(dims) >= length:
                return other
        extend = (f"extend them (posjax extrapolate --learned_extension={found[0]}; in a "
                  f"config, eval.learned_extension={found[0]}) or " if found else "")
        instead = within(limit) if within else f"evaluate at most {limit} tokens"
        raise ConfigError(f"{encoding.name!r} defines {limit} positions but evaluation needs "
                          f"{length}: {extend}{instead}")
    return encoding


def _check_rope_scaling(experiment) -> None:
    """config.eval.rope_scaling applied to the run's encoding, as an evaluation would."""
    spec = experiment.config.eval.rope_scaling
    applied = apply_methods(experiment.encoding, spec, experiment.train_len,
                            2 * experiment.train_len)
    if global_only(spec):
        check_global_only(spec, experiment, attention_layers(experiment, applied, spec))


def check_config(experiment) -> None:
    """A run's config.eval rope_scaling and learned_extension (`posjax extrapolate`'s
    defaults for its flags of those names) checked against its encoding: a one-line
    ConfigError before it trains, not when it is first scored."""
    extension = experiment.config.eval.get("learned_extension", "")
    dims = experiment.dims  # its own errors (a grid the model cannot index) are not the flags'

    def check_learned_extension():
        check_extension(experiment.encoding, extension, dims)  # a table's own list
        if extension and extension not in encoders.names():  # as evaluation refuses it
            raise unknown("learned_extension", extension, encoders.names())

    for key, check in (
            ("learned_extension", check_learned_extension),
            ("rope_scaling", lambda: _check_rope_scaling(experiment))):
        try:
            check()
        except ConfigError as error:
            raise ConfigError(f"eval.{key}={experiment.config.eval.get(key)!r}, the default of "
                              f"posjax extrapolate's --{key}: {error}") from None
