"""TFDS builders for text that needs no download: the Python standard library, or any folder.

Both write `array_record` files (read back with `tfds.data_source`, no TensorFlow) with one
example per file: {"text": str, "path": str (relative to the corpus root)}. Files are read in
sorted path order and stored in that order (shuffling is the pipeline's job). A file goes to
the validation split when the first 8 hex digits of sha256(relative path), read as a fraction
of 2**32, fall below `validation_fraction`, so the split is the same on every machine and
adding files moves no other file across; if that leaves validation empty, the file with the
smallest hash moves there.

`max_text_bytes` (0 = no cap) walks the files in hash order (a deterministic pseudo-random
order, so both splits keep their share) and keeps each one that still fits under the cap;
then, if validation holds less than `validation_fraction` of the kept bytes, the next files
in hash order join it until it does (a 200 kB cap of Python 3.11's or 3.12's library kept 3
validation files of 899 bytes in all; on a GPU image's Python 3.12, 1 scored token).
"""

from __future__ import annotations

import abc
import codecs
import dataclasses
import functools
import glob
import hashlib
import os
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import tensorflow_datasets as tfds

from posjax.data import kinds
from posjax.errors import ConfigError

# Directories of the standard library that are tests, bundled third-party code or tools
# rather than library source; any path with one of these parts is left out.
STDLIB_EXCLUDED_PARTS = frozenset(
    {"test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__", "turtledemo"}
)


class LocalDatasetInfo(tfds.core.DatasetInfo):
    """The DatasetInfo of data made here, which TFDS's GCS bucket cannot hold: the lookup
    tfds makes for a builder whose data is not yet written (a no-op with GCS disabled) would
    leave an empty /tmp/tmp*tfds folder behind each time."""

    def initialize_from_bucket(self) -> None:
        pass


class LocalBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """Base of posjax's builders: configs are made from the run config, never listed ahead.

    tfds warns "Using custom data configuration" for any config missing from BUILDER_CONFIGS;
    every posjax config is such a config (it carries the run's sizes and seeds), so take it
    as given.
    """

    def _create_builder_config(self, builder_config, version):
        del version
        return builder_config

    # tfds prints "Downloading and preparing dataset Unknown size ..." before a build and
    # "... downloaded and prepared" after it; nothing is downloaded here, and
    # posjax.data.sources says in one line what it builds.
    def _log_download_bytes(self) -> None:
        pass

    def _log_download_done(self) -> None:
        pass


