"""Evaluation batches: windows of a text stream by length, and padded batches of examples.

Text (`text_windows`) reads the evaluation split in stored order (stdlib_text: sorted paths)
and concatenates its documents as in training (BOS doc EOS BOS doc EOS ...) into one stream
(`text_stream`), as in the WikiText-103 and PG-19 extrapolation protocols (Press et al. 2022,
ALiBi, arXiv:2108.12409). Windows hold exactly `length` tokens, one segment, positions
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

These batches are not read through grain, unlike training's: they are a deterministic cut
of one stream that is already in memory (or of an evaluation split read once, in order), with
nothing to shuffle, repeat or checkpoint, and the last batch of a length is padded to full
shape with all-zero rows (`batched`) so that one compiled program serves every batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from posjax.data.packing import MLMConfig, mask_for_mlm, text_document, text_of
from posjax.errors import ConfigError, unknown


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


def text_stream(documents: Sequence[dict], tokenizer, text_key: str,
                max_tokens: int | None = None, *, plain: bool = False) -> np.ndarray:
    """int32[n]: the documents as BOS doc EOS ..., or with `plain` as one text, each document
    followed by a newline and no BOS or EOS (the haystack of a needle, as Kamradt's essays are
    concatenated); at most max_tokens + 1 tokens."""
    pieces, total = [], 0
    newline = np.asarray(tokenizer.encode("\n"), np.int32)
    for i in range(len(documents)):
        piece = (np.concatenate([tokenizer.encode(text_of(documents[i], text_key)), newline])
                 if plain else text_document(documents[i], tokenizer=tokenizer,
                                             text_key=text_key)["inputs"])
        pieces.append(piece.astype(np.int32))
        total += len(piece)
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


def _groups(items: Iterator, size: int) -> Iterator[list]:
    """Consecutive lists of `size` items, the last one possibly shorter."""
    group = []
    for item in items:
        group.append(item)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group


def batched(rows: Iterator[dict], batch_size: int) -> Iterator[dict]:
    """Batches of `batch_size` rows, the last one filled up with all-zero rows."""
    return (_pad_rows(chunk, batch_size) for chunk in _groups(rows, batch_size))


def _check_row_len(length: int, row_len: int) -> None:
    if row_len < length or row_len % length:
        raise ConfigError(
            f"row_len={row_len} must be a multiple of the window length {length} (a row holds "
            "whole windows)"
        )


def check_window_options(length: int, *, protocol: str = "nonoverlapping",
                         row_len: int | None = None, **unused) -> None:
    """Raise the ConfigError `text_windows` would for these options, before any data is read."""
    del unused
    if protocol not in PROTOCOLS:
        raise unknown("evaluation protocol", protocol, PROTOCOLS)
    if row_len is not None:
        _check_row_len(length, row_len)


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
    return (_pack_row(chunk, per_row) for chunk in _groups(windows, per_row))


def _window_rows(stream: np.ndarray, plan, length: int, tokenizer, mlm_cfg,
                 seed: int) -> Iterator[dict]:
    """One LM row per planned window (start, score_from) of `stream`."""
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
            row = mask_for_mlm(row, np.random.default_rng([seed, index]), mlm_cfg, tokenizer,
                               candidates=offsets >= score_from)
        yield row


def text_windows(
    stream: np.ndarray,
    tokenizer,
    length: int,
    *,
    batch_size: int,
    protocol: str = "nonoverlapping",
    stride: int | None = None,
    max_windows: int | None = None,
    mlm=None,
    seed: int = 0,
    row_len: int | None = None,
) -> Iterator[dict]:
    """LM batches of windows of exactly `length` tokens of `stream` (see the module docstring).

    Every window: positions 0..length-1, one segment, weights 1 at scored targets. With
    row_len None (or = length) a row is one window (segment_ids 1) and batches have shape
    [batch_size, length]; with row_len = k * length a row packs k consecutive windows as
    segments 1..k (`pack_windows`) and batches have shape [batch_size, row_len], so lengths
    that share a row length share one compiled shape; the scored tokens and their
    positions are the same either way. The last batch is filled with all-zero rows (weights
    0) to full shape. max_windows stops after that many windows (a quick look: the scored
    set then depends on the length). mlm: score masked-token prediction instead (targets =
    the window itself, masks drawn only among the tokens the window scores, seeded by
    (seed, window index)).
    """
    check_window_options(length, protocol=protocol, row_len=row_len)
    plan = window_plan(len(stream) - 1, length, PROTOCOLS[protocol](length, stride))
    if max_windows is not None:
        plan = plan[:max_windows]
    mlm_cfg = None if mlm is None else MLMConfig.from_config(mlm)
    rows = _window_rows(stream, plan, length, tokenizer, mlm_cfg, seed)
    if row_len is None or row_len == length:
        return batched(rows, batch_size)
    return batched(pack_windows(rows, length, row_len), batch_size)
