"""Packing documents into LM batches, and BERT's masking of them.

Batches are dicts of numpy arrays:

    LM / MLM   inputs, targets, positions, segment_ids int32[B, L]; weights float32[B, L]

A document is {"inputs": int32[n], "score": int32[n]} (score 1 where a token counts as a
target). Packing (`pack_lm`):

    pieces: a document longer than L is cut into consecutive pieces of L tokens (the last
       one shorter); every piece is its own segment, so positions restart at 0 in each
       piece, just as a model would see a document of that length
    -> first-fit packing into B rows of L tokens (grain FirstFitPackIterDataset):
       segment_ids 1, 2, ... per row in order of arrival, 0 on padding; positions
       0, 1, ... within each segment
    -> targets[t] = inputs[t + 1] inside a segment; weights 0 at the last token of every
       segment and on padding, else the next token's score
    -> batch of B rows

MLM (`mask_for_mlm`) then masks a batch (Devlin et al. 2019, arXiv:1810.04805).
"""

from __future__ import annotations

import dataclasses
import sys

import grain
import numpy as np

from posjax.data import tokenizers
from posjax.errors import ConfigError, unknown

LM_KEYS = ("inputs", "targets", "positions", "segment_ids", "weights")


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
            given = ", ".join(f"{f.name}={getattr(cfg, f.name):g}"
                              for f in dataclasses.fields(cfg))
            raise ConfigError(
                f"config.data.mlm {given} is invalid: need 0 < mask_rate < 1 and non-negative "
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


def stream_lm(docs: grain.IterDataset, seq_len: int, batch_size: int) -> grain.IterDataset:
    """Documents -> LM batches cut from their concatenation (GPT-2's and nanoGPT's layout):
    every row is L consecutive tokens of the stream BOS doc EOS BOS doc EOS ..., one segment
    (id 1, no padding) at positions 0..L-1, so a token attends across document boundaries
    and every row has the same positions (see `ROW_LAYOUTS`)."""
    if seq_len < 2:
        raise ConfigError(f"seq_len must be >= 2 to have a next token to predict, got {seq_len}")
    rows = grain.experimental.ConcatThenSplitIterDataset(
        docs, length_struct={"inputs": seq_len, "score": seq_len})
    whole = np.ones(seq_len, np.int32)
    positions = np.arange(seq_len, dtype=np.int32)
    return rows.map(
        lambda r: lm_example(r["inputs"], whole, positions, r["score"])
    ).batch(batch_size, drop_remainder=True)


# data.packing: how documents become rows of L tokens. "documents" keeps each document (or
# each L-token piece of a long one) its own segment, first-fit packed, with padding: the
# attention masks across segments. "stream" cuts the concatenated stream: rows are whole,
# so no mask is needed and the position terms are built once for the batch.
ROW_LAYOUTS = {"documents": pack_lm, "stream": stream_lm}


def text_of(example: dict, text_key: str) -> str:
    """The text of one example (TFDS returns Text features as bytes)."""
    if text_key not in example:
        raise ConfigError(
            f"examples have no field {text_key!r}; set data.text_key to one of "
            f"{', '.join(sorted(example))}"
        )
    value = example[text_key]
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def text_document(example: dict, *, tokenizer, text_key: str) -> dict:
    """One TFDS example -> {"inputs": BOS + tokens + EOS, "score": ones}."""
    tokens = tokenizer.encode(text_of(example, text_key))
    inputs = np.concatenate([[tokenizer.bos_id], tokens, [tokenizer.eos_id]]).astype(np.int32)
    return {"inputs": inputs, "score": np.ones_like(inputs)}
