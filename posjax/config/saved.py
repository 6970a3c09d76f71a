"""A run's config.json: written from the resolved config, read back in today's layout (old
runs' keys migrated, the user's config-file imports re-imported)."""

from __future__ import annotations

import json
from pathlib import Path

import ml_collections

from posjax import data, encoders, fileio, registry
from posjax.config.args import absolute_fields, scaling_text
from posjax.config.fields import EVAL_DEFAULTS, MODEL_DEFAULTS, TRAIN_DEFAULTS
from posjax.errors import ConfigError, missing_folder
from posjax.models.layers import resolve_dtype
from posjax.records import RESUMABLE_CHANGES, flatten


def config_json(config) -> dict:
    """The resolved config as JSON-able data (tuples become lists)."""
    return json.loads(config.to_json_best_effort())


def config_changes(saved: dict, config) -> list[str]:
    """What would change the results of a run saved with config.json `saved` (as
    read_config_json returns it) were it resumed with `config`: 'key: old -> new' per field,
    the values both have first (encoding.name: 'rope' -> 'alibi'), then the keys one of them
    lacks (the other encoding's hyperparameters); none of RESUMABLE_CHANGES."""
    # a path recorded relative (by posjax before paths were recorded absolute) means the
    # same files when the run resumes from the folder it was started in
    old, new = flatten(absolute_fields(saved)), flatten(config_json(config))
    for flat in (old, new):  # "auto" is the dtype it resolves to here
        flat["model.dtype"] = resolve_dtype(flat.get("model.dtype", "float32"))
    changed = sorted(
        (k for k in old.keys() | new.keys()
         if old.get(k) != new.get(k) and not k.startswith(RESUMABLE_CHANGES)),
        key=lambda k: (k not in old or k not in new, k))
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed]


def changes_text(changed: list[str]) -> str:
    """config_changes' first four, and how many more."""
    return ", ".join(changed[:4]) + (f", and {len(changed) - 4} more" if len(changed) > 4
                                     else "")


def _migrate(saved: dict) -> dict:
    """A config.json written before a key moved, in today's layout.

    DeBERTa's absolute_last_layers became model.absolute_last_layers; rope's scaling became
    text (JSON, "" for none); encoding, model, train and data keys added since (a convention
    such as sinusoidal's layout, model.embed_scale) take their defaults, which keep the
    behaviour from before they existed; the evaluation's switch to chunked attention above
    eval.dense_max_len became model.attention="auto" with model.dense_max_len (the same rule,
    decided inside the model). DAPE on FIRE saved before dape's base_activation existed keeps
    the ReLU it ran with.
    """
    model, evaluation = saved["model"], saved.get("eval", {})
    saved.setdefault("evals", {})  # entries scored while training, none before they existed
    absolute = saved["encoding"].pop("absolute_last_layers", None)
    if absolute is not None:
        model.setdefault("absolute_last_layers", absolute)
    # A key added since takes its default, which is the behaviour from before it existed;
    # but DAPE on FIRE ran plain FIRE's ReLU before base_activation (default: the authors').
    encoding = saved["encoding"]
    if encoding["name"] == "dape" and encoding.get("base") == "fire":
        encoding.setdefault("base_activation", "relu")
    saved["encoding"] = {**encoders.hparams(encoding["name"]), **encoding}
    if "scaling" in saved["encoding"]:  # a mapping or null before it became text
        saved["encoding"]["scaling"] = scaling_text(saved["encoding"]["scaling"])
    if "dense_max_len" not in model:
        model["dense_max_len"] = evaluation.get("dense_max_len", 1024)
        if model.get("attention") == "dense":
            model["attention"] = "auto"
    for key in ("dense_max_len", "rerope_window", "logn"):
        evaluation.pop(key, None)
    for key, value in MODEL_DEFAULTS.items():
        model.setdefault(key, value)
    for key, value in TRAIN_DEFAULTS.items():
        saved["train"].setdefault(key, value)
    for key, value in data.default_data_config(saved["data"]["dataset"]).items():
        saved["data"].setdefault(key, value)
    return saved


def read_config_json(workdir: str | Path) -> dict | None:
    """The run's config.json in today's layout, or None when there is none."""
    saved = fileio.read_json(Path(workdir) / "config.json", remedy=(
        "delete it and re-run the train command with --force to resume its checkpoints with "
        "that command's config (a run that had finished: train it again in a new --workdir)"))
    if saved is None:
        return None
    if not isinstance(saved, dict) or not {"encoding", "model", "train"} <= saved.keys():
        whose = (f"a Hugging Face model's (model_type {saved['model_type']!r})"
                 if isinstance(saved, dict) and "model_type" in saved else "not a posjax run's")
        raise ConfigError(f"{Path(workdir) / 'config.json'} is {whose}, not one posjax train "
                          f"wrote: give a run's folder; `posjax extrapolate --pretrained="
                          f"{workdir}` scores a Hugging Face snapshot")
    _check_numbers(saved, Path(workdir) / "config.json")
    # the user's code the run was trained with, before any name it registered is looked up
    registry.import_files(saved.get("imports", ()), workdir, needed=[
        ("encoding", saved.get("encoding", {}).get("name")),
        ("model.kind", saved.get("model", {}).get("kind"))])
    lacking = [registry.entry_text(entry) for entry in saved.get("from_main", ())
               if not registry.registered(*entry)]
    if lacking:
        raise ConfigError(
            f"{workdir} was trained with {', '.join(lacking)} registered in a notebook or "
            "script (__main__), which no command can import: move its definition into a "
            "file and give it to this command with --import=FILE, or run this from code "
            "that registers it first (docs/extending.md)")
    return _migrate(saved)


