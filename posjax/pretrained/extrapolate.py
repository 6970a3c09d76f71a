"""`posjax extrapolate --pretrained=DIR`: a Hugging Face snapshot scored by length as a run is.

    evaluate_pretrained(DIR, lengths=[...], rope_scaling="yarn:4") -> result (written)

The snapshot (`posjax.pretrained.load`) becomes an `Experiment` whose model is the
checkpoint's posjax model and whose data is read with the model's own tokenizer, and an
evaluation of trained runs (the text one, `posjax.eval.extrapolate.TextExtrapolation`, by
default; a retrieval task with --eval) scores the snapshot's weights (`Snapshot`, a source
as posjax.eval.weights' checkpoint is). So the windows and protocols, the row
packing, the dense/chunked attention switch (model.attention "auto"), every --rope_scaling
method, the retrieval cells and heatmap, the result file and its table are the ones a
trained run gets.

Text: the embedded corpus (stdlib_text's validation split, what posjax's own runs are scored
on) or every file a --text_glob matches, in path order (`GlobText`; nothing is prepared or
written for it), each document BOS text EOS as in posjax's training, with config.json's
bos_token_id and eos_token_id (either stands for the other where one is missing).

Training length (the result's train_len, where --rope_scaling factors and the position
buckets start): rope_scaling's original_max_position_embeddings where the block names one
(the context the rotary frequencies were trained at, which Llama 3.1's llama3 map or a YaRN /
LongRoPE block stretches and which a --rope_scaling map replaces), else
max_position_embeddings (the context Hugging Face's config and the papers give: 4096 for
Llama 2, 2048 for Pythia). Weights and activations are bfloat16 on GPU and TPU, float32 on
CPU (model.dtype "auto"); matrix products of a float32 model run at full float32 precision.
Results go to $POSJAX_RESULTS_DIR/pretrained/NAME/ (default ~/posjax_results/pretrained/NAME/;
NAME: the snapshot directory's name, NAME-HASH where NAME holds another snapshot's results:
`output_dir`), never into the snapshot nor the current directory, unless --output names a
file; the command prints where.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np
import tokenizers
from flax import nnx

from posjax import config as configlib
from posjax import data, fileio, models, runlock
from posjax.data import builders, kinds
from posjax.errors import ConfigError
from posjax.eval.evaluation import (
    Drawer,
    check_output,
    check_text_read,
    evaluation_class,
    run_and_write,
)
from posjax.eval.extrapolate import TextExtrapolation
from posjax.eval.weights import Weights
from posjax.experiment import Experiment, Stage
from posjax.models.layers import resolve_dtype
from posjax.pretrained import files
from posjax.pretrained.loader import MATMUL_PRECISION, Pretrained, load
from posjax.train import distributed

# Where results go without --output: one run-like folder per snapshot under the results root,
# $POSJAX_RESULTS_DIR or ~/posjax_results, outside the checkout the commands are typed in and
# outside the snapshot (which may be read-only, a shared cache).
ENV_RESULTS_DIR = "POSJAX_RESULTS_DIR"
DEFAULT_RESULTS_DIR = "~/posjax_results"


@dataclasses.dataclass(frozen=True, eq=False)
class ModelTokenizer:
    """A snapshot's `tokenizers.Tokenizer` behind posjax's tokenizer interface
    (posjax.data.tokenizers.Tokenizer): encode adds no special tokens (the pipeline adds BOS
    and EOS); vocab_size is the model's (config.json's), which may exceed the tokenizer's."""

    tokenizer: tokenizers.Tokenizer
    vocab_size: int
    bos_id: int
    eos_id: int
    pad_id: int = 0  # padding rows carry weight 0: any id the model reads will do
    mask_id: int = -1  # no masked-LM scoring of a causal model
    first_regular_id: int = 0

    def encode(self, text: str) -> np.ndarray:
        """text -> int32[n] ids, no special tokens added."""
        return np.asarray(self.tokenizer.encode(text, add_special_tokens=False).ids, np.int32)

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids])


def _token_id(config: Mapping[str, Any], key: str, other: str) -> int:
    """config[key] (the first of a list), else config[other]; a ConfigError when neither."""
    value = config.get(key)
    if value is None:
        value = config.get(other)
    if isinstance(value, list):
        value = value[0] if value else None
    if value is None:
        raise ConfigError("config.json has neither bos_token_id nor eos_token_id, which open "
                          "and close each document: add them to config.json")
    return int(value)


