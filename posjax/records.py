"""What a run's saved files record, read without jax: the config keys a resumed run may
change, a config's flat dotted keys, and the name a Hugging Face JSON block of a method gets.
The results code (plots, reports, scripts/collect_results.py) imports this rather than
posjax.config, whose package loads the data, encoders and models."""

from __future__ import annotations

import hashlib
import json

# Config keys that may change between an interrupted run and its resumption: they change how
# a run is observed or evaluated, not what it computes.
RESUMABLE_CHANGES = (
    "eval",
    "evals",
    "provenance",
    "imports",
    "from_main",
    "train.log_every_steps",
    "train.checkpoint_every_steps",
    "train.checkpoint_every_minutes",
    "train.eval_every_steps",
    "train.eval_batches",
    "data.data_dir",
    "train.reference",  # and train.reference_stages: what is printed beside the stages
    "train.smoke",
)


def flatten(d: dict, prefix: str = "") -> dict:
    """{"a.b": value} of a nested dict (a config's JSON: config keys as --config spells them)."""
    flat = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(flatten(v, key + "."))
        else:
            flat[key] = v
    return flat


def json_block(method: str) -> tuple[str, object, str] | None:
    """(rope_type, factor, 8 hex digits of the whole block) of a method given as a Hugging
    Face JSON block, which names its result file and its row; None for a named method."""
    if not method.lstrip().startswith("{"):
        return None
    block = json.loads(method)
    digest = hashlib.sha1(json.dumps(block, sort_keys=True).encode()).hexdigest()[:8]
    return block.get("rope_type") or block.get("type"), block.get("factor"), digest
