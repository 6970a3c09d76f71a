"""Length extrapolation: evaluate a trained run at many lengths, optionally with a rotary
length-extension method chosen at evaluation time (no retraining).

For each length L the validation text is cut into windows of L tokens (positions 0..L-1):
non-overlapping windows score every token; sliding windows advance by a stride and score only
the new tokens. Windows are evaluated in rows of a row length R >= L: R / L windows per row as
separate packed segments (positions restarting at 0, attention masked across segments, so each
window scores exactly as alone), with R from a short ladder train_len * group_factor**i
(`row_lengths`, `config.eval.group_factor`, 1 = R = L). Lengths sharing R share one batch shape,
so a sweep of lengths compiles a handful of programs instead of one per length. With
model.attention="auto" (the default) rows longer than `model.dense_max_len` run chunked
attention inside the same model, so no [R, R] matrix is formed and nothing is rebuilt.

The result, `extrapolation.json` (or `extrapolation_<method>.json`), gives per length the loss,
perplexity, accuracy, the loss per position bucket (buckets of the training length: positions
[0, L_train), [L_train, 2 L_train), ...), the row length R it was evaluated in and the
seconds it took.
"""

from __future__ import annotations

import collections
import json
import math
import time

import numpy as np

from posjax.errors import ConfigError
from posjax.eval import methods
from posjax.eval.evaluation import TEXT_STEM, Evaluation, evaluation_lengths, register