def model_tokenizer(model: Pretrained) -> ModelTokenizer:
    """The model's tokenizer with config.json's BOS and EOS ids; a tokenizer whose ids reach
    past the model's vocab_size is a ConfigError."""
    vocab = int(model.config["vocab_size"])
    size = model.tokenizer.get_vocab_size(with_added_tokens=True)
    if size > vocab:
        raise ConfigError(f"tokenizer.json has {size} tokens, more than config.json's "
                          f"vocab_size={vocab}: the snapshot's files do not belong together")
    return ModelTokenizer(model.tokenizer, vocab,
                          bos_id=_token_id(model.config, "bos_token_id", "eos_token_id"),
                          eos_id=_token_id(model.config, "eos_token_id", "bos_token_id"))


class _Files(Sequence):
    """Examples {"text": the file's bytes} of `paths`, each read when asked for."""

    def __init__(self, paths: list[Path]):
        self.paths = paths

    def __getitem__(self, index: int) -> dict:
        return {"text": self.paths[index].read_bytes()}  # bad UTF-8 replaced, as local_text

    def __len__(self) -> int:
        return len(self.paths)


class GlobText(kinds.TextData):
    """Every file data.text_glob matches, in path order, one document each, whatever the
    split asked for: the text a pretrained model is scored on, with no dataset to prepare
    (local_text would hold out a validation share and needs two files or more)."""

    def source(self, split: str) -> Sequence[dict]:
        del split
        root, sizes = builders.local_files(self.cfg.text_glob)
        return _Files([root / name for name in sorted(sizes)])

    def split_names(self) -> tuple[str, ...]:
        return (self.cfg.eval_split,)

    def scored_data(self) -> dict:
        """local_text's dataset and tokenizer, the glob (absolute) with its files'
        fingerprint, and no split: every file the glob matches is read."""
        return {**super().scored_data(), "split": None,
                "text_glob": os.path.abspath(os.path.expanduser(self.cfg.text_glob)),
                "fingerprint": builders.files_fingerprint(self.cfg.text_glob)}


def check_glob(text_glob: str) -> None:
    """A ConfigError when `text_glob` matches no file."""
    if not any(Path(p).is_file() for p in glob.iglob(os.path.expanduser(text_glob),
                                                      recursive=True)):
        raise ConfigError(f"--text_glob={text_glob} matches no files: point it at your text "
                          "files, e.g. '/path/to/books/**/*.txt'")


def text_kind(text_glob: str | None, tokenizer: ModelTokenizer,
              tokenizer_name: str = "model") -> kinds.TextData:
    """The evaluation text read with `tokenizer` (recorded as `tokenizer_name`: "model", a
    snapshot's own, or a run's by its name): the embedded corpus (stdlib_text's validation
    split), or every file `text_glob` matches (ConfigError: none)."""
    if not text_glob:
        cfg = data.default_data_config("stdlib_text")
        return data.kinds.kind_class(cfg.dataset)(cfg, tokenizer, tokenizer_name)
    check_glob(text_glob)
    cfg = data.default_data_config("local_text")
    cfg.text_glob = text_glob
    return GlobText(cfg, tokenizer, tokenizer_name)


def experiment_of(model: Pretrained, text_glob: str | None = None) -> Experiment:
    """An Experiment of the snapshot: its model config and encoding, trained (one stage of no
    steps) at `model.train_len`, its data read with the model's tokenizer."""
    encoding, text = model.encoding, text_kind(text_glob, model_tokenizer(model))
    config = ml_collections.ConfigDict(dict(
        encoding=configlib.encoding_config(encoding.name, {
            f.name: getattr(encoding, f.name) for f in dataclasses.fields(encoding)}),
        model=dict(kind="causal_lm", head_dim=model.model_config.resolved_head_dim),
        data=text.cfg,
        train=dict(configlib.TRAIN_DEFAULTS, stages=((model.train_len, 1, 0),)),
        eval=configlib.EVAL_DEFAULTS,
    ))
    return Experiment(config, encoding, model.model_config, models.model_kind("causal_lm"),
                      text, (Stage(0, model.train_len, 1, 0, 0),))


class Snapshot(Weights):
    """A Hugging Face snapshot's weights as an evaluation's source: named by the snapshot
    (no checkpoint step), scored at the precision `Pretrained.logits` uses (a float32 model
    multiplies in float32, not a GPU's TF32)."""

    settings_of = "posjax's default"  # a snapshot has no run config
    # its config's data section is the text it is scored on, which the result's "data"
    # names: another text is another data, not another run
    not_the_run = ("data.",)

    def __init__(self, model: Pretrained, directory: str | Path):
        self.model, self.directory = model, Path(directory)
        self.params = nnx.split(model.model, nnx.Param, ...)[1]
        self.matmul_precision = MATMUL_PRECISION[model.model_config.param_dtype]

    def result_fields(self, experiment: Experiment) -> dict:
        del experiment
        return {"run": self.directory.resolve().name, "pretrained": str(self.directory),
                # which weights: rows of another revision saved over these are never merged
                "snapshot_sha1": snapshot_fingerprint(self.directory)}


