"""Length extrapolation: evaluate a trained run at many lengths, optionally with a rotary
length-extension method chosen at evaluation time (no retraining).

For each length L the validation text is cut into windows of L tokens (positions 0..L-1):
non-overlapping windows score every token; sliding windows advance by a stride and score only
the new tokens. Windows are evaluated in rows of a row length R >= L: R / L windows per row as
separate packed segments (positions restarting at 0, attention masked across segments, so each
window scores exactly as alone), with R from a short ladder train_len * group_factor**i
(`row_lengths`, `config.eval.group_factor`, 1 = R = L). Lengths sharing R share one batch shape,
so a sweep of lengths compiles a handful of programs instead of one per length. Row lengths
above `config.eval.dense_max_len` use chunked attention, so no [R, R] matrix is formed.

The result, `extrapolation.json` (or `extrapolation_<method>.json`), gives per length the loss,
perplexity, accuracy, the loss per position bucket (buckets of the training length: positions
[0, L_train), [L_train, 2 L_train), ...) and the row length R it was evaluated in.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from pathlib import Path

import jax
import numpy as np

from posjax import data, encoders, io
from posjax.encoders import rotary
from posjax.errors import ConfigError, unknown
from posjax.train import trainer
from posjax.train.steps import INPUT_KEY, eval_token_losses

SCALED_ROPE_TYPES = ("linear", "ntk", "dynamic", "yarn", "llama3")

# config.eval.group_factor of runs saved before the key existed.
DEFAULT_GROUP_FACTOR = 4


def _scaling(rope_type: str):
    def apply(enc, args, train_len, length):
        factor = max(float(args[0]) if args else length / train_len, 1.0)
        scaling = {"rope_type": rope_type, "factor": factor,
                   "original_max_position_embeddings": train_len}
        return dataclasses.replace(enc, scaling=scaling)

    return apply


def _logn(enc, args, train_len, length):
    return dataclasses.replace(enc, logn_train_len=train_len)


def _rerope(enc, args, train_len, length):
    window = int(args[0]) if args else train_len // 2
    return dataclasses.replace(enc, rerope_window=window)


def _leaky_rerope(enc, args, train_len, length):
    window = int(args[0]) if args else train_len // 2
    leak = float(args[1]) if len(args) > 1 else 16.0
    return dataclasses.replace(enc, rerope_window=window, rerope_leak=leak)


# Each method maps (encoding, its ":"-separated args, training length, evaluation length) to the
# encoding used at that evaluation length. The scaling factor defaults to L / L_train.
METHODS = {
    **{t: _scaling(t) for t in SCALED_ROPE_TYPES},
    "logn": _logn,
    "rerope": _rerope,
    "leaky_rerope": _leaky_rerope,
}


def apply_methods(encoding, spec: str | None, train_len: int, length: int):
    """The encoding with every method of `spec` ("ntk+logn", "rerope:64") applied."""
    if not spec:
        return encoding
    if not isinstance(encoding, rotary.RoPE):
        raise ConfigError(
            f"--rope_scaling={spec} applies to rotary encodings (rope, xpos); this run uses "
            f"{encoding.name!r}: drop --rope_scaling"
        )
    for part in spec.split("+"):
        name, *args = part.split(":")
        if name not in METHODS:
            raise unknown("length-extension method", name, METHODS)
        encoding = METHODS[name](encoding, args, train_len, length)
    return encoding


def _length_encoding(base, spec, extension, train_len, length, dims):
    """The encoding for one evaluation length, or raise ConfigError if it cannot reach it."""
    encoding = apply_methods(base, spec, train_len, length)
    limit = encoding.max_positions(dims)
    if limit is not None and length > limit:
        if extension:
            extended = encoders.get(extension, **{
                k: getattr(encoding, k) for k in encoders.hparams(extension)
                if hasattr(encoding, k)})
            if extended.max_positions(dims) is None or extended.max_positions(dims) >= length:
                return extended
        raise ConfigError(
            f"{encoding.name!r} defines {limit} positions but evaluation needs {length}: set "
            "--config.eval.learned_extension=hierarchical (the hierarchical extension) or "
            f"evaluate at most {limit} tokens"
        )
    return encoding


def _check_group_factor(group_factor: int) -> None:
    if group_factor < 1:
        raise ConfigError(
            f"eval.group_factor={group_factor} must be >= 1 (1 = one row length per evaluation "
            "length; 4 = row lengths train_len * 4**i)"
        )


def ladder_row_len(length: int, train_len: int, group_factor: int, longest: int) -> int:
    """The row length R that windows of `length` tokens are evaluated in.

    R = the smallest rung train_len * group_factor**i (i >= 0) with length <= R <= longest and
    R divisible by length, so a row holds R / length whole windows; `length` itself when no
    rung qualifies (a length that divides none) or group_factor == 1. The cap `longest` (the
    longest length evaluated) keeps every batch within the size the longest length needs
    anyway, and the ladder short: with lengths 128..2048 doubling, train_len 128 and factor 4
    the rungs are 128, 512, 2048, so five lengths share three row lengths.
    """
    _check_group_factor(group_factor)
    if group_factor == 1:
        return length
    rung = train_len
    while rung <= longest:
        if rung >= length and rung % length == 0:
            return rung
        rung *= group_factor
    return length


def row_lengths(encodings: dict, train_len: int, group_factor: int) -> dict[int, int]:
    """{length: R}: the row length of each evaluation length (`ladder_row_len`).

    encodings: {length: the encoding evaluated at that length}. A program is compiled per
    (encoding, R): an encoding that changes with the length (a rope_scaling factor L /
    L_train) makes its own program whatever R is, so a length alone on its (encoding, R)
    keeps R = L, since packing it would only spend attention on longer rows and save no
    compile.

    Packing is correct for every encoding here because each one reads the position values
    (or L through the encoding itself), never the array length R: rotary angles, log-n
    (q position) and ReRoPE (k_pos - q_pos) use positions; dynamic NTK reads
    max(k_pos) + 1 = L; xPos centres on the row's position range [0, L - 1]; FIRE
    normalises by the query position; FLOATER integrates its ODE over max(R, hint)
    positions from 0, whose first L values are those of a grid of L (a scan); learned
    tables are indexed by position. The rope_scaling factor comes from L
    (`_length_encoding`), not R.
    """
    _check_group_factor(group_factor)
    if not encodings:
        return {}
    longest = max(encodings)
    rung = {n: ladder_row_len(n, train_len, group_factor, longest) for n in encodings}
    shared = collections.Counter((encodings[n], rung[n]) for n in encodings)
    return {n: rung[n] if shared[encodings[n], rung[n]] > 1 else n for n in encodings}


def _evaluate_length(config, built, params, length, protocol, stride, max_tokens, bucket,
                     row_len=None):
    """Metrics of one length; batches are [config.eval.batch_size, row_len] (default length)."""
    windows = data.eval_windows(
        config.data, length, protocol=protocol, stride=stride or None,
        batch_size=config.eval.batch_size, max_tokens=max_tokens,
        mlm=config.data.mlm if config.model.kind == "mlm" else None, row_len=row_len,
    )
    num_buckets = max(math.ceil(length / bucket), 1)
    loss_sum, correct_sum, weight_sum = 0.0, 0.0, 0.0
    bucket_loss = np.zeros(num_buckets)
    bucket_weight = np.zeros(num_buckets)
    for batch in windows:
        losses, correct = jax.device_get(eval_token_losses(
            params, built.rest, batch, graphdef=built.graphdef,
            input_key=INPUT_KEY[config.model.kind]))
        weights = np.asarray(batch["weights"], np.float64)
        loss_sum += float(np.sum(losses * weights))
        correct_sum += float(np.sum(correct * weights))
        weight_sum += float(np.sum(weights))
        index = np.minimum(np.asarray(batch["positions"]) // bucket, num_buckets - 1)
        np.add.at(bucket_loss, index, losses * weights)
        np.add.at(bucket_weight, index, weights)
    if weight_sum == 0:
        raise ConfigError(
            f"the validation split has fewer than {length} tokens: evaluate shorter lengths"
        )
    loss = loss_sum / weight_sum
    return {
        "length": length,
        "row_len": row_len or length,
        "loss": loss,
        "ppl": math.exp(min(loss, 50.0)),
        "acc": correct_sum / weight_sum,
        "tokens": int(weight_sum),
        "bucket_size": bucket,
        "bucket_loss": [
            (float(s / w) if w else None) for s, w in zip(bucket_loss, bucket_weight, strict=True)
        ],
    }


def extrapolate(workdir, *, lengths=None, protocol=None, stride=None, rope_scaling=None,
                max_tokens=None, learned_extension=None, group_factor=None,
                output=None) -> dict:
    """Evaluate the run in `workdir` at each length; write and return the result.

    Arguments left None take the run's `config.eval` value. A length the encoding cannot
    reach (a learned table, without `learned_extension`) gets an error row, not a result.
    group_factor: the row-length ladder (`row_lengths`); it changes which lengths share a
    compiled shape, not the scores (up to float rounding).

    Algorithmic and grid2d runs are scored per problem size instead (`tasks.evaluate_tasks`,
    `lengths` = the sizes); the text-window options do not apply to them.
    """
    workdir = Path(workdir)
    config = trainer.load_config(workdir)
    kind = data.dataset_kind(config.data)
    if kind != "text":
        from posjax.eval import tasks  # tasks builds on this module

        given = [k for k, v in (("protocol", protocol), ("stride", stride),
                                ("max_tokens", max_tokens)) if v is not None]
        if given:
            raise ConfigError(
                f"--{given[0]} windows text; {workdir} is a {kind} run, scored per problem "
                "size: drop it"
            )
        return tasks.evaluate_tasks(workdir, sizes=lengths, rope_scaling=rope_scaling,
                                    learned_extension=learned_extension, output=output)
    train_len = trainer.max_train_len(config)
    lengths = list(lengths or config.eval.lengths or [train_len * 2**i for i in range(5)])
    protocol = protocol or config.eval.protocol
    stride = stride if stride is not None else config.eval.stride
    if protocol == "sliding" and not stride:
        stride = train_len // 2
    max_tokens = max_tokens or config.eval.max_tokens
    spec = rope_scaling if rope_scaling is not None else config.eval.rope_scaling
    extension = (learned_extension if learned_extension is not None
                 else config.eval.get("learned_extension", ""))
    if group_factor is None:
        group_factor = config.eval.get("group_factor", DEFAULT_GROUP_FACTOR)
    base = trainer.build_encoding(config)
    apply_methods(base, spec, train_len, train_len)  # a method that cannot apply fails here
    dims = encoders.Dims(config.model.d_model, config.model.num_heads, config.model.head_dim,
                         train_len)
    params = trainer.restore_params(workdir, config, trainer.build(config, base))
    encodings, errors = {}, {}
    for length in sorted(set(lengths)):
        try:
            encodings[length] = _length_encoding(base, spec, extension, train_len, length, dims)
        except ConfigError as e:
            errors[length] = {"length": length, "error": str(e)}
    row_len = row_lengths(encodings, train_len, int(group_factor))
    rows = []
    models = {}  # (encoding, chunked) -> (config, built model), built once for all its lengths
    for length in sorted(lengths):
        if length in errors:
            rows.append(errors[length])
            continue
        # The compiled row length decides the attention memory, so it decides dense/chunked.
        chunked = row_len[length] > config.eval.dense_max_len and config.model.attention == "dense"
        key = (encodings[length], chunked)
        if key not in models:
            eval_config = config.copy_and_resolve_references()
            if chunked:
                eval_config.model.attention = "chunked"
            models[key] = eval_config, trainer.build(eval_config, encodings[length])
        eval_config, built = models[key]
        rows.append(_evaluate_length(eval_config, built, params, length, protocol, stride,
                                     max_tokens, train_len, row_len[length]))
    result = {
        "run": workdir.name,
        "encoding": config.encoding.to_dict(),
        "train_len": train_len,
        "head_dim": config.model.head_dim,
        "protocol": protocol,
        "stride": stride if protocol == "sliding" else None,
        "method": spec or "none",
        "learned_extension": extension or None,
        "group_factor": int(group_factor),
        "lengths": rows,
    }
    name = "extrapolation.json" if not spec else f"extrapolation_{spec.replace(':', '-')}.json"
    io.write_json(output or workdir / name, result)
    return result


def format_table(result: dict) -> str:
    """A Markdown table of one extrapolation result."""
    if result.get("protocol") == "task":
        from posjax.eval import tasks

        return tasks.format_table(result)
    lines = [f"{result['run']} (trained at {result['train_len']}, {result['protocol']}, "
             f"method {result['method']})", "", "| length | loss | ppl | acc |",
             "|---|---|---|---|"]
    for row in result["lengths"]:
        if "error" in row:
            lines.append(f"| {row['length']} | - | - | {row['error']} |")
        else:
            lines.append(f"| {row['length']} | {row['loss']:.4f} | {row['ppl']:.3f} | "
                         f"{row['acc']:.4f} |")
    return "\n".join(lines)