# config.eval.group_factor of runs saved before the key existed.
DEFAULT_GROUP_FACTOR = 4


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
    (`posjax.eval.methods.length_encoding`), not R.
    """
    _check_group_factor(group_factor)
    if not encodings:
        return {}
    longest = max(encodings)
    rung = {n: ladder_row_len(n, train_len, group_factor, longest) for n in encodings}
    shared = collections.Counter((encodings[n], rung[n]) for n in encodings)
    return {n: rung[n] if shared[encodings[n], rung[n]] > 1 else n for n in encodings}


@register("text")
class TextExtrapolation(Evaluation):
    """A text run scored on windows of each evaluation length (see the module docstring)."""

    options = ("lengths", "protocol", "stride", "max_tokens", "group_factor")
    columns = (("loss", "loss", ".4f"), ("ppl", "ppl", ".3f"), ("acc", "acc", ".4f"))
    stem, report = TEXT_STEM, "text"

    @classmethod
    def check_before_training(cls, experiment, options: dict | None = None) -> None:
        """A batch at the longest length the run's encoding reaches fits the device, and the
        evaluation text (its first max_tokens tokens, `options`' or config.eval's) holds a
        window of it, or a one-line ConfigError naming the lengths: found before training
        rather than after it."""
        config, train_len, options = experiment.config, experiment.train_len, options or {}
        reached = []
        for length in evaluation_lengths(experiment, options.get("lengths")):
            try:
                methods.length_encoding(experiment.encoding, config.eval.rope_scaling,
                                        config.eval.get("learned_extension", ""), train_len,
                                        length, experiment.dims)
                reached.append(int(length))
            except ConfigError:  # scored as an error row, reading no text
                pass
        if not reached:
            return
        experiment.check_memory(max(reached), int(config.eval.batch_size), training=False)
        budget = int(options.get("max_tokens") or config.eval.max_tokens)
        scored = len(experiment.data.haystack_tokens(budget)) - 1
        if scored < max(reached):
            fit = [n for n in reached if n <= scored]
            raise ConfigError(
                f"the evaluation text ({config.data.dataset}, split "
                f"{config.data.eval_split}) has {scored} scored tokens, fewer than the "
                f"evaluation length {max(reached)}: evaluate at most {scored} tokens "
                f"(--config.eval.lengths=({','.join(map(str, fit or [scored]))},)) or give "
                "it more text")

    def run(self, *, lengths=None, protocol=None, stride=None, max_tokens=None,
            group_factor=None) -> dict:
        """Arguments left None take the run's `config.eval` value. A length the encoding
        cannot reach (a learned table, without `learned_extension`) gets an error row.
        group_factor: the row-length ladder (`row_lengths`); it changes which lengths share
        a compiled shape, not the scores (up to float rounding)."""
        config, train_len = self.experiment.config, self.experiment.train_len
        lengths = evaluation_lengths(self.experiment, lengths)
        protocol = protocol or config.eval.protocol
        if stride is not None and protocol != "sliding":
            raise ConfigError(f"--stride={stride} applies to sliding windows, and these are "
                              f"{protocol}: add --protocol=sliding, or drop --stride")
        if protocol == "sliding" and self.experiment.model_class.masked_lm:
            raise ConfigError("sliding windows score each window's last `stride` tokens, which "
                              "a masked LM reads with no context to their right, not with "
                              "more context as a causal LM does: score an MLM run with "
                              "non-overlapping windows (drop --protocol=sliding)")
        given = "--stride={}" if stride is not None else "the run's eval.stride={}"
        stride = stride if stride is not None else config.eval.stride
        if protocol == "sliding" and not stride:
            stride, given = train_len // 2, "the default --stride={} (half the training length)"
        if protocol == "sliding" and stride > min(lengths):  # each window advances by it
            raise ConfigError(f"{given.format(stride)} is longer than the length "
                              f"{min(lengths)}, whose windows it would skip tokens of: give "
                              f"--stride=S of at most {min(lengths)}, or lengths of at least "
                              f"{stride}")
        if group_factor is None:
            group_factor = config.eval.get("group_factor", DEFAULT_GROUP_FACTOR)
        encodings, errors = {}, {}
        for length in set(lengths):
            try:
                encodings[length] = self.encoding_at(train_len, length)
            except ConfigError as e:
                errors[length] = {"length": length, "error": str(e)}
        row_len = row_lengths(encodings, train_len, int(group_factor))
        if row_len:
            self.experiment.check_memory(max(row_len.values()), int(config.eval.batch_size),
                                         training=False)
        budget = int(max_tokens or config.eval.max_tokens)
        # A text shorter than the budget is scored whole: the result records the tokens it
        # holds, so a caption never claims more than were read.
        held = len(self.experiment.data.haystack_tokens(budget)) - 1
        windows = dict(protocol=protocol, stride=stride or None, max_tokens=min(budget, held))
        longest = max(encodings, default=0)
        if held < longest and held >= budget - 1:  # the budget, not the text, falls short
            given = "--max_tokens" if max_tokens else f"{self.weights.settings_of} eval.max_tokens"
            raise ConfigError(
                f"{given}={budget} scores fewer tokens than the length {longest} (it counts "
                f"the tokens scored, L in a window of L): give --max_tokens={longest} or more, "
                "or lower the lengths")
        rows = [errors[n] if n in errors else
                self.score_length(encodings[n], n, row_len[n], **windows) for n in lengths]
        return self.result(train_len, rows, protocol=protocol,
                           **({"masked_lm": True} if self.experiment.model_class.masked_lm
                              else {}),
                           stride=stride if protocol == "sliding" else None,
                           max_tokens=windows["max_tokens"],
                           group_factor=int(group_factor))

    def score_length(self, encoding, length, row_len, *, protocol, stride, max_tokens) -> dict:
        """Metrics of one length, with the wall seconds it took (compiling included);
        batches are [config.eval.batch_size, row_len]."""
        start = time.perf_counter()
        experiment, bucket = self.experiment, self.experiment.train_len
        windows = experiment.data.eval_windows(
            length, protocol=protocol, stride=stride,
            batch_size=experiment.config.eval.batch_size, max_tokens=max_tokens,
            mlm=experiment.mlm, row_len=row_len,
        )
        sums = _LengthSums(max(math.ceil(length / bucket), 1), bucket)
        for batch in windows:
            sums.add(*self.token_losses(encoding, batch), batch)
        return {"length": length, "row_len": row_len, **sums.finish(length),
                "seconds": round(time.perf_counter() - start, 3)}

    @classmethod
    def title(cls, result: dict) -> str:
        method = result["method"]
        block = result["encoding"].get("scaling") if "pretrained" in result else None
        own = json.loads(block) if isinstance(block, str) and block else dict(block or {})
        # the snapshot's block applies with no method, and under one that keeps it (logn,
        # the two-pass methods); a frequency map replaces it (replaced_scaling)
        shown = " ".join(str(own[k]) for k in ("rope_type", "factor") if own.get(k) is not None)
        if method == "none" and own:
            method = (f"none: the snapshot's own rope_scaling applies ({shown}; "
                      "--rope_scaling=linear:1 scores without it)")
        elif own and not result.get("replaced_scaling"):
            method += f", on top of the snapshot's own rope_scaling ({shown})"
        if result.get("replaced_scaling"):
            method += f", in place of the trained scaling {result['replaced_scaling']}"
        return (f"{result['run']} (trained at {result['train_len']}, {result['protocol']}, "
                f"method {method})")


class _LengthSums:
    """Loss, accuracy and per-position-bucket loss sums over one length's batches."""

    def __init__(self, num_buckets: int, bucket: int):
        self.bucket = bucket
        self.loss = self.correct = self.weight = 0.0
        self.bucket_loss = np.zeros(num_buckets)
        self.bucket_weight = np.zeros(num_buckets)

    def add(self, losses, correct, batch: dict) -> None:
        weights = np.asarray(batch["weights"], np.float64)
        self.loss += float(np.sum(losses * weights))
        self.correct += float(np.sum(correct * weights))
        self.weight += float(np.sum(weights))
        index = np.minimum(np.asarray(batch["positions"]) // self.bucket,
                           len(self.bucket_loss) - 1)
        np.add.at(self.bucket_loss, index, losses * weights)
        np.add.at(self.bucket_weight, index, weights)

    def finish(self, length: int) -> dict:
        if self.weight == 0:
            raise ConfigError(
                f"the validation split has fewer than {length} tokens: evaluate shorter lengths"
            )
        loss = self.loss / self.weight
        return {
            "loss": loss,
            "ppl": math.exp(min(loss, 50.0)),
            "acc": self.correct / self.weight,
            "tokens": int(self.weight),
            "bucket_size": self.bucket,
            "bucket_loss": [(float(s / w) if w else None)
                            for s, w in zip(self.bucket_loss, self.bucket_weight, strict=True)],
        }