def snapshot_fingerprint(directory: str | Path) -> str:
    """12 hex digits of sha1 over the name, size and modification time of every file of the
    snapshot: new weights, tokenizer or config saved into it change it."""
    root = Path(directory).resolve()
    files_seen = sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                        for p in root.rglob("*") if p.is_file())
    return hashlib.sha1(repr(files_seen).encode()).hexdigest()[:12]


def results_root() -> Path:
    """$POSJAX_RESULTS_DIR, else ~/posjax_results."""
    return Path(os.environ.get(ENV_RESULTS_DIR) or DEFAULT_RESULTS_DIR).expanduser()


# The file in a snapshot's result folder naming the snapshot whose results it holds.
SOURCE_FILE = "snapshot.json"


def output_dir(directory: str | Path, output: str | None) -> Path:
    """Where the result goes: --output's folder, else RESULTS/pretrained/NAME (`results_root`;
    NAME: the snapshot directory's name), or NAME-HASH (8 hex digits of the snapshot's
    resolved path) where NAME holds another snapshot's results (`SOURCE_FILE`), so two
    snapshots in folders of the same name (snap/a/model, snap/b/model) never share results
    nor TensorBoard events."""
    if output:
        return Path(output).parent
    source = Path(directory).resolve()
    folder = results_root() / "pretrained" / source.name
    owner = fileio.read_json(folder / SOURCE_FILE, {})
    if owner.get("path", str(source)) == str(source):
        return folder
    return folder.with_name(f"{source.name}-{hashlib.sha1(str(source).encode()).hexdigest()[:8]}")


def claim(folder: Path, directory: str | Path) -> None:
    """Record in `folder` (a result folder of `output_dir`) the snapshot it holds results of."""
    if not (folder / SOURCE_FILE).is_file():
        fileio.write_json(folder / SOURCE_FILE, {"path": str(Path(directory).resolve())})


def evaluate_pretrained(path: str | Path, *, rope_scaling: str | None = None,
                        text_glob: str | None = None, output: str | None = None,
                        evaluation: str | None = None, progress: bool = True,
                        draw: Drawer | None = None, **options) -> dict:
    """Score the snapshot at `path` with `evaluation` (default text: perplexity by length;
    or a retrieval task, posjax list evaluations) with its options (lengths, protocol,
    stride, max_tokens, group_factor; depths, trials, batch_size; None takes posjax's eval
    defaults) and write the result to `output` or `output_dir`; returns it. progress: say
    where a slow evaluation is. draw: its pictures, drawn with the file (`run_and_write`)."""
    directory = files.snapshot(path)
    distributed.start_backends()  # a stop signal waits until they are up
    cls = evaluation_class(evaluation, TextExtrapolation.name, options, directory)
    check_text_read(cls, evaluation or TextExtrapolation.name, text_glob)
    if output:
        if Path(output).resolve().is_relative_to(Path(directory).resolve()):
            raise ConfigError(f"--output={output} lies inside the snapshot {directory}, whose "
                              "files are the model's and which posjax never writes into: give "
                              "a file outside it")
        check_output(output, directory)
        parent, own = Path(output).resolve().parent, output_dir(directory, None).resolve()
        if fileio.is_run_file_name(output) and ((parent / SOURCE_FILE).is_file()
                                               or parent == own):
            raise ConfigError(f"--output={output} takes the name of one of the result files of "
                              f"a snapshot in {parent} (posjax plot reads them): drop --output "
                              "to write the snapshot's own result, or give a file of another "
                              "name or folder")
    folder = output_dir(directory, output)
    fileio.check_writable(folder, "--output" if output else "POSJAX_RESULTS_DIR",
                          given=output or results_root())
    if text_glob:  # before the weights are read
        check_glob(text_glob)
    model = load(directory, dtype=resolve_dtype("auto"))
    scorer = cls(experiment_of(model, text_glob), folder, Snapshot(model, directory),
                 name=evaluation or TextExtrapolation.name, rope_scaling=rope_scaling,
                 learned_extension="")
    made = not folder.exists()
    with runlock.undone_unless_finished(lambda: made and _remove_unused(folder)):
        if not output:  # a snapshot refused above claims no folder
            claim(folder, directory)
        return run_and_write(scorer, options, output, progress, draw)


def _remove_unused(folder: Path) -> None:
    """Remove `folder`, made for a result that was never written, where it holds nothing but
    its claim (`SOURCE_FILE`) and lock."""
    if {p.name for p in folder.iterdir()} <= {SOURCE_FILE, ".lock"}:
        shutil.rmtree(folder)
