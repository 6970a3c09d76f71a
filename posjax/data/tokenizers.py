"""Tokenizers: bytes (default), SentencePiece trained locally, and task symbols.

Every tokenizer has the same small interface, so pipelines never ask which one they hold:

    encode(text: str) -> int32[n]        no BOS/EOS added; the pipeline adds them
    decode(ids) -> str                   special ids are dropped
    vocab_size, pad_id, bos_id, eos_id, mask_id, first_regular_id
    (ids below `first_regular_id` are special: never masked for MLM, never drawn as the
    random replacement token)

Byte ids (nothing to ship or train): PAD=0, BOS=1, EOS=2, MASK=3, byte b -> b + 4; vocab 260.
SentencePiece ids: PAD=0, BOS=1, EOS=2, UNK=3, MASK=4 ("<mask>"), learned pieces from 5, with
byte fallback so any text encodes and identity normalisation so decode(encode(s)) == s for code.
Symbol ids (algorithmic tasks): see `posjax.data.algorithmic`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

import numpy as np
import sentencepiece as spm

from posjax.errors import ConfigError, unknown


class Tokenizer(Protocol):
    """What pipelines need from a tokenizer (see the module docstring for the ids)."""

    vocab_size: int
    pad_id: int
    bos_id: int
    eos_id: int
    mask_id: int
    first_regular_id: int

    def encode(self, text: str) -> np.ndarray: ...

    def decode(self, ids: Iterable[int]) -> str: ...


@dataclasses.dataclass(frozen=True)
class ByteTokenizer:
    """UTF-8 bytes shifted past 4 special ids: PAD=0, BOS=1, EOS=2, MASK=3, byte b -> b + 4."""

    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    mask_id: int = 3
    first_regular_id: int = 4
    vocab_size: int = 256 + 4

    def encode(self, text: str) -> np.ndarray:
        """text -> int32[n_bytes]: ids = utf-8 bytes + first_regular_id."""
        raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        return raw.astype(np.int32) + self.first_regular_id

    def decode(self, ids: Iterable[int]) -> str:
        """int ids -> str; special ids are dropped, broken utf-8 is replaced."""
        ids = np.asarray(list(ids), dtype=np.int64)
        raw = ids[(ids >= self.first_regular_id) & (ids < self.vocab_size)]
        return (raw - self.first_regular_id).astype(np.uint8).tobytes().decode("utf-8", "replace")


@dataclasses.dataclass(frozen=True)
class SentencePieceTokenizer:
    """A trained SentencePiece model: PAD=0, BOS=1, EOS=2, UNK=3, MASK=4, pieces from 5."""

    model_proto: bytes = dataclasses.field(repr=False)
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    mask_id: int = 4
    first_regular_id: int = 5

    @property
    def processor(self) -> spm.SentencePieceProcessor:
        return _processor(self.model_proto)

    @property
    def vocab_size(self) -> int:
        return self.processor.vocab_size()

    def encode(self, text: str) -> np.ndarray:
        """text -> int32[n_pieces] (no BOS/EOS)."""
        return np.asarray(self.processor.encode(text), dtype=np.int32)

    def decode(self, ids: Iterable[int]) -> str:
        """ids -> str; PAD/BOS/EOS/MASK are dropped."""
        specials = {self.pad_id, self.bos_id, self.eos_id, self.mask_id}
        return self.processor.decode([int(i) for i in ids if int(i) not in specials])


_PROCESSORS: dict[bytes, spm.SentencePieceProcessor] = {}


def _processor(model_proto: bytes) -> spm.SentencePieceProcessor:
    # Loading a model costs milliseconds; pipelines call encode per document, so load once.
    key = hashlib.sha256(model_proto).digest()
    if key not in _PROCESSORS:
        _PROCESSORS[key] = spm.SentencePieceProcessor(model_proto=model_proto)
    return _PROCESSORS[key]


# SentencePiece skips every sentence longer than this many bytes (its max_sentence_length
# default): a text of long lines (a paragraph per line, minified code) left it nothing to
# learn from, so longer lines are cut into sentences of at most this length.
MAX_SENTENCE_BYTES = 4192


def sentences(lines: Iterable[str]) -> Iterator[str]:
    """`lines`, each longer than MAX_SENTENCE_BYTES (UTF-8) cut into pieces that fit, at the
    last space of a piece where one lies in its second half; the pieces join to the line."""
    for line in lines:
        while len(line.encode()) > MAX_SENTENCE_BYTES:
            piece = line.encode()[:MAX_SENTENCE_BYTES].decode(errors="ignore")
            space = piece.rfind(" ")
            piece = piece[:space + 1] if space >= len(piece) // 2 else piece
            yield piece
            line = line[len(piece):]
        yield line


def train_sentencepiece(
    lines: Iterable[str], *, vocab_size: int, model_type: str = "unigram"
) -> SentencePieceTokenizer:
    """Train a SentencePiece model on `lines` with the id layout of `SentencePieceTokenizer`.

    Identity normalisation, no dummy prefix and kept whitespace make decode(encode(s)) == s,
    which source code needs (indentation is meaning); byte fallback covers unseen characters.
    Kudo & Richardson 2018, "SentencePiece" (arXiv:1808.06226).
    """
    if vocab_size < 300:
        raise ConfigError(
            f"sentencepiece_vocab_size={vocab_size} is too small: byte fallback alone needs "
            "261 ids; use at least 300"
        )
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences(lines),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            pad_id=0,
            bos_id=1,
            eos_id=2,
            unk_id=3,
            user_defined_symbols=["<mask>"],
            byte_fallback=True,
            character_coverage=1.0,
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,
            add_dummy_prefix=False,
            allow_whitespace_only_pieces=True,
            num_threads=min(4, os.cpu_count() or 1),
            minloglevel=2,
        )
    except RuntimeError as e:
        raise ConfigError(
            f"SentencePiece training failed ({str(e).splitlines()[-1].strip()}); "
            "lower data.sentencepiece_vocab_size or give it more training text"
        ) from e
    return SentencePieceTokenizer(model_proto=model.getvalue())


def load_sentencepiece(path: str | os.PathLike) -> SentencePieceTokenizer:
    """An existing SentencePiece model (e.g. a published model's tokenizer.model), with its
    own special ids: BOS/EOS/PAD as the model defines them (a model without PAD pads with
    id 0, which padding never scores), MASK its "<mask>" piece if it has one (else masked-LM
    training is refused), and regular pieces after the highest special id."""
    path = Path(path)
    try:
        proto = path.read_bytes()
        processor = _processor(proto)
    except OSError as e:
        raise ConfigError(f"data.sentencepiece_model={path}: {e.strerror}; give the path of "
                          "a SentencePiece .model file") from None
    except RuntimeError:
        raise ConfigError(f"data.sentencepiece_model={path} is not a SentencePiece model: give "
                          "a .model file written by SentencePiece") from None
    mask = processor.piece_to_id("<mask>")
    mask = mask if mask != processor.unk_id() else -1
    specials = [i for i in (processor.pad_id(), processor.bos_id(), processor.eos_id(),
                            processor.unk_id(), mask) if i >= 0]
    return SentencePieceTokenizer(
        model_proto=proto, pad_id=max(processor.pad_id(), 0), bos_id=processor.bos_id(),
        eos_id=processor.eos_id(), mask_id=mask, first_regular_id=max(specials) + 1)


def load_or_train_sentencepiece(
    cache_path: Path,
    lines: Callable[[], Iterator[str]],
    *,
    vocab_size: int,
    model_type: str = "unigram",
) -> SentencePieceTokenizer:
    """Load the model at `cache_path`, or train it on `lines()` and write it there atomically."""
    if cache_path.exists():
        return SentencePieceTokenizer(model_proto=cache_path.read_bytes())
    tokenizer = train_sentencepiece(lines(), vocab_size=vocab_size, model_type=model_type)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_path.with_name(f".{cache_path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(tokenizer.model_proto)
    os.replace(tmp, cache_path)
    return tokenizer


@dataclasses.dataclass(frozen=True)
class _Entry:
    make: Callable  # data_cfg -> Tokenizer
    vocab_size: Callable[..., int]  # data_cfg -> vocabulary size, without building anything
    reads: tuple[str, ...] = ()  # the config.data fields of this tokenizer alone


_REGISTRY: dict[str, _Entry] = {}


def register(name: str, *, vocab_size: Callable[..., int], reads: tuple[str, ...] = ()):
    """Decorator: `fn(data_cfg) -> Tokenizer` becomes `get_tokenizer` for tokenizer=name;
    `vocab_size(data_cfg)` gives its size without reading data; `reads`: the config.data
    fields only this tokenizer reads (given with another, they are refused as unused)."""

    def wrap(fn):
        _REGISTRY[name] = _Entry(fn, vocab_size, tuple(reads))
        return fn

    return wrap


def names() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def readers(field: str) -> list[str]:
    """The tokenizers whose own field `field` is (`register`'s reads); [] for a field of
    no tokenizer."""
    return sorted(name for name, entry in _REGISTRY.items() if field in entry.reads)


def _entry(data_cfg) -> _Entry:
    if data_cfg.tokenizer not in _REGISTRY:
        raise unknown("tokenizer", data_cfg.tokenizer, _REGISTRY)
    return _REGISTRY[data_cfg.tokenizer]


@register("bytes", vocab_size=lambda data_cfg: ByteTokenizer().vocab_size)
def _bytes(data_cfg) -> ByteTokenizer:
    del data_cfg
    return ByteTokenizer()


def get_tokenizer(data_cfg) -> Tokenizer:
    """The tokenizer `data_cfg.tokenizer` names ("bytes", "sentencepiece", "symbols").

    SentencePiece models are trained on the training split the first time and cached under
    `<data_dir>/posjax_tokenizers/`; later calls load the cached model.
    """
    return _entry(data_cfg).make(data_cfg)


def vocab_size(data_cfg) -> int:
    """Vocabulary size of data.tokenizer, from the config alone."""
    return int(_entry(data_cfg).vocab_size(data_cfg))
