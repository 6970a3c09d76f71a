"""What a model needs to know about a batch before any data is read."""

from __future__ import annotations

import dataclasses

import numpy as np

from posjax.data.packing import LM_KEYS


@dataclasses.dataclass(frozen=True)
class BatchSpec:
    """What a model needs to know before any data is read.

    kind: "tokens" (LM / MLM batches) or "patches" (patch2d batches); arrays: name ->
    jax.ShapeDtypeStruct of one batch; vocab_size: token ids are < vocab_size (0 for
    patches); num_classes: classes of patch targets (0 for tokens); patch_dim: P (0 for
    tokens); whole_rows: every training row is one segment without padding at positions
    0..L-1 (data.packing="stream"), so the train step calls the model without segment ids:
    no attention mask, and the position terms built once for the batch; position_axes: 0
    for positions int32[B, L], A for int32[B, L, A] (a token sequence whose positions have
    A components, e.g. M-RoPE's (t, h, w)); gapless_positions: every segment's positions
    count up by one token by token (packed documents, a stream), so two tokens of one segment
    are as far apart in position as in the row, and an encoding that reads only that gap
    (`Encoding.distance_only`) can be handed one row of positions for the whole batch.
    """

    kind: str
    arrays: dict
    vocab_size: int = 0
    num_classes: int = 0
    patch_dim: int = 0
    whole_rows: bool = False
    position_axes: int = 0
    gapless_positions: bool = False


def token_arrays(seq_len: int, batch_size: int) -> dict:
    """The LM / MLM batch arrays (LM_KEYS) of shape [batch_size, seq_len] as shapes."""
    import jax  # noqa: PLC0415 - only shapes need jax; the pipeline itself never does

    shape = (batch_size, seq_len)
    return {
        k: jax.ShapeDtypeStruct(shape, np.float32 if k == "weights" else np.int32) for k in LM_KEYS
    }
