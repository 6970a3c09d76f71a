"""What a Hugging Face snapshot directory holds, read without PyTorch.

    config.json                      the model's hyperparameters
    model.safetensors                the weights, or shards listed by
    model.safetensors.index.json       {"weight_map": {tensor name: shard file}}
    tokenizer.json                   the `tokenizers` tokenizer

(`hf download NAME --local-dir DIR` writes such a directory.) Nothing is
downloaded: a missing file is a one-line ConfigError naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Registers bfloat16 with NumPy, so safetensors.numpy reads the bfloat16 tensors most
# checkpoints store.
import ml_dtypes  # noqa: F401
import numpy as np
import safetensors.numpy
import tokenizers

from posjax import fileio
from posjax.errors import ConfigError

CONFIG, TOKENIZER, INDEX = "config.json", "tokenizer.json", "model.safetensors.index.json"
HOW_TO_GET = "get one with `hf download NAME --local-dir DIR`"


def snapshot(path: str | Path) -> Path:
    """The snapshot directory `path`, checked to hold config.json and tokenizer.json."""
    directory = Path(path).expanduser()
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"--pretrained={path} is a file: give the snapshot's directory (its "
                          f"config.json, tokenizer.json and weights), e.g. {directory.parent}")
    if not directory.is_dir():
        raise ConfigError(f"pretrained model directory {directory} does not exist: {HOW_TO_GET}")
    for name in (CONFIG, TOKENIZER):
        if not (directory / name).is_file():
            raise ConfigError(
                f"pretrained model directory {directory} has no {name}: point at a complete "
                f"Hugging Face snapshot ({HOW_TO_GET})"
            )
    return directory


def read_config(directory: Path) -> dict[str, Any]:
    """config.json as a dict."""
    try:
        config = json.loads((directory / CONFIG).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"{directory / CONFIG} is not valid JSON ({fileio.json_problem(e)}), as a download "
            "cut short leaves it: download it again") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{directory / CONFIG} must hold a JSON object")
    return config


def weight_files(directory: Path) -> tuple[list[Path], dict[str, str]]:
    """The safetensors files and the index's {tensor name: shard file}: the shards the
    index lists, else model.safetensors (a snapshot may also hold other formats' files,
    Mistral's consolidated.safetensors), else the one *.safetensors, with no map."""
    index = directory / INDEX
    if index.is_file():
        weight_map = _weight_map(index)
        shards = sorted(set(weight_map.values()))
        missing = [name for name in shards if not (directory / name).is_file()]
        if missing:
            raise ConfigError(
                f"{directory} lacks {missing[0]}, a weight shard {INDEX} lists: download the "
                "snapshot again"
            )
        return [directory / name for name in shards], weight_map
    if (directory / "model.safetensors").is_file():
        return [directory / "model.safetensors"], {}
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ConfigError(
            f"pretrained model directory {directory} has no *.safetensors weights (posjax reads "
            f"no PyTorch .bin files): {HOW_TO_GET}"
        )
    if len(files) > 1:
        raise ConfigError(
            f"pretrained model directory {directory} holds {len(files)} *.safetensors files "
            f"({', '.join(f.name for f in files[:3])}) and neither model.safetensors nor "
            f"{INDEX} to say which hold the model: download the snapshot's index too"
        )
    return files, {}


def _weight_map(index: Path) -> dict[str, str]:
    """The index's {tensor name: shard file}; a file cut short or edited by hand is one
    line naming it."""
    try:
        weight_map = json.loads(index.read_text()).get("weight_map")
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError) as e:
        weight_map = e
    if not isinstance(weight_map, dict):
        raise ConfigError(f"{index} is not a safetensors index (a JSON object with a "
                          "weight_map), as a download cut short leaves it: download it again")
    return weight_map


def read_weights(directory: Path, prefix: str = "") -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint whose Hugging Face name starts with `prefix` (a
    multimodal snapshot's text model's: its vision tower is never read), in its stored dtype;
    a file cut short (a half-finished download) is one line naming it."""
    tensors: dict[str, np.ndarray] = {}
    paths, weight_map = weight_files(directory)
    weight_map = {name: path for name, path in weight_map.items() if name.startswith(prefix)}
    for path in paths:
        try:
            with safetensors.safe_open(path, framework="np") as stored:
                # the index says which shard holds a tensor: a copy in another is not read
                tensors.update((name, stored.get_tensor(name))
                               for name in stored.keys()  # noqa: SIM118 (no dict)
                               if name.startswith(prefix)
                               and weight_map.get(name, path.name) == path.name)
        except safetensors.SafetensorError as e:
            raise ConfigError(f"{path} cannot be read as safetensors ({e}), as a download cut "
                              "short leaves it: download it again") from None
    lost = next((name for name in weight_map if name not in tensors), None)
    if lost is not None:
        raise ConfigError(f"{directory / weight_map[lost]} lacks the tensor {lost!r} that "
                          f"{INDEX} puts there: download the snapshot again")
    return tensors


def read_tokenizer(directory: Path) -> tokenizers.Tokenizer:
    """tokenizer.json as a `tokenizers.Tokenizer`."""
    try:
        return tokenizers.Tokenizer.from_file(str(directory / TOKENIZER))
    except Exception as e:  # tokenizers raises its own Exception type for a malformed file
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"{directory / TOKENIZER} is not a tokenizers file ({first}), as a "
                          "download cut short leaves it: download it again") from None
