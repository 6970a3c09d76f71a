"""The training pipeline's shared pieces: a source shuffled per epoch and repeated forever,
and documents packed into LM batches (masked for MLM).

Each data kind composes these in its `train_dataset` (posjax.data.kinds); the result is a
grain IterDataset, deterministic in its seed, whose iterator has `get_state()` /
`set_state()` (JSON-able dicts) for checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import grain
import numpy as np
from grain.experimental import ZipIterDataset

from posjax.data.packing import ROW_LAYOUTS, MLMConfig, mask_for_mlm
from posjax.errors import unknown

# Two reader threads: tokenizing is cheap next to a model step, and the machine is small.
READ_OPTIONS = grain.ReadOptions(num_threads=2, prefetch_buffer_size=64)


# (index, count): the whole source is shard (0, 1).
Shard = tuple[int, int]
WHOLE: Shard = (0, 1)


def shuffled_forever(source: Sequence, seed: int, shard: Shard = WHOLE) -> grain.MapDataset:
    """Shard `index` of `count` of `source` (every count-th example from the index-th), in
    a fresh order every epoch (seeded), repeated without end."""
    index, count = shard
    # shuffle before repeat: grain reseeds the shuffle every epoch.
    return grain.MapDataset.source(source)[index::count].shuffle(seed=seed).repeat()


def packed_lm(source: Sequence, to_document: Callable[[dict], dict], seq_len: int,
              batch_size: int, seed: int, *, mlm=None, tokenizer=None,
              shard: Shard = WHOLE, packing: str = "documents") -> grain.IterDataset:
    """Examples of `shard` of `source` -> documents ({"inputs", "score"}) -> LM batches laid
    out by `packing` (packing.ROW_LAYOUTS: "documents" packed as segments, or "stream"),
    masked BERT style when `mlm` (a config with mask_rate, mask_token_fraction,
    random_token_fraction) is given, with `tokenizer`'s special ids."""
    if packing not in ROW_LAYOUTS:
        raise unknown("data.packing", packing, ROW_LAYOUTS)
    docs = shuffled_forever(source, seed, shard).map(to_document)
    batches = ROW_LAYOUTS[packing](docs.to_iter_dataset(READ_OPTIONS), seq_len, batch_size)
    if mlm is None:
        return batches
    cfg = MLMConfig.from_config(mlm)
    return batches.random_map(lambda b, rng: mask_for_mlm(b, rng, cfg, tokenizer), seed=seed)


def concatenated(datasets: Sequence[grain.IterDataset]) -> grain.IterDataset:
    """Batches made of one batch of each dataset, rows in order (one dataset: itself); the
    result checkpoints every dataset's position."""
    if len(datasets) == 1:
        return datasets[0]
    return ZipIterDataset(list(datasets)).map(
        lambda batches: {k: np.concatenate([b[k] for b in batches]) for k in batches[0]})
