"""One evaluation interface for trained runs, and the helpers every evaluation shares.

    evaluate(workdir, evaluation=None, **options) -> result   # default: the data kind's
    format_table(result) -> str               # Markdown, columns by the evaluation

An evaluation is a class registered under a name (`posjax list evaluations`); a data kind
names the one that scores runs on it (`DataKind.evaluation`): "text"
(`posjax.eval.extrapolate.TextExtrapolation`: windows of text by length) or "task"
(`posjax.eval.tasks.TaskEvaluation`: per problem size), and `posjax extrapolate --eval=NAME`
picks any other, such as the retrieval tasks passkey, needle, mqar and flipflop
(`posjax.eval.retrieval`: per length and depth of the key). All build on `Evaluation`, which
scores the parameters a source hands it (`posjax.eval.weights`: a run's checkpoint, the
weights training left in memory, a Hugging Face snapshot), resolves the length-extension
options against the run's config,
builds one model per evaluated encoding, and names and writes the result:
WORKDIR/extrapolation.json (retrieval_TASK.json), or a name that says which protocol and
method produced it (`result_name`), so one evaluation never replaces another's file.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import jax

from posjax import data, encoders, fileio, runlock
from posjax.config import config_json, load_config, read_config_json
from posjax.errors import ConfigError, unknown
from posjax.eval import methods
from posjax.eval.weights import Checkpoint, InMemory, Weights
from posjax.experiment import Experiment, Model, build_encoding
from posjax.provenance import data_line
from posjax.records import RESUMABLE_CHANGES, flatten, json_block
from posjax.registry import Registry
from posjax.runlock import RunLock, check_stop, nothing_to_save
from posjax.train import distributed
from posjax.train.steps import eval_token_losses

EVALUATIONS = Registry("evaluation", own="give posjax extrapolate --import=FILE, the file "
                       "that registers it (docs/extending.md)")
# Class decorator: make an Evaluation subclass the one data kinds name as `name`.
register = EVALUATIONS.register

# The protocol of task results, whose rows are problem sizes; results written before the
# "evaluation" field existed are told apart by it.
TASK_PROTOCOL = "task"
# draw(result, its file's path): a result's pictures, drawn next to its file where the caller
# has them (the CLI: posjax.results.plots.draw_result, which posjax.eval does not import).
Drawer = Callable[[dict, Path], Any]


class Evaluation(abc.ABC):
    """Scores the run in `workdir` at several lengths (or sizes) and writes the result.

    A subclass sets `options` (the keyword arguments its `run` takes besides the shared
    rope_scaling / learned_extension / output), `columns` ((header, row key, format) of its
    table) and implements `run(**options) -> result` and `title(result)`.
    """

    name: ClassVar[str] = ""
    options: ClassVar[tuple[str, ...]] = ()
    columns: ClassVar[tuple[tuple[str, str, str], ...]] = ()
    # The result file's name before its protocol and method (`result_name`): "" for the
    # evaluation's own name.
    stem: ClassVar[str] = ""
    # How posjax.results draws and tabulates its results (results.plots.REPORTS), written
    # into each result as "report": "columns" (each column of the table against length) for
    # an evaluation that names none.
    report: ClassVar[str] = "columns"
    # True: it scores the run's own data, so it applies only to runs whose data kind names
    # it; False: it makes its own inputs (the retrieval tasks) and scores any causal LM.
    own_data: ClassVar[bool] = True

    @classmethod
    def reads_text(cls, name: str) -> bool:
        """Whether the evaluation `name` reads text that --text_glob could give (a run's
        text: yes; a retrieval task that makes all of its input: no)."""
        del name
        return True

    @classmethod
    def check_before_training(cls, experiment: Experiment, options: dict | None = None) -> None:
        """What `run(**options)` would refuse once the run is trained, refused before it
        trains (posjax train --extrapolate, and config.evals): a one-line ConfigError.
        Nothing by default."""
        del experiment, options

    @classmethod
    def describe(cls, name: str) -> str:
        """What the evaluation registered as `name` scores (`posjax list evaluations`)."""
        del name
        return cls.__doc__ or ""

    def __init__(self, experiment: Experiment, workdir: str | Path, weights: Weights, *,
                 name: str | None = None, rope_scaling: str | None = None,
                 learned_extension: str | None = None):
        """workdir: where the result is written (the run's directory); weights: the source of
        the parameters scored (posjax.eval.weights); name: the registered name it runs as
        (default the class's; one class may serve several, as the retrieval tasks do);
        rope_scaling, learned_extension: None takes the run's config.eval value; "" or
        "none" means none (NoPE, the encoding "none", extends no table)."""
        config = experiment.config
        learned_extension = "" if learned_extension == "none" else learned_extension
        self.name = name or self.name
        self.experiment = experiment
        self.workdir = Path(workdir)
        self.weights = weights
        self.spec = rope_scaling if rope_scaling is not None else config.eval.rope_scaling
        # one line (a JSON block typed over several), "" for none (as results name none)
        self.spec = "" if self.spec == "none" else " ".join(self.spec.split())
        table = experiment.encoding.max_positions(experiment.dims) is not None
        if learned_extension and not table:
            if learned_extension not in encoders.names():  # a table's own list: its check
                raise unknown("learned_extension", learned_extension, encoders.names())
            raise ConfigError(
                f"--learned_extension={learned_extension} extends a learned table past its "
                f"length, and {experiment.encoding.name} has no position limit: drop it")
        # the run's eval.learned_extension applies to a learned table only (configs/lm.py
        # names one for every encoding): a result of RoPE records none
        own = config.eval.get("learned_extension", "") if table else ""
        given = learned_extension if table else None  # "" on no table: the same, none
        self.extension = own if given is None else given
        # another extension than the run's own: a file of its own (`result_name`)
        self.other_extension = self.extension != own
        methods.check_extension(experiment.encoding, self.extension, experiment.dims)
        if self.extension and self.extension not in encoders.names():
            raise unknown("learned_extension", self.extension, encoders.names())
        # A method that cannot apply, or a malformed one, fails here, before any work.
        applied = methods.apply_methods(experiment.encoding, self.spec, experiment.train_len,
                                        experiment.train_len)
        # one scaling at a time: a method's replaces the one the model was trained with
        trained = getattr(experiment.encoding, "scaling", None)
        self.replaced_scaling = (config.encoding.get("scaling") or None) if (
            trained is not None and getattr(applied, "scaling", None) != trained) else None
        if self.replaced_scaling and distributed.is_primary():
            print(f"posjax: --rope_scaling={self.spec} replaces the scaling the model was "
                  f"trained with ({self.replaced_scaling}), not adds to it: scored without "
                  "--rope_scaling, the model keeps its own", file=sys.stderr, flush=True)
        methods.check_kernel(applied, self.spec, experiment.model_config.attention)
        # the sliding-window layers' own encoding (global_only), None: the others'
        self.window_encoding = methods.windowed_encoding(experiment.encoding, self.spec)
        attending = methods.attention_layers(experiment, applied, self.spec)
        methods.check_global_only(self.spec, experiment, attending)
        methods.check_window(applied, self.spec, [window for _, window in attending])
        note = methods.windowed_layers_note(
            self.spec, attending, methods.attention_layers(experiment, experiment.encoding, None))
        if note and distributed.is_primary():
            print(note, file=sys.stderr, flush=True)
        self._models: dict[Any, Model] = {}
        self.progress: ScoringProgress | None = None  # run_and_write's, for slow scoring

    def encoding_at(self, train_len: int, length: int):
        """The encoding that scores `length` positions (ConfigError: it cannot)."""
        self.weights.check_length(length)
        return methods.length_encoding(self.experiment.encoding, self.spec, self.extension,
                                       train_len, length, self.experiment.dims, self.within)

    def within(self, limit: int) -> str:
        """What to score instead where the encoding defines `limit` positions, in the unit
        of --lengths."""
        return f"evaluate at most {limit} tokens"

    def token_losses(self, encoding, batch: dict):
        """Per-token (loss, correct) of `batch` under `encoding`, on the host. Every
        evaluation's batch loop passes here, so a stop signal is honoured between batches
        and slow scoring says which window length it is at (`ScoringProgress`)."""
        check_stop()
        if self.progress is not None:
            self.progress.at(batch[self.experiment.input_key].shape[1])
        if encoding not in self._models:
            self._models[encoding] = self.experiment.evaluation_model(encoding,
                                                                      self.window_encoding)
        model = self._models[encoding]
        precision = self.weights.matmul_precision
        with (jax.default_matmul_precision(precision) if precision
              else contextlib.nullcontext()):
            return jax.device_get(eval_token_losses(
                self.weights.params, model.rest, batch, graphdef=model.graphdef,
                input_key=self.experiment.input_key))

    def result(self, train_len: int, rows: list[dict], **fields) -> dict:
        """The result fields every evaluation writes (those naming the parameters scored come
        from their source, `Weights.result_fields`), then its own."""
        config = self.experiment.config
        return {
            "run": self.workdir.name,
            "evaluation": self.name,
            "report": self.report,
            "encoding": config.encoding.to_dict(),
            # where layers differ from the encoding: its schedule (arch=gemma3's) and windows
            **{key: value for key in ("layer_pattern", "window")
               if (value := getattr(self.experiment.model_config, key))},
            "train_len": train_len,
            "head_dim": config.model.head_dim,
            # which run's parameters: rows of another run are never merged (`_merged`)
            "run_sha1": _run_fingerprint(config, self.weights.not_the_run),
            # the kernel that scored (--attention; a snapshot's config names none)
            "attention": self.experiment.model_config.attention,
            # and which code of the user's scored them (None: posjax's own)
            "code_sha1": self.own_code_fingerprint(),
            **self.weights.result_fields(self.experiment),
            # what it read: results of other data are never merged (`_merged`)
            "data": self.scored_data(),
            # a smoke run's numbers check the set-up only: its tables and pictures say so
            "smoke": bool(config.train.get("smoke", False)),
            **fields,
            "method": self.spec or "none",
            **({"replaced_scaling": self.replaced_scaling} if self.replaced_scaling else {}),
            "learned_extension": self.extension or None,
            **({"learned_extension_given": True} if self.other_extension else {}),
            "lengths": rows,
            # what a "columns" report draws: posjax plot reads them from here, not the class
            **({"columns": [list(column) for column in self.columns]}
               if self.report == "columns" else {}),
        }

    def own_code_fingerprint(self) -> str | None:
        """12 hex digits of the contents of the source files outside posjax that define
        this evaluation and the run's encodings, model and data (a user's own,
        docs/extending.md: `Experiment.code_sha1`), so rows scored before the user edited
        them are not merged with rows scored after; None where all are posjax's."""
        return self.experiment.code_sha1(type(self))

    def scored_data(self) -> dict:
        """What the result measured (its `data`): the run's data; an evaluation that makes
        its own inputs (own_data False) names them, with the tokenizer that read them."""
        data = self.experiment.data.scored_data()
        if self.own_data or self.experiment.data.evaluation == self.name:
            return data
        return {"dataset": f"{self.name}'s own inputs",
                **{key: data[key] for key in ("tokenizer",) if key in data}}

    def write(self, result: dict, output=None) -> dict:
        """Write `result` atomically to `output`, default WORKDIR/`result_name(result)`, and
        its numbers per length to the run's TensorBoard (tag: the file's name / metric,
        step: the length) in one event file of its own, which the result names
        ("tensorboard_events") and the next write of that file replaces: TensorBoard shows
        each length of the file once, never numbers of a result it replaced (`_merged`). A
        run this process cannot write (scored read-only into `output`) gets no events."""
        path = result_path(result, self.workdir, output)
        old = fileio.read_json(path) or {}
        _check_not_older(old, result, path)
        result = _merged(old, result)
        if distributed.is_primary() and (line := _replaced_line(old, result, path)):
            print(line, flush=True)
        if not distributed.is_primary():  # every process scored; process 0 writes
            return result
        logdir = self.workdir / "tensorboard"
        writable = os.access(logdir if logdir.is_dir() else self.workdir, os.W_OK)
        events = self._events(result, path, logdir) if writable else []
        try:
            fileio.write_json(path, {**result, "tensorboard_events": events})
        except BaseException:  # the file keeps its old events; these would show twice
            for name in events:
                (logdir / name).unlink(missing_ok=True)
            raise
        result = {**result, "tensorboard_events": events}
        for stale in old.get("tensorboard_events", []) if writable else ():
            (logdir / Path(stale).name).unlink(missing_ok=True)
        return result

    def _events(self, result: dict, path: Path, logdir: Path) -> list[str]:
        """`result`'s numbers per length in a new event file in `logdir`; its name."""
        suffix = fileio.event_file_suffix()
        with fileio.summary_writer(logdir, suffix=suffix) as writer:
            for row in result["lengths"]:
                for _, key, _ in self.result_columns(result):
                    if isinstance(row.get(key), (int, float)):
                        writer.add_scalar(f"{event_tag(path, self.workdir)}/{key}", row[key],
                                          row["length"])
        return [p.name for p in logdir.glob(f"*{suffix}")]

    @abc.abstractmethod
    def run(self, **options) -> dict:
        """Score the run; returns the result (`result(...)`), unwritten."""

    @classmethod
    def written(cls, path: Path) -> list[Path]:
        """The files `write` leaves for a result written to `path` (just the JSON here)."""
        return [path]

    @classmethod
    @abc.abstractmethod
    def title(cls, result: dict) -> str:
        """The line above a result's table."""

    @classmethod
    def extra_table(cls, result: dict) -> list[str]:
        """Lines printed below a result's table (none by default)."""
        del result
        return []

    @classmethod
    def result_columns(cls, result: dict) -> tuple[tuple[str, str, str], ...]:
        """The (header, row key, format) columns `result`'s table shows: `columns`, unless
        what a result measured depends on its data (posjax.eval.tasks)."""
        del result
        return cls.columns

    @classmethod
    def row_header(cls, result: dict) -> str:
        """What a row of the table is: its first column's header."""
        del result
        return "length"


# Fields that make two results of one file the same evaluation, whose rows can be merged:
# the run and its config, or the snapshot's files, however its path was typed (`--output=FILE`
# may be shared by runs), the user's own code that scored them, and every field that changes
# what a row measures (the data read and how much of it included).
_SAME_EVALUATION = ("run", "run_sha1", "code_sha1", "snapshot_sha1", "evaluation", "protocol",
                    "stride", "method", "learned_extension", "train_len", "depths",
                    "trials_per_cell", "data", "max_tokens", "split")


def event_tag(path: Path, workdir) -> str:
    """The TensorBoard tag of the result file `path` of the run in `workdir`: its name, and
    for a file outside the run's folder 8 hex digits of its path too (two --output files
    of one name in two folders would share one chart)."""
    path = Path(path).resolve()
    if path.parent == Path(workdir).resolve():
        return path.stem
    return f"{path.stem}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"


def _differences(old: dict, new: dict) -> list[str]:
    """The `_SAME_EVALUATION` settings `old` and `new` were scored with that differ. Files
    written before 2026-12-01 record the run's learned_extension for an encoding with no
    table (RoPE's "hierarchical"), which a new result of it leaves out: the same none."""
    return [key for key in _SAME_EVALUATION if old.get(key) != new.get(key)
            and not (key == "learned_extension" and new.get(key) is None
                     and not old.get("learned_extension_given"))]


def _check_not_older(old: dict, new: dict, path: Path) -> None:
    """A ConfigError where `new` scored an earlier checkpoint of the run whose later one
    `old` (the file at `path`) holds: its last checkpoint was set aside as unreadable, and
    replacing the file would lose the finished run's scores."""
    same_run = all(old.get(key) == new.get(key) for key in ("run", "run_sha1", "pretrained"))
    if same_run and (old.get("step") or 0) > (new.get("step") or 0):
        raise ConfigError(
            f"{path} holds the scores of step {old['step']}, and the newest readable "
            f"checkpoint is step {new['step']}: the file is kept; train the run to step "
            f"{old['step']} again (posjax train, the same command), or write these scores "
            "elsewhere with --output")


def _replaced_line(old: dict, new: dict, path: Path) -> str | None:
    """'Replaced PATH whole: ...' where `new` replaced `old` (`_merged`) and with it rows of
    lengths `new` did not score (those of another run, data or setting), naming what
    differed; None where nothing was lost."""
    scored = {row.get("length") for row in new["lengths"]}
    lost = [row.get("length") for row in old.get("lengths", []) if isinstance(row, dict)
            and row.get("length") not in scored]
    if not lost or set(lost) <= set(new.get("earlier_lengths", [])):
        return None
    differs = [_SAID.get(key, key) for key in _differences(old, new)] + [
        "checkpoint step"] * (old.get("step") != new.get("step"))
    return (f"Replaced {path} whole: its rows of {', '.join(map(str, lost))} were scored with "
            f"another {', '.join(differs) or 'evaluation'}")


# How `_replaced_line` names a setting of _SAME_EVALUATION that differs.
_SAID = {"code_sha1": "code (your files outside posjax that define the encoding, model, data or "
                      "evaluation were edited)",
         "run_sha1": "run config", "snapshot_sha1": "snapshot (its files changed)"}


def _run_fingerprint(config, not_the_run: tuple[str, ...] = ()) -> str:
    """12 hex digits of what tells one run from another: every setting that changes what it
    trains (its encoding, model, data, optimizer, seed, the run it started from), not its
    budget (train.stages), which `--force` may change mid-run, nor what only observes it
    (RESUMABLE_CHANGES: where its data is, how often it logs), nor the keys `not_the_run`
    starts (Weights.not_the_run). Two sweeps' `seq_len=32, seed=0` at two learning rates are
    two runs, whose rows a shared --output never merges."""
    what = {key: value for key, value in flatten(config_json(config)).items()
            if not key.startswith((*RESUMABLE_CHANGES, "train.stages", *not_the_run))}
    return hashlib.sha1(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


def _merged(old: dict | None, new: dict) -> dict:
    """`new`, plus the rows of `old` (the same evaluation of the same checkpoint on the same
    data, written before) at lengths `new` did not score, listed in `earlier_lengths`:
    evaluating other lengths adds to a file instead of replacing it; any other `old` is
    replaced whole. A file written before "step" was recorded is taken as the same
    checkpoint (a pretrained model's result has no step); one written before "data" was
    recorded is replaced (what it read is unknown)."""
    new = {k: v for k, v in new.items() if k != "earlier_lengths"}
    if (not old or _differences(old, new)
            or old.get("step", new.get("step")) != new.get("step")):
        return new
    scored = {row["length"] for row in new["lengths"]}
    kept = [row for row in old["lengths"] if row["length"] not in scored]
    if not kept:
        return new
    return {**new, "lengths": sorted(kept + new["lengths"], key=lambda row: row["length"]),
            "earlier_lengths": sorted(row["length"] for row in kept)}


def result_name(result: dict) -> str:
    """The file a result is written to, named by what produced it, so no evaluation replaces
    another's: extrapolation.json for non-overlapping windows (or task sizes) with no method
    (retrieval_TASK.json for a retrieval task); `_sliding-sSTRIDE` for sliding windows;
    `_METHOD` for a length-extension method (a JSON block as its rope_type, factor and a hash
    of the whole block); `_ext-NAME` for a learned table's extension other than the run's
    own (`--learned_extension`; `_ext-none` for none); `_SPLIT` for a split other than test
    (`--split`)."""
    cls = evaluation_of(result)
    name = (result["evaluation"] if not cls.stem else cls.stem if cls.stem == TEXT_STEM
            else f"{cls.stem}_{result['evaluation']}")
    if result.get("protocol") == "sliding":
        name += f"_sliding-s{result['stride']}"
    method = result.get("method") or "none"
    if block := json_block(method):
        name += "_" + "-".join(map(str, block))
    elif method != "none":
        name += "_" + method.replace(":", "-")
    if result.get("learned_extension_given"):
        name += f"_ext-{result.get('learned_extension') or 'none'}"
    if result.get("split", "test") != "test":  # a fine-tune scored off its test split
        name += f"_{result['split']}"
    return name + ".json"


# The stem of the text, task and match evaluations' files: extrapolation.json.
TEXT_STEM = "extrapolation"


def result_path(result: dict, folder: str | Path, output=None) -> Path:
    """Where `result` is written: `output`, else FOLDER/`result_name(result)`."""
    return Path(output or Path(folder) / result_name(result))


def trained_result_path(experiment: Experiment, workdir) -> Path:
    """The file `evaluate_trained` writes in `workdir`: its data kind's evaluation, no method
    (extrapolation.json, retrieval_TASK.json)."""
    return result_path({"evaluation": experiment.data.evaluation}, workdir)


def written_files(result: dict, folder: str | Path, output=None) -> list[Path]:
    """Every file the evaluation of `result` wrote, written to `result_path`."""
    return evaluation_of(result).written(result_path(result, folder, output))


def evaluate(workdir, *, rope_scaling: str | None = None,
             learned_extension: str | None = None, output=None,
             cluster: distributed.Cluster = distributed.ONE_PROCESS,
             evaluation: str | None = None, text=None, attention: str | None = None,
             progress: bool = True, draw: Drawer | None = None, **options) -> dict:
    """Score the run in `workdir` with `evaluation` (a registered name; default: its data
    kind's); write and return the result. Options the evaluation does not take (e.g.
    --protocol for a task run) and that are not None are one-line ConfigErrors. cluster:
    this process's place among several (posjax.train.distributed); each scores every
    length, process 0 writes. text: score a text run on other text than its own data,
    text(the run's tokenizer, its name) -> the text kind to read (--text_glob's files:
    posjax.pretrained.extrapolate.text_kind), into `output` (required: the run's own result
    stays). attention: the kernel that scores, in place of the run's model.attention (the
    same scores up to rounding; chunked's O(L) memory reaches lengths dense cannot).
    progress: say where a slow evaluation is (`ScoringProgress`). draw: its pictures,
    drawn with the file (`run_and_write`)."""
    saved = read_config_json(workdir) or {}
    distributed.initialize(cluster, auto=bool(saved.get("train", {}).get("distributed")))
    config = load_config(workdir)
    if attention:
        config.model.attention = _scoring_kernel(attention, config.model.attention, workdir,
                                                 build_encoding(config))
    experiment = Experiment.from_config(config)
    if text is not None:
        experiment = _on_other_text(experiment, workdir, text, output)
    if output:
        check_output(output, workdir)
    fileio.check_writable(Path(output).parent if output else workdir,
                          "--output" if output else "--workdir", given=output or workdir)
    cls = evaluation_class(evaluation, experiment.data.evaluation, options, workdir)
    check_text_read(cls, evaluation or experiment.data.evaluation, text)
    evaluation = cls(experiment, workdir, Checkpoint(experiment, workdir),
                     name=evaluation or experiment.data.evaluation, rope_scaling=rope_scaling,
                     learned_extension=learned_extension)
    if distributed.is_primary() and (line := experiment.code_changed_line(workdir, "scored")):
        print(line, file=sys.stderr, flush=True)
    return run_and_write(evaluation, options, output, progress, draw)


def _scoring_kernel(given: str, trained: str, workdir, encoding) -> str:
    """--attention=`given` for a run trained with model.attention=`trained`: a kernel that
    computes the same attention (softmax, or the run's own), or a one-line ConfigError
    naming the ones that do and carry the run's `encoding`."""
    from posjax import attention

    kernel = attention.IMPLS.lookup(given)
    if given == trained or (kernel.softmax and attention.IMPLS[trained].softmax):
        return given
    if not attention.IMPLS[trained].softmax:
        raise ConfigError(f"--attention={given}: {workdir} was trained with "
                          f"model.attention={trained}, not softmax attention, which only "
                          f"{trained} computes: drop --attention")
    same = ", ".join(n for n, k in attention.IMPLS.items() if k.softmax and k.carries(encoding))
    raise ConfigError(f"--attention={given} computes another attention than the softmax "
                      f"{workdir} was trained with: give one of {same}, or drop --attention")


def check_output(output, workdir) -> None:
    """Refuse, before any scoring, an --output that is a folder (an existing one, or a path
    ending in /) or that takes the name of a run's own file in its folder, this run's or
    another's (a folder with a config.json): a result there would replace the run's config,
    stages or metrics, or plot would count it as another seed of the run, or a method's
    file would hold another run's numbers."""
    text, path = str(output), Path(output)
    if text.endswith(("/", os.sep)) or path.is_dir():  # an example no check below refuses
        raise ConfigError(f"--output={text} is a folder: give a file, e.g. "
                          f"--output={path / 'scores.json'}")
    folder = path.resolve().parent
    run, inner = next(((run, inner) for run in (folder, *folder.parents)
                       for inner in ("checkpoints", "tensorboard")
                       if folder.is_relative_to(run / inner) and (
                           run == Path(workdir).resolve() or (run / "config.json").is_file())),
                      (None, None))
    if inner:
        raise ConfigError(f"--output={text} lies in the {inner}/ folder of the run in {run}, "
                          "which posjax writes itself: give a file in a run's own folder or "
                          "elsewhere")
    if not fileio.is_run_file_name(path):
        if path.suffix != ".json":  # plot and report find result files by it
            raise ConfigError(f"--output={text}: a result is a JSON file: give a name ending "
                              f"in .json, e.g. --output={path.with_suffix('.json')}")
        _check_replaces_a_result(path, text)
        return
    if folder == Path(workdir).resolve():
        raise ConfigError(f"--output={text} takes the name of one of the run's own files in "
                          "its folder: drop --output to write the run's own result, or give a "
                          "file of another name or folder")
    if (folder / "config.json").is_file():
        raise ConfigError(f"--output={text} takes the name of one of the files of the run in "
                          f"{folder}: give a file of another name or folder")


def _check_replaces_a_result(path: Path, text: str) -> None:
    """Refuse an --output that is a file other than an evaluation's result (a sweep's
    record, a plot's, a user's own notes): the result would replace it, merged into
    nothing."""
    old = fileio.read_json(path, remedy="give --output a new file")
    if old is not None and not (isinstance(old, dict) and "evaluation" in old
                                and isinstance(old.get("lengths"), list)):
        raise ConfigError(f"--output={text} is a JSON file that holds no evaluation's result, "
                          "which the result would replace: give a new file")


def _on_other_text(experiment: Experiment, workdir, text, output) -> Experiment:
    """`experiment` reading `text(its tokenizer)` instead of its own data; one line where the
    run reads no text or no --output is given."""
    if not isinstance(experiment.data, data.TextData):
        raise ConfigError(f"--text_glob scores a text run on other text, and {workdir} is "
                          f"scored by {experiment.data.evaluation!r}: drop --text_glob")
    if not output:
        raise ConfigError(f"--text_glob scores {workdir} on other text than its own: give "
                          "--output=FILE.json, so the run's own result stays as it is")
    return dataclasses.replace(experiment, data=text(experiment.data.tokenizer,
                                                     experiment.data.cfg.tokenizer))


def check_text_read(cls: type[Evaluation], name: str, text_glob) -> None:
    """A one-line ConfigError where --text_glob is given to an evaluation that reads no text
    (`Evaluation.reads_text`): the text would be ignored."""
    if text_glob and not cls.reads_text(name):
        readers = sorted(n for n, c in EVALUATIONS.items() if not c.own_data and c.reads_text(n))
        raise ConfigError(f"--text_glob gives text to read, and --eval={name} makes all of its "
                          f"input itself: drop --text_glob, or hide the keys in that text with "
                          f"--eval={' or --eval='.join(readers)}")


def evaluation_class(name: str | None, own: str, options: dict, scored,
                     entry: str | None = None) -> type[Evaluation]:
    """The evaluation `name` (default `own`, the scored data's own) that scores `scored` (a
    run directory or snapshot, named in errors), given `options`: one line when it scores
    other data than `scored` reads, or an option it does not take is not None. entry: the
    config.evals entry (config.evals.NAME) that gave the name and options, None for the
    --eval flag and its option flags, as those lines name them."""
    key = name or own  # one class may run as several names (the retrieval tasks)
    cls = EVALUATIONS.lookup(key)
    if cls.own_data and key != own:
        others = sorted(name for name, c in EVALUATIONS.items() if not c.own_data)
        given_as = f"{entry}.type" if entry else "--eval"
        raise ConfigError(f"{given_as}={key} scores a run's own data, and {scored} is scored "
                          f"by {own!r}: drop {entry or '--eval'}, or give a retrieval task, "
                          f"one of {', '.join(others)} (a causal LM's; mqar and flipflop need "
                          "a tokenizer of characters)")
    given = [k for k, v in options.items() if v is not None and k not in cls.options]
    if given:
        option = f"{entry}.{given[0]}" if entry else f"--{given[0]}"
        raise ConfigError(
            f"{option} does not apply to {scored}: it is scored by the {key} evaluation, "
            f"which takes {', '.join(cls.options) or 'no such options'}; drop it"
        )
    return cls


# Scoring that runs past this many seconds says so (it prints nothing else until its table),
# then names each window length as it finishes, and every STILL_SCORING_S what it is at.
SLOW_SCORING_S = 15.0
STILL_SCORING_S = 300.0


class ScoringProgress:
    """Where a slow evaluation is: the window length of its batches (`at`, from the batch
    loop) and how long each took. Silent for SLOW_SCORING_S; then one line saying the table
    comes at the end, and one per window length finished or STILL_SCORING_S spent on one."""

    def __init__(self, name: str):
        self.name, self.length, self.since = name, None, time.perf_counter()
        self.loud, self.stopped = False, threading.Event()
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None

    def start(self) -> None:
        self._after(SLOW_SCORING_S, self._slow)

    def stop(self) -> None:
        with self.lock:
            self.stopped.set()
            if self.timer:
                self.timer.cancel()

    def at(self, length: int) -> None:
        """A batch of windows of `length` tokens is about to be scored."""
        with self.lock:
            if length == self.length:
                return
            now = time.perf_counter()
            if self.loud and self.length is not None:
                self._say(f"windows of {self.length} tokens scored in {now - self.since:.0f} s; "
                          f"now windows of {length}")
            self.length, self.since = length, now

    def _slow(self) -> None:
        with self.lock:
            if self.stopped.is_set():
                return
            self.loud = True
            where = (f"now windows of {self.length} tokens" if self.length else
                     "preparing its first windows")
            self._say(f"scoring has taken over {SLOW_SCORING_S:.0f} s, {where}; its table "
                      "comes when every length is scored (Ctrl-C stops it at once)")
        self._after(STILL_SCORING_S, self._still)

    def _still(self) -> None:
        with self.lock:
            if self.stopped.is_set():
                return
            self._say(f"still scoring windows of {self.length} tokens, "
                      f"{(time.perf_counter() - self.since) / 60:.0f} min on them so far")
        self._after(STILL_SCORING_S, self._still)

    def _after(self, seconds: float, then) -> None:
        with self.lock:
            if not self.stopped.is_set():
                self.timer = threading.Timer(seconds, then)
                self.timer.daemon = True
                self.timer.start()

    def _say(self, text: str) -> None:
        print(f"posjax: {self.name}: {text}", file=sys.stderr, flush=True)


def _check_some_scored(result: dict, lengths) -> None:
    """A one-line ConfigError where every length the user gave was refused (each an error
    row): a file of errors only, with rc 0, read as a result."""
    rows = result["lengths"]
    if lengths and rows and all("error" in row for row in rows):
        shown = ",".join(map(str, lengths)) if isinstance(lengths, (list, tuple)) else lengths
        raise ConfigError(f"--lengths={shown}: no length could be scored, nothing was written; "
                          f"at {rows[0]['length']}: {rows[0]['error']}")


def run_and_write(evaluation: Evaluation, options: dict, output=None,
                  progress: bool = True, draw: Drawer | None = None) -> dict:
    """`evaluation.run` with the `options` its class takes, then `write` and (process 0)
    `draw`, holding the lock of its directory (one evaluation of a run at a time); returns
    the written result. A stop signal during the write and drawing lands after both: the
    file is never left without its pictures.

    Nothing is written until every length is scored, so a stop signal while scoring ends the
    process at once (runlock.nothing_to_save) rather than after the computation in flight,
    which at 300k tokens runs for many minutes; scoring past SLOW_SCORING_S says so, and
    then where it is (`ScoringProgress`), unless `progress` is false."""
    evaluation.progress = ScoringProgress(evaluation.name) if progress else None
    with RunLock(evaluation.workdir, process=jax.process_index(), reading=output is not None):
        with nothing_to_save():
            if progress:
                evaluation.progress.start()
            try:
                result = evaluation.run(**{k: options.get(k) for k in evaluation.options})
            finally:
                if progress:
                    evaluation.progress.stop()
                evaluation.progress = None
        _check_some_scored(result, options.get("lengths"))
        with runlock.deferred():  # the file, its TensorBoard events and pictures, or none
            result = _written_and_drawn(evaluation, result, output, draw)
            where = (result_path(result, evaluation.workdir, output)
                     if distributed.is_primary() else "by process 0")
            runlock.written(f"interrupted after every length was scored and written: {where}")
        return result


def _written_and_drawn(evaluation: Evaluation, result: dict, output, draw: Drawer | None):
    """`evaluation.write(result, output)`, then process 0's `draw` of it next to its file."""
    result = evaluation.write(result, output)
    if draw is not None and distributed.is_primary():
        draw(result, result_path(result, evaluation.workdir, output))
    return result


def evaluate_trained(experiment: Experiment, workdir, step: int, params,
                     draw: Drawer | None = None) -> dict:
    """The run's default evaluation (what `posjax extrapolate --workdir` writes) of
    `params`, the weights training just left in memory at `step`: nothing restored, and the
    process's compiled programs reused; its file and `draw`'s pictures written as one (a
    stop signal lands after both). The caller holds the run's lock."""
    name = experiment.data.evaluation
    evaluation = EVALUATIONS[name](experiment, workdir, InMemory(step, params), name=name)
    result = evaluation.run()
    with runlock.deferred():
        return _written_and_drawn(evaluation, result, None, draw)


def evaluation_lengths(experiment: Experiment, lengths=None) -> list[int]:
    """The lengths an evaluation scores, ascending: `lengths` where given, else the run's
    config.eval.lengths, else its training length times 1, 2, 4, 8 and 16."""
    train_len = experiment.train_len
    return sorted(lengths or experiment.config.eval.lengths
                  or [train_len * 2**i for i in range(5)])


def check_trained(experiment: Experiment) -> None:
    """`evaluate_trained`'s refusals that need no parameters, before any training."""
    EVALUATIONS[experiment.data.evaluation].check_before_training(experiment)


def evaluation_of(result: dict) -> type[Evaluation]:
    """The evaluation that wrote `result`."""
    name = result.get("evaluation") or (
        "task" if result.get("protocol") == TASK_PROTOCOL else "text")
    return EVALUATIONS[name]


def format_table(result: dict) -> str:
    """A Markdown table of one result: a title line, then one row per length or size."""
    cls = evaluation_of(result)
    columns = cls.result_columns(result)
    progress, data = progress_line(result), data_line(result)
    lines = [cls.title(result), *([progress] if progress else []), *([data] if data else []),
             "",
             "| " + " | ".join([cls.row_header(result), *(h for h, _, _ in columns)])
             + " |",
             "|" + "---|" * (len(columns) + 1)]
    for row in result["lengths"]:
        if "error" in row:
            cells = ["-"] * (len(columns) - 1) + [row["error"]]
        else:
            cells = [format(row[key], fmt) for _, key, fmt in columns]
        lines.append("| " + " | ".join([str(row["length"]), *cells]) + " |")
    if result.get("earlier_lengths"):
        lines += ["", f"Kept in the file from an earlier command on the same checkpoint, data and "
                      f"settings: {', '.join(map(str, result['earlier_lengths']))}."]
    return "\n".join(lines + cls.extra_table(result))


def progress_line(result: dict) -> str | None:
    """The checkpoint a result scored, and whether training had finished there; None for a
    result written before steps were recorded."""
    if "step" not in result:
        return None
    step, total = result["step"], result["total_steps"]
    if step >= total:
        return f"evaluated at step {step} of {total} (training finished)"
    return (f"evaluated at step {step} of {total}: training did not finish (re-run posjax "
            "train with the same --workdir to finish it, then evaluate again)")
