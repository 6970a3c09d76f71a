"""From `config.data` to a prepared TFDS dataset and its `tfds.data_source` splits.

`data.dataset` names either one of posjax's own builders, which build offline in seconds the
first time they are read, or a TFDS dataset, which must already be prepared (as array_record)
under `data.data_dir` unless `data.allow_download=True`:

    stdlib_text, local_text       text, built here (posjax.data.builders)
    algorithmic, grid2d           generated tasks, built here
    lm1b, pg19, c4, wikipedia     presets for TFDS text datasets (text key, split names)
    any other TFDS name           e.g. "c4/realnewslike", "pg19:0.1.1", read as text

Everything is read through `tfds.data_source` (array_record, random access, no TensorFlow).
Which datasets posjax builds, and with which builder and config, is their data kind's:
every function here takes the kind (posjax.data.kinds, which sits above this module and
calls it) and reads `kind.cfg`, `kind.builder`, `kind.builder_config()` and
`kind.known_names()`, so this module imports no kind.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import tensorflow_datasets as tfds

from posjax import runlock
from posjax.errors import ConfigError, did_you_mean

ENV_DATA_DIR = "POSJAX_DATA_DIR"
FILE_FORMAT = "array_record"


def data_dir(data_cfg) -> str:
    """data.data_dir, else $POSJAX_DATA_DIR, else ~/tensorflow_datasets."""
    chosen = data_cfg.data_dir or os.environ.get(ENV_DATA_DIR) or "~/tensorflow_datasets"
    return os.path.abspath(os.path.expanduser(chosen))


@dataclasses.dataclass(frozen=True)
class NamedText:
    """Defaults for a TFDS text dataset posjax knows by a short name."""

    tfds_name: str
    text_key: str
    train_split: str
    eval_split: str
    # c4 and wikipedia are old-style TFDS builders that only register when their module is
    # imported, and TFDS's bulk import of them needs TensorFlow; import just the one.
    module: str | None = None


NAMED_TEXT: dict[str, NamedText] = {
    "lm1b": NamedText("lm1b", "text", "train", "test"),
    "pg19": NamedText("pg19", "book_text", "train", "validation"),
    "c4": NamedText("c4/en", "text", "train", "validation", "tensorflow_datasets.text.c4"),
    "wikipedia": NamedText(
        "wikipedia/20230601.en",
        "text",
        "train[:99%]",
        "train[99%:]",
        "tensorflow_datasets.text.wikipedia",
    ),
}


def tfds_name(dataset: str) -> str:
    """The TFDS name of a TFDS dataset: presets expand ('c4' -> 'c4/en'), others pass through."""
    preset = NAMED_TEXT.get(dataset)
    return preset.tfds_name if preset else dataset


def base_name(dataset: str) -> str:
    """'c4/en:3.1.0' -> 'c4'."""
    return dataset.split("/")[0].split(":")[0]


def _register_tfds_module(dataset: str) -> None:
    preset = NAMED_TEXT.get(base_name(dataset))
    if preset and preset.module:
        importlib.import_module(preset.module)


def _unknown_dataset(dataset: str, built: Iterable[str]) -> ConfigError:
    known = sorted({*built, *NAMED_TEXT})
    return ConfigError(
        f"unknown dataset {dataset!r}{did_you_mean(dataset, known)}; posjax builds "
        f"{', '.join(sorted(built))} itself and reads prepared TFDS datasets such as "
        f"{', '.join(sorted(NAMED_TEXT))}"
    )


def builder_and_kwargs(kind) -> tuple[str, dict]:
    """(TFDS name, builder kwargs) of the kind's dataset, without touching the disk."""
    if kind.builder is not None:
        return kind.builder.name, {"config": kind.builder_config()}
    if not kind.cfg.dataset:
        raise _unknown_dataset("", kind.known_names())
    _register_tfds_module(kind.cfg.dataset)
    return tfds_name(kind.cfg.dataset), {}


def make_builder(kind, **builder_kwargs) -> tfds.core.DatasetBuilder:
    """The tfds builder of the kind's dataset under data_dir(kind.cfg), prepared or not."""
    name, kwargs = builder_and_kwargs(kind)
    try:
        return tfds.builder(name, data_dir=data_dir(kind.cfg), **kwargs, **builder_kwargs)
    except tfds.core.registered.DatasetNotFoundError as e:
        raise _unknown_dataset(kind.cfg.dataset, kind.known_names()) from e


