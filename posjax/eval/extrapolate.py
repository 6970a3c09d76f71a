"""Length extrapolation: evaluate a trained run at many lengths, optionally with a rotary
length-extension method chosen at evaluation time (no retraining).

For each length L the validation text is cut into windows of L tokens (positions 0..L-1):
non-overlapping windows score every token; sliding windows advance by a stride and score only
the new tokens. Lengths above `config.eval.dense_max_len` use chunked attention, so no [L, L]
matrix is formed. The result, `extrapolation.json` (or `extrapolation_<method>.json`), gives per
length the loss, perplexity, accuracy and the loss per position bucket (buckets of the training
length: positions [0, L_train), [L_train, 2 L_train), ...).
"""

from __future__ import annotations

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


def _evaluate_length(config, built, params, length, protocol, stride, max_tokens, bucket):
    windows = data.eval_windows(
        config.data, length, protocol=protocol, stride=stride or None,
        batch_size=config.eval.batch_size, max_tokens=max_tokens,
        mlm=config.data.mlm if config.model.kind == "mlm" else None,
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
                max_tokens=None, learned_extension=None, output=None) -> dict:
    """Evaluate the run in `workdir` at each length; write and return the result.

    Arguments left None take the run's `config.eval` value. A length the encoding cannot
    reach (a learned table, without `learned_extension`) gets an error row, not a result.

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
    base = trainer.build_encoding(config)
    apply_methods(base, spec, train_len, train_len)  # a method that cannot apply fails here
    dims = encoders.Dims(config.model.d_model, config.model.num_heads, config.model.head_dim,
                         train_len)
    params = trainer.restore_params(workdir, config, trainer.build(config, base))
    rows = []
    for length in sorted(lengths):
        try:
            encoding = _length_encoding(base, spec, extension, train_len, length, dims)
        except ConfigError as e:
            rows.append({"length": length, "error": str(e)})
            continue
        eval_config = config.copy_and_resolve_references()
        if length > config.eval.dense_max_len and config.model.attention == "dense":
            eval_config.model.attention = "chunked"
        built = trainer.build(eval_config, encoding)
        rows.append(_evaluate_length(eval_config, built, params, length, protocol, stride,
                                     max_tokens, train_len))
    result = {
        "run": workdir.name,
        "encoding": config.encoding.to_dict(),
        "train_len": train_len,
        "head_dim": config.model.head_dim,
        "protocol": protocol,
        "stride": stride if protocol == "sliding" else None,
        "method": spec or "none",
        "learned_extension": extension or None,
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