class FileCorpusBuilder(LocalBuilder, skip_registration=True):
    """One example {"text", "path"} per file of `_corpus()`, split by `assign_splits`."""

    # A new version where the split rule changes, so a corpus built before is built again.
    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {"1.1.0": "a capped corpus fills validation to its share of the kept "
                              "bytes; an uncapped one splits as in 1.0.0"}

    @abc.abstractmethod
    def _corpus(self) -> tuple[Path, dict[str, int]]:
        """(root, {relative path: size}) of the files to store."""

    def _info(self) -> tfds.core.DatasetInfo:
        return LocalDatasetInfo(
            builder=self,
            description=(
                f"{self.builder_config.description}; one example per file, split by sha256 "
                "of the relative path (posjax.data.builders)."
            ),
            features=tfds.features.FeaturesDict(
                {"text": tfds.features.Text(), "path": tfds.features.Text()}
            ),
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        del dl_manager
        cfg = self.builder_config
        root, files = self._corpus()
        splits = split_files(f"{self.name} {cfg.name}", root, files, cfg.validation_fraction,
                             cfg.max_text_bytes)
        return {name: self._generate_examples(root, paths) for name, paths in splits.items()}

    def _generate_examples(self, root: Path, paths: list[str]) -> Iterator:
        for rel in paths:
            yield rel, {"text": _read_text(root / rel), "path": rel}


def hash_fraction(relative_path: str) -> float:
    """sha256(path) as a number in [0, 1): the first 8 hex digits divided by 2**32."""
    return int(hashlib.sha256(relative_path.encode("utf-8")).hexdigest()[:8], 16) / 2**32


def assign_splits(
    files: dict[str, int], validation_fraction: float, max_text_bytes: int = 0
) -> dict[str, list[str]]:
    """{relative path: size in bytes} -> {"train": [...], "validation": [...]}, sorted paths.

    See the module docstring for the rule. Pure: depends only on the paths and sizes.
    """
    by_hash = sorted(files, key=lambda p: (hash_fraction(p), p))
    if max_text_bytes:
        # The cap draws files in an order independent of the split hash; drawing them in
        # split-hash order would fill the cap with validation files first.
        kept, total = [], 0
        for path in sorted(files, key=lambda p: (hash_fraction("cap:" + p), p)):
            if total + files[path] > max_text_bytes:
                continue
            kept.append(path)
            total += files[path]
        by_hash = sorted(kept, key=lambda p: (hash_fraction(p), p))
    validation = [p for p in by_hash if hash_fraction(p) < validation_fraction]
    if not validation and len(by_hash) >= 2:
        validation = by_hash[:1]
    if max_text_bytes:
        # A cap keeps few files, and the hash's share of few files can be a few bytes (one
        # empty __init__.py of 30 files): the next files in hash order join validation until
        # it holds its fraction of the kept bytes, one file always left to train.
        rest = [p for p in by_hash if p not in validation]
        share = validation_fraction * sum(files[p] for p in by_hash)
        held = sum(files[p] for p in validation)
        while len(rest) > 1 and held < share:
            validation.append(rest.pop(0))
            held += files[validation[-1]]
    train = sorted(set(by_hash) - set(validation))
    return {"train": train, "validation": sorted(validation)}


def split_files(what: str, root: Path, files: dict[str, int], validation_fraction: float,
                max_text_bytes: int = 0) -> dict[str, list[str]]:
    """`assign_splits`, or a one-line ConfigError naming `what` where the files cannot fill
    both splits (one file; a cap that keeps one)."""
    splits = assign_splits(files, validation_fraction, max_text_bytes)
    if not splits["train"] or not splits["validation"]:
        cap = " (or raise max_text_bytes: its cap kept too few)" if max_text_bytes else ""
        raise ConfigError(
            f"{what}: {len(files)} file(s) under {root} cannot fill both a train and a "
            f"validation split; point it at 2 or more files{cap}")
    return splits


def _check_fraction(validation_fraction: float) -> None:
    if not 0.0 < validation_fraction < 1.0:
        raise ConfigError(f"validation_fraction={validation_fraction} must be in (0, 1), e.g. 0.05")


def _read_text(path: Path) -> str:
    # A few files in any large tree are not UTF-8; replacing bad bytes keeps the build
    # deterministic instead of dropping files depending on the machine's locale.
    return path.read_bytes().decode("utf-8", errors="replace")


# --- standard library -----------------------------------------------------------------


def python_version() -> str:
    """'3.11' for the running interpreter: the corpus the stdlib_text builder reads."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def stdlib_files(root: Path | None = None) -> dict[str, int]:
    """{relative path: size} of the library's .py files (tests and tools excluded)."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = {}
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if STDLIB_EXCLUDED_PARTS.isdisjoint(rel.parts[:-1]) and path.is_file():
            files[rel.as_posix()] = path.stat().st_size
    return files


@dataclasses.dataclass(eq=False)
class StdlibTextConfig(tfds.core.BuilderConfig):
    """The standard library of the running Python; the name says the version and any cap."""

    root: str = ""
    validation_fraction: float = 0.05
    max_text_bytes: int = 0


def stdlib_config(validation_fraction: float = 0.05, max_text_bytes: int = 0) -> StdlibTextConfig:
    """Config named like 'python3.11' (+ '-val0.1', '-max2000000' when not the default)."""
    _check_fraction(validation_fraction)
    name = f"python{python_version()}"
    if validation_fraction != 0.05:
        name += f"-val{validation_fraction:g}"
    if max_text_bytes:
        name += f"-max{int(max_text_bytes)}"
    return StdlibTextConfig(
        name=name,
        root=sysconfig.get_paths()["stdlib"],
        validation_fraction=validation_fraction,
        max_text_bytes=int(max_text_bytes),
        description=f"the running Python's standard library ({sys.version.split()[0]}, "
                    f"its .py files in {sysconfig.get_paths()['stdlib']})",
    )


class StdlibText(FileCorpusBuilder):
    """The running Python's standard library source, one example per .py file."""

    def _corpus(self) -> tuple[Path, dict[str, int]]:
        root = Path(self.builder_config.root)
        return root, stdlib_files(root)


# --- any folder -----------------------------------------------------------------------


def glob_root(pattern: str) -> Path:
    """The directory part of a glob pattern before its first wildcard."""
    parts = Path(pattern).parts
    fixed = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    root = Path(*fixed) if fixed else Path(".")
    return root if root.is_dir() else root.parent


# Bytes read from the head of a file to tell text from binary, as git and grep do.
SNIFF_BYTES = 8192


def is_binary(path: str | Path) -> bool:
    """True when the file's first SNIFF_BYTES hold a NUL byte or are not UTF-8 (a
    multi-byte character cut by the end of the sniffed head still counts as text)."""
    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    if b"\0" in head:
        return True
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return True
    return False


@functools.cache
def _warn_skipped(pattern: str, skipped: tuple[str, ...]) -> None:
    shown = ", ".join(skipped[:3]) + (f" and {len(skipped) - 3} more" if len(skipped) > 3 else "")
    print(f"posjax: data.text_glob={pattern!r}: skipping {len(skipped)} binary (not UTF-8) "
          f"file{'s' * (len(skipped) > 1)}: {shown}", file=sys.stderr)


def local_files(pattern: str) -> tuple[Path, dict[str, int]]:
    """(root, {path relative to root: size}) of the text files `pattern` matches (recursive
    **). Binary files are left out with one warning line naming them; a match with no text
    at all is an error."""
    if not pattern:
        raise ConfigError(
            "dataset 'local_text' needs data.text_glob, e.g. --config.data.text_glob="
            "'/path/to/books/**/*.txt'"
        )
    pattern = os.path.abspath(os.path.expanduser(pattern))
    root = glob_root(pattern)
    matched = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
    if not matched:
        raise ConfigError(
            f"data.text_glob={pattern!r} matches no files; point it at your text files, "
            "e.g. '/path/to/books/**/*.txt'"
        )
    binary = tuple(Path(p).relative_to(root).as_posix() for p in matched if is_binary(p))
    files = {
        rel: os.path.getsize(root / rel)
        for rel in (Path(p).relative_to(root).as_posix() for p in matched) if rel not in binary
    }
    if not any(files.values()):
        raise ConfigError(
            f"data.text_glob={pattern!r}: the corpus is empty: its {len(matched)} matched "
            f"files are {len(binary)} binary (not UTF-8) and {len(files)} empty; point it "
            "at text files"
        )
    if binary:
        _warn_skipped(pattern, binary)
    return root, files


@dataclasses.dataclass(eq=False)
class LocalTextConfig(tfds.core.BuilderConfig):
    """A folder of text files; the name carries a fingerprint of the files it was built from."""

    text_glob: str = ""
    validation_fraction: float = 0.05
    max_text_bytes: int = 0


def files_fingerprint(text_glob: str, *settings, found=None) -> str:
    """10 hex digits of sha256 over the glob (absolute), `settings` and the name, size and
    modification time of each text file it matches (`found`: local_files' answer, where the
    caller has it): editing, adding or removing a file changes it."""
    root, files = found or local_files(text_glob)
    return hashlib.sha256(
        repr(
            (
                os.path.abspath(os.path.expanduser(text_glob)),
                *settings,
                sorted((p, s, os.path.getmtime(root / p)) for p, s in files.items()),
            )
        ).encode()
    ).hexdigest()[:10]


def local_text_config(
    text_glob: str, validation_fraction: float = 0.05, max_text_bytes: int = 0
) -> LocalTextConfig:
    """Config named '<folder>-<sha256 of pattern, file names, sizes and mtimes, 10 hex>'.

    Editing, adding or removing a file changes the fingerprint, so the next run builds a
    fresh copy instead of reading a stale one.
    """
    _check_fraction(validation_fraction)
    root, files = local_files(text_glob)
    # before anything is built (and when a sweep is planned)
    split_files(f"data.text_glob={text_glob!r}", root, files, validation_fraction,
                max_text_bytes)
    fingerprint = files_fingerprint(text_glob, validation_fraction, int(max_text_bytes),
                                    found=(root, files))
    slug = "".join(c if c.isalnum() else "_" for c in root.name)[:40] or "root"
    return LocalTextConfig(
        name=f"{slug}-{fingerprint}",
        text_glob=os.path.abspath(os.path.expanduser(text_glob)),
        validation_fraction=validation_fraction,
        max_text_bytes=int(max_text_bytes),
        description=f"text files matching {text_glob}",
    )


class LocalText(FileCorpusBuilder):
    """Any folder of text files the user points at, one example per file."""

    def _corpus(self) -> tuple[Path, dict[str, int]]:
        return local_files(self.builder_config.text_glob)


# The fields of both file corpora.
CORPUS_FIELDS = {
    "validation_fraction": kinds.Field(0.05, "share of the files held out for validation"),
    "max_text_bytes": kinds.Field(0, "size cap of the corpus in bytes (0 = none)"),
}


@kinds.register("stdlib_text")
class StdlibTextData(kinds.TextData):
    """The running Python's standard library source as text (the default; no download)."""

    builder = StdlibText
    fields = CORPUS_FIELDS

    def builder_config(self) -> StdlibTextConfig:
        return stdlib_config(self.cfg.validation_fraction, self.cfg.max_text_bytes)


@kinds.register("local_text")
class LocalTextData(kinds.TextData):
    """Text files matching data.text_glob, one document per file."""

    builder = LocalText
    fields = {**CORPUS_FIELDS,
              "text_glob": kinds.Field("", 'files to read, e.g. "/d/**/*.txt"', path=True)}

    def scored_data(self) -> dict:
        """The text kind's, plus the files read (their glob, absolute), the held-out share and
        the files' fingerprint (`local_text_config`): the same glob over edited files is
        other data."""
        return {**super().scored_data(),
                "text_glob": os.path.abspath(os.path.expanduser(self.cfg.text_glob)),
                "validation_fraction": self.cfg.validation_fraction,
                "fingerprint": self.builder_config().name.rpartition("-")[2]}

    def builder_config(self) -> LocalTextConfig:
        return local_text_config(self.cfg.text_glob, self.cfg.validation_fraction,
                                 self.cfg.max_text_bytes)