def _check_numbers(saved: dict, path: Path) -> None:
    """A one-line ConfigError where a number or switch of config.json's model, train or eval
    section holds text (edited by hand: `"num_heads": "two"`), which failed deep in the
    model as a TypeError."""
    for section, defaults in (("model", MODEL_DEFAULTS), ("train", TRAIN_DEFAULTS),
                              ("eval", EVAL_DEFAULTS)):
        given = saved.get(section)
        for key, default in defaults.items() if isinstance(given, dict) else ():
            if isinstance(default, (bool, int, float)) and isinstance(given.get(key), str):
                raise ConfigError(
                    f"{path}'s {section}.{key}={given[key]!r} is text where posjax writes a "
                    f"{'switch' if isinstance(default, bool) else 'number'} (edited by hand): "
                    "restore it from a copy (git checkout, a backup)")


def load_config(workdir: str | Path, flag: str = "--workdir") -> ml_collections.ConfigDict:
    """The config a run was trained with (stages and lengths come back as tuples); `flag`
    names how the user gave `workdir` (a config arg such as pretrained), for the errors."""
    if not Path(workdir).is_dir():
        raise missing_folder(workdir, f"give the {flag} of a trained run (posjax train)")
    saved = read_config_json(workdir)
    if saved is None:
        if (Path(workdir) / "checkpoints").is_dir():  # a run whose config.json was deleted
            raise ConfigError(f"{workdir} holds a run's checkpoints but no config.json, so "
                              "what it trained with is unknown: put its config.json back")
        runs = sorted(p.parent.name for p in (Path(workdir) / "runs").glob("*/config.json"))
        if (Path(workdir) / "sweep.json").is_file() and runs:  # a sweep's folder, its runs in it
            shown = ", ".join(runs[:3]) + (", ..." if len(runs) > 3 else "")
            run = Path(workdir) / "runs" / runs[0]
            # a config arg's value with commas goes in quotes (its commas split args)
            quoted = f"'{run}'" if "," in runs[0] and not flag.startswith("--") else run
            raise ConfigError(f"{workdir} is a sweep's folder, not a run's: give one of its "
                              f"runs, {flag}={quoted} (its runs: {shown})")
        raise ConfigError(f"{workdir} has no config.json: is it a posjax run directory?")
    config = ml_collections.ConfigDict({k: v for k, v in saved.items()
                                        if k not in ("provenance", "imports", "from_main")})
    config.train.stages = tuple(tuple(s) for s in saved["train"]["stages"])
    config.eval.lengths = tuple(saved["eval"]["lengths"])
    recorded = saved.get("provenance", {}).get("tokenizer_model")
    if recorded and not config.data.get("sentencepiece_model"):
        config.data.sentencepiece_model = _trained_tokenizer(workdir, config, recorded)
    return config


def tokenizer_record(config) -> dict:
    """What config.json's provenance records of a SentencePiece run's tokenizer: the model
    file it trains with ("tokenizer_model"), which every later command on the run reads
    (`load_config`); {} for other tokenizers."""
    if config.data.get("tokenizer") != "sentencepiece":
        return {}
    return {"tokenizer_model": str(data.kinds.sentencepiece_model_path(config.data).resolve())}


def _trained_tokenizer(workdir, config, recorded: str) -> str:
    """The SentencePiece model `recorded` that the run in `workdir` trained with, where it
    exists (its corpus, edited since, would train another); a one-line ConfigError where it
    is gone and the corpus as it is now gives another; "" (the corpus's own) where that is
    the same file."""
    if Path(recorded).is_file():
        return recorded
    if tokenizer_record(config)["tokenizer_model"] == recorded:
        return ""
    raise ConfigError(f"{workdir} was trained with the SentencePiece model {recorded}, which "
                      "no longer exists, and its corpus as it is now would train another: "
                      "put that file back, or train the run again")


def check_same_tokenizer(workdir, saved: dict, config) -> None:
    """Refuse to resume a SentencePiece run whose corpus has changed since it trained: it
    would train on with another model's pieces, which its embeddings do not index."""
    recorded = saved.get("provenance", {}).get("tokenizer_model")
    now = tokenizer_record(config).get("tokenizer_model", recorded)
    if recorded and now != recorded:
        raise ConfigError(f"{workdir} was trained with the SentencePiece model {recorded}, "
                          f"and its corpus as it is now gives another ({now}), whose pieces "
                          "its embeddings do not index: restore the corpus, or train in a "
                          "new --workdir")
