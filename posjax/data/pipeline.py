"""grain pipelines: packed LM / MLM training batches, evaluation windows, task batches.

Batches are dicts of numpy arrays (CONTRACTS.md):

    LM / MLM   inputs, targets, positions, segment_ids int32[B, L]; weights float32[B, L]
    patch2d    patches float32[B, N, P], positions int32[B, N, 2], segment_ids int32[B, N],
               targets int32[B, N], weights float32[B, N]

Training (`train_iterator`) is a grain pipeline, deterministic in `seed`, whose iterator has
`get_state()` / `set_state()` (JSON-able dicts) for checkpoints:

    documents, shuffled per epoch and repeated forever
    -> tokens: BOS + encode(text) + EOS        (algorithmic: prompt SEP answer)
    -> pieces: a document longer than L is cut into consecutive pieces of L tokens (the
       last one shorter); every piece is its own segment, so positions restart at 0 in
       each piece, just as a model would see a document of that length
    -> first-fit packing into B rows of L tokens (grain FirstFitPackIterDataset):
       segment_ids 1, 2, ... per row in order of arrival, 0 on padding; positions
       0, 1, ... within each segment
    -> targets[t] = inputs[t + 1] inside a segment; weights 0 at the last token of every
       segment and on padding (algorithmic: weights 1 only where the target is an answer
       token)
    -> batch of B rows; MLM: masking per batch (Devlin et al. 2019, arXiv:1810.04805)

Evaluation (`eval_windows`) reads the evaluation split in stored order (stdlib_text: sorted
paths) and concatenates its documents as in training (BOS doc EOS BOS doc EOS ...) into one
stream, as in the WikiText-103 and PG-19 extrapolation protocols (Press et al. 2022, ALiBi,
arXiv:2108.12409). Windows hold exactly `length` tokens, one segment, positions
0..length-1. The scored targets are the first `max_tokens` stream tokens after the first
(all of them when None), minus the BOS tokens that open each document (training never
predicts a BOS): the same tokens at every length and under both protocols, so losses at
different lengths compare the same predictions made with different amounts of context.

    nonoverlapping  windows advance by `length`; each scores all its targets
    sliding         windows advance by `stride` (default length // 2); the first scores all
                    its targets, every later one only its last `stride` (the new ones)

In both, the last window ends at the last scored token and scores only tokens no earlier
window scored.

Windows may be packed (`row_len`, `pack_windows`): k = row_len / length consecutive windows
share one row as segments 1..k, positions restarting at 0 in each. Attention never crosses
segments and every window keeps its own positions, so each window is scored exactly as alone;
the point is that lengths sharing a row length share one compiled batch shape.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from collections.abc import Callable, Iterator

import grain
import numpy as np

from posjax.data import algorithmic, grid2d, sources, tokenizers
from posjax.errors import ConfigError, unknown

# Two reader threads: tokenizing is cheap next to a model step, and the machine is small.
READ_OPTIONS = grain.ReadOptions(num_threads=2, prefetch_buffer_size=64)

LM_KEYS = ("inputs", "targets", "positions", "segment_ids", "weights")


# --- pure pieces ------------------------------------------------------------------------


def lm_example(inputs, segment_ids, positions, score) -> dict:
    """Packed tokens -> LM arrays; works on [L] rows and [B, L] batches alike.

    targets[t] = inputs[t + 1] when tokens t and t + 1 share a (non-padding) segment, else 0;
    weights[t] = score[t + 1] there, else 0 (score: 1 for tokens that count as targets).
    """
    inputs = np.asarray(inputs, np.int32)
    segment_ids = np.asarray(segment_ids, np.int32)
    same = np.zeros(inputs.shape, bool)
    same[..., :-1] = (segment_ids[..., 1:] == segment_ids[..., :-1]) & (segment_ids[..., :-1] > 0)
    targets = np.zeros_like(inputs)
    targets[..., :-1] = inputs[..., 1:]
    weights = np.zeros(inputs.shape, np.float32)
    weights[..., :-1] = np.asarray(score)[..., 1:]
    return {
        "inputs": inputs,
        "targets": np.where(same, targets, 0).astype(np.int32),
        "positions": np.asarray(positions, np.int32),
        "segment_ids": segment_ids,
        "weights": np.where(same, weights, 0.0).astype(np.float32),
    }


@dataclasses.dataclass(frozen=True)
class MLMConfig:
    """BERT masking: select `mask_rate` of the tokens; of those, replace `mask_token_fraction`
    with MASK, `random_token_fraction` with a random token, and keep the rest."""

    mask_rate: float = 0.15
    mask_token_fraction: float = 0.8
    random_token_fraction: float = 0.1

    @classmethod
    def from_config(cls, mlm) -> MLMConfig:
        """From a ConfigDict / mapping with (a subset of) the field names."""
        if isinstance(mlm, MLMConfig):
            return mlm
        fields = {f.name for f in dataclasses.fields(cls)}
        given = dict(mlm.items())
        extra = sorted(set(given) - fields)
        if extra:
            raise unknown("mlm field", extra[0], fields)
        cfg = cls(**{k: float(v) for k, v in given.items()})
        if (
            not 0.0 < cfg.mask_rate < 1.0
            or min(cfg.mask_token_fraction, cfg.random_token_fraction) < 0.0
            or cfg.mask_token_fraction + cfg.random_token_fraction > 1.0
        ):
            raise ConfigError(
                f"mlm {cfg} is invalid: need 0 < mask_rate < 1 and non-negative "
                "mask_token_fraction + random_token_fraction <= 1 (BERT: 0.15, 0.8, 0.1)"
            )
        return cfg


def mask_for_mlm(
    batch: dict,
    rng: np.random.Generator,
    mlm: MLMConfig,
    tokenizer: tokenizers.Tokenizer,
    *,
    candidates: np.ndarray | None = None,
) -> dict:
    """MLM masking of an LM batch (Devlin et al. 2019, "BERT", arXiv:1810.04805, sec. 3.1).

    Each non-special token in a segment (and in `candidates`, bool like inputs, if given) is
    selected with probability mask_rate; a selected token becomes MASK with probability
    mask_token_fraction, a uniform random regular token with probability
    random_token_fraction, else stays. Returns inputs masked, targets = the original inputs,
    weights = 1.0 exactly at selected tokens; positions and segment_ids unchanged.
    """
    inputs = batch["inputs"]
    eligible = (batch["segment_ids"] > 0) & (inputs >= tokenizer.first_regular_id)
    if candidates is not None:
        eligible &= candidates
    selected = eligible & (rng.random(inputs.shape) < mlm.mask_rate)
    action = rng.random(inputs.shape)
    to_mask = selected & (action < mlm.mask_token_fraction)
    to_random = (
        selected
        & (action >= mlm.mask_token_fraction)
        & (action < mlm.mask_token_fraction + mlm.random_token_fraction)
    )
    random_tokens = rng.integers(tokenizer.first_regular_id, tokenizer.vocab_size, inputs.shape)
    masked = np.where(to_mask, tokenizer.mask_id, np.where(to_random, random_tokens, inputs))
    return {
        **batch,
        "inputs": masked.astype(np.int32),
        "targets": inputs.astype(np.int32),
        "weights": selected.astype(np.float32),
    }


def window_plan(num_targets: int, length: int, stride: int) -> list[tuple[int, int]]:
    """[(start, score_from)]: windows of `length` over targets 0..num_targets-1 (see module).

    Window (s, f) predicts targets s .. s + length - 1 and scores those at offsets >= f. The
    first window scores all; later ones advance by `stride` and score what is new; the last
    one ends exactly at num_targets. Every target is scored exactly once.
    """
    if num_targets < length:
        raise ConfigError(
            f"the evaluation text has {num_targets} scored tokens, fewer than the window "
            f"length {length}; lower the length or use a larger evaluation split"
        )
    if not 1 <= stride <= length:
        raise ConfigError(f"stride={stride} must be in 1..length={length}")
    plan, scored_end = [(0, 0)], length
    while scored_end < num_targets:
        end = min(scored_end + stride, num_targets)
        plan.append((end - length, scored_end - (end - length)))
        scored_end = end
    return plan


class SplitPieces(grain.experimental.FlatMapTransform):
    """Cut every array of an example into consecutive pieces of at most `max_len` tokens."""

    # Only the MapDataset flat map uses max_fan_out; the IterDataset one streams any count.
    max_fan_out = sys.maxsize

    def __init__(self, max_len: int):
        self.max_len = max_len

    def flat_map(self, example: dict) -> list[dict]:
        n = len(example["inputs"])
        return [
            {k: v[i : i + self.max_len] for k, v in example.items()}
            for i in range(0, max(n, 1), self.max_len)
        ]


def pack_lm(
    docs: grain.IterDataset, seq_len: int, batch_size: int, *, drop_remainder: bool = True
) -> grain.IterDataset:
    """{"inputs": int32[n], "score": int32[n]} documents -> packed LM batches (see module)."""
    if seq_len < 2:
        raise ConfigError(f"seq_len must be >= 2 to have a next token to predict, got {seq_len}")
    pieces = grain.experimental.FlatMapIterDataset(docs, SplitPieces(seq_len))
    packed = grain.experimental.FirstFitPackIterDataset(
        pieces,
        length_struct={"inputs": seq_len, "score": seq_len},
        num_packing_bins=batch_size,
        shuffle_bins=False,
    )
    rows = packed.map(
        lambda r: lm_example(
            r["inputs"], r["inputs_segment_ids"], r["inputs_positions"], r["score"]
        )
    )
    return rows.batch(batch_size, drop_remainder=drop_remainder)


def text_document(example: dict, *, tokenizer, text_key: str) -> dict:
    """One TFDS example -> {"inputs": BOS + tokens + EOS, "score": ones}."""
    tokens = tokenizer.encode(sources.text_of(example, text_key))
    inputs = np.concatenate([[tokenizer.bos_id], tokens, [tokenizer.eos_id]]).astype(np.int32)
    return {"inputs": inputs, "score": np.ones_like(inputs)}


def task_document(example: dict) -> dict:
    """One algorithmic example -> {"inputs": tokens, "score": answer_mask}."""
    tokens = np.asarray(example["tokens"], np.int32)
    return {"inputs": tokens, "score": np.asarray(example["answer_mask"], np.int32)}


def patch_example(example: dict) -> dict:
    """One grid2d example -> the patch2d arrays (every cell is scored)."""
    targets = np.asarray(example["targets"], np.int32)
    return {
        "patches": np.asarray(example["patches"], np.float32),
        "positions": np.asarray(example["positions"], np.int32),
        "segment_ids": np.ones_like(targets),
        "targets": targets,
        "weights": np.ones(targets.shape, np.float32),
    }


# --- training ---------------------------------------------------------------------------


def _shuffled_forever(data_cfg, seed: int) -> grain.MapDataset:
    source = sources.data_source(data_cfg, data_cfg.train_split)
    # shuffle before repeat: grain reseeds the shuffle every epoch.
    return grain.MapDataset.source(source).shuffle(seed=seed).repeat()


def _text_train(data_cfg, seq_len, batch_size, seed, mlm) -> grain.IterDataset:
    tokenizer = tokenizers.get_tokenizer(data_cfg)
    docs = _shuffled_forever(data_cfg, seed).map(
        functools.partial(text_document, tokenizer=tokenizer, text_key=data_cfg.text_key)
    )
    batches = pack_lm(docs.to_iter_dataset(READ_OPTIONS), seq_len, batch_size)
    if mlm is None:
        return batches
    cfg = MLMConfig.from_config(mlm)
    return batches.random_map(lambda b, rng: mask_for_mlm(b, rng, cfg, tokenizer), seed=seed)


def _check_task_fits(data_cfg, seq_len: int) -> None:
    task = algorithmic.get_task(data_cfg.task)
    longest = task.length(int(data_cfg.train_lengths[1]))
    if seq_len < longest:
        raise ConfigError(
            f"task {data_cfg.task!r} with train_lengths up to {data_cfg.train_lengths[1]} makes "
            f"sequences of {longest} tokens; set seq_len >= {longest}"
        )


def _algorithmic_train(data_cfg, seq_len, batch_size, seed, mlm) -> grain.IterDataset:
    if mlm is not None:
        raise ConfigError("MLM masking applies to text datasets; algorithmic tasks are causal")
    _check_task_fits(data_cfg, seq_len)
    docs = _shuffled_forever(data_cfg, seed).map(task_document)
    return pack_lm(docs.to_iter_dataset(READ_OPTIONS), seq_len, batch_size)


def _grid2d_train(data_cfg, seq_len, batch_size, seed, mlm) -> grain.IterDataset:
    del seq_len  # a grid has grid_size**2 cells whatever the stage's seq_len
    if mlm is not None:
        raise ConfigError("MLM masking applies to text datasets; grid2d is classification")
    examples = _shuffled_forever(data_cfg, seed).map(patch_example)
    return examples.to_iter_dataset(READ_OPTIONS).batch(batch_size, drop_remainder=True)


TRAIN_PIPELINES: dict[str, Callable[..., grain.IterDataset]] = {
    "text": _text_train,
    "algorithmic": _algorithmic_train,
    "grid2d": _grid2d_train,
}


def train_dataset(data_cfg, seq_len: int, batch_size: int, seed: int, *, mlm=None):
    """The training pipeline as a grain IterDataset (iterate it for `train_iterator`)."""
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    kind = sources.dataset_kind(data_cfg)
    return TRAIN_PIPELINES[kind](data_cfg, int(seq_len), int(batch_size), int(seed), mlm)


def train_iterator(
    data_cfg, seq_len: int, batch_size: int, seed: int, *, mlm=None
) -> grain.DatasetIterator:
    """Endless iterator of training batches; `.get_state()` / `.set_state(s)` restore it.

    Text datasets: packed LM batches (MLM when `mlm` is a config with mask_rate,
    mask_token_fraction, random_token_fraction). algorithmic: packed LM batches whose
    weights cover answer tokens only. grid2d: patch2d batches (seq_len is ignored).
    """
    return iter(train_dataset(data_cfg, seq_len, batch_size, seed, mlm=mlm))


# --- evaluation -------------------------------------------------------------------------


def eval_stream(data_cfg, split: str, max_tokens: int | None = None) -> np.ndarray:
    """int32[n]: the split's documents as BOS doc EOS ..., at most max_tokens + 1 tokens."""
    tokenizer = tokenizers.get_tokenizer(data_cfg)
    source = sources.data_source(data_cfg, split)
    pieces, total = [], 0
    for i in range(len(source)):
        doc = text_document(source[i], tokenizer=tokenizer, text_key=data_cfg.text_key)
        pieces.append(doc["inputs"])
        total += len(doc["inputs"])
        if max_tokens is not None and total > max_tokens:
            break
    stream = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
    return stream[: max_tokens + 1] if max_tokens is not None else stream