def prepare(kind) -> tfds.core.DatasetBuilder:
    """The builder of data.dataset, prepared: built offline, found on disk, or downloaded.

    posjax's own datasets build on first use (tfds writes into an `incomplete.*` folder and
    renames it when done, so an interrupted build is redone, never half-read), one process at
    a time: parallel runs of a sweep wait for the first one's build and then read it. A TFDS dataset
    that is not prepared raises one ConfigError line at once instead of trying the network,
    unless data.allow_download is True.
    """
    data_cfg = kind.cfg
    if kind.builder is not None:
        builder = make_builder(kind, file_format=FILE_FORMAT)
        if not _is_prepared(builder):
            with runlock.exclusive(f"{Path(builder.data_dir).parent}.build.lock"):
                builder = make_builder(kind, file_format=FILE_FORMAT)  # built meanwhile?
                if not _is_prepared(builder):
                    try:
                        _build_quietly(builder)
                    except BaseException:
                        _remove_empty_folders(Path(builder.data_dir))
                        raise
        return builder
    builder = make_builder(kind)
    if not _is_prepared(builder):
        if not data_cfg.allow_download:
            raise ConfigError(
                f"dataset {builder.info.full_name!r} is not prepared under "
                f"{data_dir(data_cfg)}; prepare it once with internet (--config.data."
                f"allow_download=True, or `tfds build {tfds_name(data_cfg.dataset)} "
                f"--file_format={FILE_FORMAT} --data_dir=...`) or use dataset=stdlib_text"
            )
        builder = make_builder(kind, file_format=FILE_FORMAT)
        builder.download_and_prepare()
    random_access = tfds.core.file_adapters.FileFormat.with_random_access()
    if not builder.info.available_file_formats() & set(random_access):
        raise ConfigError(
            f"dataset {builder.info.full_name!r} under {data_dir(data_cfg)} is stored as "
            f"{builder.info.file_format}, which tfds.data_source cannot read at random; "
            f"re-prepare it with `tfds build {tfds_name(data_cfg.dataset)} "
            f"--file_format={FILE_FORMAT}` into another data_dir"
        )
    return builder


class _NotBuiltYet(logging.Filter):
    """Drops tfds's warning that a dataset's version folder has no dataset_info.json: asked
    whether a dataset is prepared, that is its way of saying "not yet", not a fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Variant folder ")


def _is_prepared(builder: tfds.core.DatasetBuilder) -> bool:
    quiet, absl_logger = _NotBuiltYet(), logging.getLogger("absl")
    absl_logger.addFilter(quiet)
    try:
        return builder.is_prepared()
    finally:
        absl_logger.removeFilter(quiet)


def _remove_empty_folders(version_dir: Path) -> None:
    """A failed build's version folder and its config's folder, where they hold nothing: a
    refused build leaves no folder that names a dataset it never built."""
    for folder in (version_dir, version_dir.parent):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def _build_quietly(builder: tfds.core.DatasetBuilder) -> None:
    """Build one of posjax's datasets, saying so in one line (tfds's own lines speak of a
    download of unknown size, and its progress bar per split is noise for a few seconds)."""
    print(f"posjax: building dataset {builder.name} once, from "
          f"{builder.builder_config.description}, into {builder.data_dir} (nothing is "
          "downloaded)", flush=True)
    tfds.display_progress_bar(False)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(try_download_gcs=False)
    )


def data_source(kind, split: str) -> Sequence:
    """`tfds.data_source` of `split` (random access; text fields come back as bytes)."""
    builder = prepare(kind)
    if split.split("[")[0] not in builder.info.splits:
        raise ConfigError(
            f"dataset {builder.info.full_name!r} has no split {split!r}; it has "
            f"{', '.join(sorted(builder.info.splits))}"
        )
    name, kwargs = builder_and_kwargs(kind)
    return tfds.data_source(
        name, split=split, data_dir=data_dir(kind.cfg), download=False, builder_kwargs=kwargs
    )


def split_names(kind) -> tuple[str, ...]:
    """All split names of the kind's dataset, e.g. ('train', 'validation', 'test_12')."""
    return tuple(prepare(kind).info.splits)