PROTOCOLS: dict[str, Callable[[int, int | None], int]] = {
    "nonoverlapping": lambda length, stride: length,
    "sliding": lambda length, stride: stride or max(1, length // 2),
}


def _pad_rows(rows: list[dict], batch_size: int) -> dict:
    """Stack rows and add all-zero rows (segment 0, weight 0) up to batch_size."""
    batch = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    missing = batch_size - len(rows)
    return {
        k: np.concatenate([v, np.zeros((missing, *v.shape[1:]), v.dtype)]) if missing else v
        for k, v in batch.items()
    }


def _batched(rows: Iterator[dict], batch_size: int) -> Iterator[dict]:
    chunk = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == batch_size:
            yield _pad_rows(chunk, batch_size)
            chunk = []
    if chunk:
        yield _pad_rows(chunk, batch_size)


def _check_row_len(length: int, row_len: int) -> None:
    if row_len < length or row_len % length:
        raise ConfigError(
            f"row_len={row_len} must be a multiple of the window length {length} (a row holds "
            "whole windows)"
        )


def _pack_row(windows: list[dict], per_row: int) -> dict:
    """Concatenate up to `per_row` windows of [length] arrays into one [per_row * length] row.

    Window j becomes segment j + 1 (its padding, segment 0, stays 0); missing windows at the
    end are all-zero padding (segment 0, weight 0).
    """
    length = len(windows[0]["inputs"])
    missing = per_row - len(windows)
    row = {}
    for key in windows[0]:
        if key == "segment_ids":
            parts = [
                np.where(w[key] > 0, j + 1, 0).astype(w[key].dtype) for j, w in enumerate(windows)
            ]
        else:
            parts = [w[key] for w in windows]
        if missing:
            parts.append(np.zeros((missing * length, *parts[0].shape[1:]), parts[0].dtype))
        row[key] = np.concatenate(parts)
    return row


def pack_windows(windows: Iterator[dict], length: int, row_len: int) -> Iterator[dict]:
    """Evaluation windows -> rows of `row_len` tokens holding k = row_len // length windows.

    windows: dicts of [length] arrays (LM_KEYS), in order. Yields dicts of [row_len] arrays:
    window j of a row fills tokens j*length .. (j+1)*length - 1 as segment j + 1 with its own
    inputs, targets, positions (restarting at 0) and weights, unchanged; the last row is
    filled up with padding (segment 0, weight 0). The models mask attention across segments
    and read positions as data, so each window's per-token losses are those it gets alone,
    and the scored tokens are exactly the windows' scored tokens. row_len must be a multiple
    of length (row_len == length: one window per row). Raises ConfigError at the call.
    """
    _check_row_len(length, row_len)
    per_row = row_len // length

    def rows() -> Iterator[dict]:
        chunk: list[dict] = []
        for window in windows:
            chunk.append(window)
            if len(chunk) == per_row:
                yield _pack_row(chunk, per_row)
                chunk = []
        if chunk:
            yield _pack_row(chunk, per_row)

    return rows()


def eval_windows(
    data_cfg,
    length: int,
    *,
    batch_size: int,
    protocol: str = "nonoverlapping",
    stride: int | None = None,
    split: str | None = None,
    max_tokens: int | None = None,
    max_windows: int | None = None,
    mlm=None,
    seed: int = 0,
    row_len: int | None = None,
) -> Iterator[dict]:
    """LM batches of evaluation windows of exactly `length` tokens (see the module docstring).

    Every window: positions 0..length-1, one segment, weights 1 at scored targets. With
    row_len None (or = length) a row is one window (segment_ids 1) and batches have shape
    [batch_size, length]; with row_len = k * length a row packs k consecutive windows as
    segments 1..k (`pack_windows`) and batches have shape [batch_size, row_len], so lengths
    that share a row length share one compiled shape; the scored tokens and their
    positions are the same either way. The last batch is filled with all-zero rows (weights
    0) to full shape. max_tokens caps the scored stream (the same tokens at every length);
    max_windows stops after that many windows (a quick look: the scored set then depends on
    the length). mlm: score masked-token prediction instead (targets = the window itself,
    masks drawn only among the tokens the window scores, seeded by (seed, window index)).
    split defaults to data.eval_split.
    """
    if sources.dataset_kind(data_cfg) != "text":
        raise ConfigError(
            f"eval_windows reads text; dataset {data_cfg.dataset!r} is evaluated with "
            "task_eval_batches"
        )
    if protocol not in PROTOCOLS:
        raise unknown("evaluation protocol", protocol, PROTOCOLS)
    if row_len is not None:
        _check_row_len(length, row_len)  # now, not at the first batch
    stream = eval_stream(data_cfg, split or data_cfg.eval_split, max_tokens)
    plan = window_plan(len(stream) - 1, length, PROTOCOLS[protocol](length, stride))
    if max_windows is not None:
        plan = plan[:max_windows]
    tokenizer = tokenizers.get_tokenizer(data_cfg)
    mlm_cfg = None if mlm is None else MLMConfig.from_config(mlm)

    def rows() -> Iterator[dict]:
        offsets = np.arange(length)
        for index, (start, score_from) in enumerate(plan):
            window = stream[start : start + length + 1]
            scored = (offsets >= score_from) & (window[1:] != tokenizer.bos_id)
            row = {
                "inputs": window[:-1].astype(np.int32),
                "targets": window[1:].astype(np.int32),
                "positions": offsets.astype(np.int32),
                "segment_ids": np.ones(length, np.int32),
                "weights": scored.astype(np.float32),
            }
            if mlm_cfg is not None:
                # MLM scores the window's own tokens at the same offsets, so windows still
                # cover the stream (tokens 0..N-1 instead of targets 1..N) exactly once.
                row = mask_for_mlm(
                    row,
                    np.random.default_rng([seed, index]),
                    mlm_cfg,
                    tokenizer,
                    candidates=offsets >= score_from,
                )
            yield row

    if row_len is None or row_len == length:
        return _batched(rows(), batch_size)
    return _batched(pack_windows(rows(), length, row_len), batch_size)


def task_eval_batches(
    data_cfg, batch_size: int, *, splits: tuple[str, ...] | None = None
) -> Iterator[tuple[str, int, dict]]:
    """(split, size, batch) for algorithmic and grid2d evaluation, one size per batch.

    size = problem size n (algorithmic) or grid side (grid2d). Default splits: algorithmic
    validation (train lengths) and test (test lengths); grid2d validation and every test_<S>.
    Algorithmic rows hold one example each (segment 1, positions 0..T-1, weights on answer
    targets); the last batch of a size is filled with all-zero rows.
    """
    kind = sources.dataset_kind(data_cfg)
    if kind not in TASK_EVALS:
        raise ConfigError(
            f"task_eval_batches reads algorithmic or grid2d data; evaluate {data_cfg.dataset!r} "
            "with eval_windows"
        )
    all_splits = sources.split_names(data_cfg)
    for split in splits or tuple(s for s in all_splits if s != "train"):
        yield from TASK_EVALS[kind](data_cfg, split, batch_size)


def _algorithmic_eval(data_cfg, split, batch_size):
    source = sources.data_source(data_cfg, split)
    by_size: dict[int, list[dict]] = {}
    for i in range(len(source)):
        example = source[i]
        doc = task_document(example)
        n = len(doc["inputs"])
        row = lm_example(doc["inputs"], np.ones(n, np.int32), np.arange(n), doc["score"])
        by_size.setdefault(int(example["size"]), []).append(row)
    for size in sorted(by_size):
        for batch in _batched(iter(by_size[size]), batch_size):
            yield split, size, batch


def _grid2d_eval(data_cfg, split, batch_size):
    source = sources.data_source(data_cfg, split)
    rows = (patch_example(source[i]) for i in range(len(source)))
    for batch in _batched(rows, batch_size):
        yield split, math.isqrt(batch["patches"].shape[1]), batch


TASK_EVALS = {"algorithmic": _algorithmic_eval, "grid2d": _grid2d_eval}


# --- shapes without data ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BatchSpec:
    """What a model needs to know before any data is read.

    kind: "tokens" (LM / MLM batches) or "patches" (patch2d batches); arrays: name ->
    jax.ShapeDtypeStruct of one batch; vocab_size: token ids are < vocab_size (0 for
    patches); num_classes: classes of patch targets (0 for tokens); patch_dim: P (0 for
    tokens).
    """

    kind: str
    arrays: dict
    vocab_size: int = 0
    num_classes: int = 0
    patch_dim: int = 0


def _token_arrays(seq_len: int, batch_size: int) -> dict:
    import jax  # noqa: PLC0415 - only shapes need jax; the pipeline itself never does

    shape = (batch_size, seq_len)
    return {
        k: jax.ShapeDtypeStruct(shape, np.float32 if k == "weights" else np.int32) for k in LM_KEYS
    }


def _text_spec(data_cfg, seq_len: int, batch_size: int) -> BatchSpec:
    return BatchSpec(
        "tokens", _token_arrays(seq_len, batch_size), vocab_size=tokenizers.vocab_size(data_cfg)
    )


def _algorithmic_spec(data_cfg, seq_len: int, batch_size: int) -> BatchSpec:
    _check_task_fits(data_cfg, seq_len)
    return _text_spec(data_cfg, seq_len, batch_size)


def _grid2d_spec(data_cfg, seq_len: int, batch_size: int) -> BatchSpec:
    import jax  # noqa: PLC0415

    del seq_len
    task = grid2d.get_grid_task(data_cfg.task)
    b, n, p = batch_size, int(data_cfg.grid_size) ** 2, 1 + int(data_cfg.num_colors)
    arrays = {
        "patches": jax.ShapeDtypeStruct((b, n, p), np.float32),
        "positions": jax.ShapeDtypeStruct((b, n, 2), np.int32),
        "segment_ids": jax.ShapeDtypeStruct((b, n), np.int32),
        "targets": jax.ShapeDtypeStruct((b, n), np.int32),
        "weights": jax.ShapeDtypeStruct((b, n), np.float32),
    }
    classes = task.num_classes(int(data_cfg.max_distance))
    return BatchSpec("patches", arrays, num_classes=classes, patch_dim=p)


SPECS: dict[str, Callable[..., BatchSpec]] = {
    "text": _text_spec,
    "algorithmic": _algorithmic_spec,
    "grid2d": _grid2d_spec,
}


def batch_spec(data_cfg, seq_len: int, batch_size: int) -> BatchSpec:
    """Shapes, dtypes and vocabulary of `train_iterator(data_cfg, seq_len, batch_size, ...)`.

    Reads only the config (no data, no tokenizer training): SentencePiece models are trained
    to exactly data.sentencepiece_vocab_size pieces. grid2d ignores seq_len (N = grid_size**2).
    """
    kind = sources.dataset_kind(data_cfg)
    return SPECS[kind](data_cfg, int(seq_len), int(batch_size))
