"""Pictures and tables of a sweep: `posjax plot SWEEPDIR`, or of runs trained one by one:
`posjax plot runs/rope runs/alibi`, `posjax plot runs` (a folder of run folders), or of result
files written anywhere (`posjax extrapolate --output=FILE`): `posjax plot FILE runs/alibi`.

extrapolation.png   perplexity against evaluation length, one line per run (and per
                    length-extension method), log axes, the training length marked
extrapolation.md    the same numbers as a Markdown table
position_loss.png   loss against position within the longest window, per run
theta.png           perplexity against rotary base at each length, when theta was swept

A sweep run with several seeds (`seeds=N`) gets one line per sweep point: the mean over its
seeds with a band (min-max below 5 seeds, the 95 % t-interval from 5 on: posjax.results.seeds),
and table cells "mean [low, high]".

Each result file says which report it gets (its "report" field: text, task, retrieval,
match, or columns for an evaluation of the user's own: posjax.results.columns; a file
written before that field is told by its "protocol"), so reporting imports nothing from the
evaluations that wrote the files.

Task sweeps (algorithmic, grid2d: results with protocol "task", see posjax.eval.tasks) get
accuracy against problem size instead: extrapolation.png (answer-token accuracy and exact
match, or per-patch and class-balanced accuracy for grids, the trained sizes shaded) and
extrapolation.md (accuracy per size bucket, and the encodings' mean reciprocal rank); plotted
beside text runs, those two are task_extrapolation.png/.md, so neither report overwrites the other.

A folder records the files its last plot wrote (.posjax_plots.json); the next plot into it
removes those it does not write again, so no picture of other runs stays beside its own.
"""

from __future__ import annotations

import collections
import contextlib
import fnmatch
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

from posjax import fileio, runlock  # noqa: E402
from posjax.errors import ConfigError, missing_folder  # noqa: E402
from posjax.provenance import data_line  # noqa: E402
from posjax.records import json_block  # noqa: E402
from posjax.results import columns, finetune, glyphs, ranking, seeds, smoke

# config.data.tokenizer of byte-level runs, and what a pretrained snapshot's results read with.
BYTE_TOKENIZER = "bytes"
SNAPSHOT_TOKENIZER = "the snapshot's tokenizer"
# The result files of the text and task evaluations, and of the retrieval ones.
EXTRAPOLATION_FILES, RETRIEVAL_FILES = fileio.EXTRAPOLATION_FILES, fileio.RETRIEVAL_FILES


# Where plots and tables go, one path or several: a sweep, a run, or a folder of runs.
Sources = str | Path | Sequence[str | Path]


def load_results(sources: Sources, pattern: str = EXTRAPOLATION_FILES, *,
                 combined: bool = True) -> list[dict]:
    """Every result in files matching `pattern` of the runs of `sources` (`runs_of`),
    labelled by run name and method, seeds combined (`combined`). A damaged result file is
    a one-line ConfigError naming it (posjax.fileio.read_json)."""
    results = [_labelled(name, _read_result(path), path)
               for name, paths in _result_paths(sources, pattern).items() for path in paths]
    return seeds.combine(results) if combined else results


# What every result file posjax writes holds (posjax.eval.Evaluation.result); a "columns"
# report's result (an evaluation of the user's own) names its columns, not a protocol.
_RESULT_KEYS = ("evaluation", "train_len", "protocol", "lengths")
# The words a row may hold beside its numbers: why a length was not scored, and a retrieval
# row's note (posjax.eval.retrieval.depth_note).
_ROW_TEXTS = ("error", "note")
_COLUMNS_KEYS = ("evaluation", "train_len", "columns", "lengths")
# The files a "columns" report's results may have: any name, told by their report.
COLUMN_FILES = "*.json"


def _read_result(path: Path) -> dict:
    """The result file at `path`; a one-line ConfigError naming it where it is no result
    posjax wrote (edited by hand: `{}`, `[]`, rows that are not rows by length)."""
    result = fileio.read_json(path)
    rows = result.get("lengths") if isinstance(result, dict) else None
    keys = _COLUMNS_KEYS if _is_columns(result) else _RESULT_KEYS
    if (not isinstance(rows, list) or not rows or any(key not in result for key in keys)
            or not all(isinstance(row, dict) and isinstance(row.get("length"), int)
                       and not any(isinstance(value, str) and key not in _ROW_TEXTS
                                   for key, value in row.items()) for row in rows)):
        raise ConfigError(
            f"{path} is not a result posjax wrote (it holds {', '.join(keys)}, the "
            "last a list of rows by length, of numbers): restore it from a copy (git "
            "checkout, a backup), or delete it and re-run the command that wrote it")
    return result


def _is_columns(result) -> bool:
    """Whether `result` (a result file's content) is drawn by the "columns" report."""
    return isinstance(result, dict) and result.get("report") == "columns"


def _columns_file(path: Path) -> bool:
    """Whether the JSON file at `path` is a "columns" report's result (one no other reading
    of the folder would take for a result; a file that does not read is none)."""
    try:
        return _is_columns(fileio.read_json(path))
    except ConfigError:
        return False


def sweep_results(sources: Sources) -> list[dict]:
    """What a sweep's table is made of: its extrapolation results (seeds combined), else
    (a retrieval sweep) every retrieval result, one per run (`results_table` combines)."""
    return load_results(sources) or load_results(sources, RETRIEVAL_FILES, combined=False)


def failed_runs(sources: Sources) -> list[str]:
    """The names of the runs a sweep.json of `sources` records as failed (each with its
    error there): no result to plot, nothing to restore or finish."""
    failed = set()
    for source in _source_list(sources):
        index = fileio.read_sweep_json(source / "sweep.json") if source.is_dir() else None
        failed |= {name for name, run in sweep_entries(index or {"runs": {}}).items()
                   if run.get("status") == "failed"}
    return [name for name in runs_of(sources) if name.rpartition("/")[2] in failed]


def sweep_entries(index: dict) -> dict[str, dict]:
    """{run name: its entry} of a sweep.json's runs; a list of names (no statuses kept)
    gives each an empty entry."""
    runs = index["runs"]
    return runs if isinstance(runs, dict) else dict.fromkeys(runs, {})


def runs_without_folder(sources: Sources) -> list[str]:
    """The names of the runs a sweep.json of `sources` lists whose folders are gone (a failed
    run, which may never have had one, aside)."""
    failed = failed_runs(sources)
    return [name for name, folder in runs_of(sources).items()
            if not folder.exists() and name not in failed]


def missing_runs(sources: Sources) -> list[str]:
    """The names of the runs that have no result file of any evaluation yet (failed runs
    aside)."""
    retrieval, failed = _result_paths(sources, RETRIEVAL_FILES), failed_runs(sources)
    own = _result_paths(sources, COLUMN_FILES)
    return [name for name, files in _result_paths(sources).items()
            if not files and not retrieval[name] and not own[name] and name not in failed]


def _source_list(sources: Sources) -> list[Path]:
    return [Path(sources)] if isinstance(sources, (str, Path)) else [Path(s) for s in sources]


def _is_run(folder: Path) -> bool:
    """A run folder: a trained run's (config.json) or a pretrained snapshot's results
    (`posjax extrapolate --pretrained`: result files, no config.json)."""
    return (folder / "config.json").is_file() or any(
        next(folder.glob(pattern), None) for pattern in (EXTRAPOLATION_FILES, RETRIEVAL_FILES)
    ) or any(map(_columns_file, folder.glob(COLUMN_FILES)))


def _runs_of_one(source: Path) -> dict[str, Path]:
    """{run name: its folder} of one source: a sweep (sweep.json: its runs, in
    SOURCE/runs/NAME or, in a study's collected results/, SOURCE/NAME), a run (`_is_run`, no
    sweep.json), or a folder of runs (its sub-folders that are runs: runs trained one by one,
    `posjax train --workdir=runs/rope` and so on, or pretrained snapshots' results); a
    result file (.json, `posjax extrapolate --output`) is a run of that one file, named by
    the file's name without .json, and by its run's after a comma where it lies in a trained
    run's folder (runs/rope/books.json: "books,rope")."""
    if source.is_file():
        if source.suffix != ".json":
            raise ConfigError(f"{source} is a file, not a folder nor a result file (.json, as "
                              "posjax extrapolate writes): give a sweep or run directory, or a "
                              "result file")
        if "evaluation" not in (fileio.read_json(source) or {}):  # config.json, stages.json
            raise ConfigError(f"{source} is not a result file (posjax extrapolate writes those, "
                              "naming their evaluation): give its folder, or a result file")
        in_run = (source.parent / "config.json").is_file()
        return {f"{source.stem},{source.resolve().parent.name}" if in_run else source.stem:
                source}
    if not source.is_dir():
        raise missing_folder(source, "give a sweep or run directory")
    index = fileio.read_sweep_json(source / "sweep.json")
    if index is not None:
        return {name: source / "runs" / name if (source / "runs" / name).is_dir()
                else source / name for name in in_value_order(index["runs"])}
    if _is_run(source):
        return {source.name: source}
    runs = {p.name: p for p in sorted(source.iterdir()) if p.is_dir() and _is_run(p)}
    runs = {name: runs[name] for name in in_value_order(runs)}
    sweeps, deeper = ([], []) if runs else _nested(source)
    if sweeps or deeper:
        raise ConfigError(f"{source} holds {_kinds(sweeps, deeper).replace('(s)', 's')}, not "
                          f"runs of its own: give them, as in `posjax plot "
                          f"{' '.join(map(str, [*sweeps, *deeper]))}`")
    if not runs:
        raise ConfigError(f"{source} has neither sweep.json nor config.json nor result files, "
                          "nor run folders (sub-folders with a config.json or result files): "
                          "give sweep or run directories")
    return runs


def in_value_order(names: Iterable[str]) -> list[str]:
    """Run names ("encoding=rope,theta=5e5,seed=0") in the order given, but for runs whose
    names differ in numbers only, which come together, at the first one's place, in numeric
    order: a sweep extended by a second `--grid=theta=1e5` lists theta=1e5 before 5e5, not
    after 1e6, and run folders theta=1e5 before theta=5e5; a sweep's encodings and their
    variants ("rope,p=0.75") stay as its config lists them."""
    names = list(names)
    places: dict[tuple, int] = {}

    def order(name: str) -> tuple:
        words, numbers = [], []
        for item in name.split(","):
            key, _, value = item.rpartition("=")
            try:
                numbers.append(float(value))
                words.append((key, None))
            except ValueError:
                words.append((key, value))
        return places.setdefault(tuple(words), len(places)), numbers

    ranked = {name: order(name) for name in names}  # in the order given: first appearances
    return sorted(names, key=ranked.__getitem__)


def _nested(source: Path) -> tuple[list[Path], list[Path]]:
    """The sweeps (folders with a sweep.json) anywhere inside a folder of runs, which are not
    among its runs, and the runs deeper than its own (runs/group/rope beside runs/alibi);
    neither runs nor sweeps are searched inside."""
    sweeps, deeper = [], []
    for folder, subfolders, _ in os.walk(source):
        here = Path(folder)
        if here != source and ((here / "sweep.json").is_file() or _is_run(here)):
            if (here / "sweep.json").is_file():
                sweeps.append(here)
            elif here.parent != source:
                deeper.append(here)
            subfolders.clear()
        subfolders.sort()
    return sweeps, deeper


def _kinds(sweeps: list[Path], deeper: list[Path]) -> str:
    return " and ".join(kind for kind, found in (("sweep(s)", sweeps), ("run(s)", deeper))
                        if found)


def _say_nested(sources: Sources) -> None:
    """One stderr line naming the sweeps and deeper runs inside a folder of runs given,
    which its plot leaves out (they are compared when given themselves)."""
    given = {source.resolve() for source in _source_list(sources)}
    for source in _source_list(sources):
        if source.is_file() or (source / "sweep.json").is_file() or _is_run(source):
            continue
        sweeps, deeper = ([[p for p in found if p.resolve() not in given]
                           for found in _nested(source)])
        if sweeps or deeper:
            left = [*sweeps, *deeper]
            print(f"posjax plot: {source} also holds the {_kinds(sweeps, deeper)} "
                  f"{', '.join(map(str, left))}: left out of its runs (give them too to "
                  f"compare them: posjax plot {source} {' '.join(map(str, left))})",
                  file=sys.stderr)


def runs_of(sources: Sources) -> dict[str, Path]:
    """{run name: its folder} of every source (`_runs_of_one`), in the order given. Where
    runs of different sources share a name (encoding=rope of two sweeps), every run of that
    point is told apart by its source's folder name, whichever seeds each source has:
    main/encoding=rope,seed=2 beside ext/encoding=rope,seed=0, so a point's seeds stay one
    row even where only some of them have a namesake; so is a point two sources each hold a
    run of with the same seed (a sweep's encoding=rope,seed=0 beside a lone encoding=rope,
    seed 0 too). Seeds of one point in different sources with no name nor seed in common
    (exp,seed=0 and exp,seed=1 given apart) stay one point."""
    found, seen = [], set()
    for source in _source_list(sources):
        for name, folder in _runs_of_one(source).items():
            if folder.resolve() not in seen:  # a run given twice (runs and runs/rope) once
                seen.add(folder.resolve())
                found.append((source, name, folder))
    holders: dict[str, dict[Path, Path]] = {}  # point -> {source: one of its runs there}
    for source, name, folder in found:
        holders.setdefault(seeds.point(name), {}).setdefault(source, folder)
    names = collections.Counter(name for _, name, _ in found)
    shared = {seeds.point(name) for name, count in names.items() if count > 1}
    shared |= _seeded_in_two_sources(found)
    runs: dict[str, Path] = {}
    for source, name, folder in found:
        held = holders[seeds.point(name)]
        key = name if seeds.point(name) not in shared else (
            f"{_told_apart(list(held.values()))[list(held).index(source)]}/{name}")
        if key in runs:
            raise ConfigError(f"two runs are both named {key} ({runs[key]} and {folder}): "
                              "compare folders with different names")
        runs[key] = folder
    return runs


def _seeded_in_two_sources(found: list[tuple[Path, str, Path]]) -> set[str]:
    """The points of which two of the (source, run name, folder) `found` in different
    sources trained with the same seed (their config.json's train.seed): two points."""
    first: dict[tuple[str, int], Path] = {}
    twice = set()
    for source, name, folder in found:
        config = {} if folder.is_file() else fileio.read_json(folder / "config.json") or {}
        seed = config.get("train", {}).get("seed") if isinstance(config, dict) else None
        if seed is not None and first.setdefault((seeds.point(name), seed), source) != source:
            twice.add(seeds.point(name))
    return twice


def _told_apart(folders: list[Path]) -> list[str]:
    """The names of the nearest folders above `folders` (runs of one name) that differ:
    main and ext for main/runs/encoding=rope and ext/runs/encoding=rope, s1 and s1copy for
    s1/runs/theta=1e4 and s1copy/runs/theta=1e4 given themselves."""
    paths = [folder.resolve() for folder in folders]
    for depth in range(min(len(path.parents) for path in paths)):
        names = [path.parents[depth].name for path in paths]
        if len(set(names)) == len(names):
            return names
    return [str(path.parent) for path in paths]


def output_folder(sources: Sources) -> Path:
    """Where plots of `sources` go by default: the one folder given, else the folder the
    given ones share (runs/ for runs/rope and runs/alibi), where they sit side by side or it
    is under the current directory; elsewhere (/tmp for /tmp/a/runs/x and /tmp/b/runs/y) a
    one-line ConfigError asks for --output, not to litter an unrelated folder."""
    paths = _source_list(sources)
    if len(paths) == 1:  # a result file's plots go beside it
        return paths[0].parent if paths[0].is_file() else paths[0]
    parents = {os.path.abspath(p.parent) for p in paths}
    common = os.path.commonpath(sorted(parents))
    if len(parents) > 1 and not Path(common).is_relative_to(Path.cwd()):
        raise ConfigError(f"the runs given are in different folders, which share only "
                          f"{common}: give --output=FOLDER for the plots and the table")
    # as the folders were given: relative to the current directory when under it
    inside = Path(common).is_relative_to(Path.cwd())
    return Path(os.path.relpath(common) if inside else common)


def _result_paths(sources: Sources, pattern: str = EXTRAPOLATION_FILES
                  ) -> dict[str, list[Path]]:
    """{run name: its result paths matching `pattern`}, every run of `sources`. A result
    file given itself is its run's one result: a retrieval result by its name
    (RETRIEVAL_FILES), else a text or task one, whatever its name."""
    def matching(run: Path) -> list[Path]:
        if run.is_file():
            own = _columns_file(run)  # the file read once
            if own or pattern == COLUMN_FILES:
                return [run] if own and pattern == COLUMN_FILES else []
            retrieval = fnmatch.fnmatch(run.name, RETRIEVAL_FILES)
            return [run] if retrieval == (pattern == RETRIEVAL_FILES) else []
        return [path for path in sorted(run.glob(pattern))
                if _columns_file(path) == (pattern == COLUMN_FILES)]
    return {name: matching(run) for name, run in runs_of(sources).items()}


def _labelled(name: str, result: dict, path: Path) -> dict:
    """`result`, read from `path`, labelled for plots and tables: "series" (the run's sweep
    point and method), "label" (and its windows), "file" (the name of `path`), and from the
    run's config.json "smoke" (posjax.results.smoke) and "tokenizer" where the result does not
    name them (`perplexity_unit`), whether it is a masked LM's ("masked_lm", `report_of`:
    recorded by the result, else its run's model kind's), whether it trained in
    stages of several lengths ("staged"), and "trained_to", the run's last step, where it
    trained on past the checkpoint the result scored."""
    folder, result["file"] = path.parent, path.name
    # a score written as null (nan or inf when it was scored: a diverged model) is no number
    # to draw or print: its row shows no value ("-"), and the table says why
    result["lengths"] = [
        {**{k: v for k, v in row.items() if v is not None},
         **({"error": "scored nan or inf"} if "ppl" in row and row["ppl"] is None
            and "error" not in row else {})}
        for row in result.get("lengths", [])]
    config = fileio.read_json(folder / "config.json") or {}
    # its own record where it has one (a result written elsewhere with --output has no
    # config.json beside it), else the run's config
    result["smoke"] = bool(result.get("smoke", config.get("train", {}).get("smoke")))
    # the seed it trained with, so that one seed trained twice is not counted as two
    result["train_seed"], result["folder"] = config.get("train", {}).get("seed"), str(folder)
    # a run trained on past the checkpoint its result scored (--force with more steps)
    final = (fileio.read_stages(folder / "stages.json") or {}).get("final_step")
    if isinstance(result.get("step"), int) and isinstance(final, int) and final > result["step"]:
        result["trained_to"] = final
    # a masked LM's perplexity is of masked tokens read from both sides: its own report
    result["masked_lm"] = bool(result.get("masked_lm")) or _masked_lm(config)
    result["staged"] = len({stage[0] for stage in config.get("train", {}).get("stages", ())}) > 1
    if "pretrained" in result:
        result.setdefault("tokenizer", SNAPSHOT_TOKENIZER)
    elif "tokenizer" not in result:
        result["tokenizer"] = config.get("data", {}).get("tokenizer")
    # one line whatever the command's layout (a JSON --rope_scaling typed over two lines);
    # a JSON block by its type and factor, as its file is named (its whole block is there)
    method = " ".join(str(result.get("method", "none")).split())
    if block := json_block(method):
        method = "{}:{} (JSON block {})".format(*block)
    # "encoding=rope,theta=500" -> "rope,theta=500": the key is the same on every line.
    short = seeds.label(name)
    result["series"] = short if method == "none" else f"{short} +{method}"
    if result.get("learned_extension_given"):  # --learned_extension other than the run's
        result["series"] += f" +{result.get('learned_extension') or 'no'} extension"
    if result.get("split", "test") != "test":  # a fine-tune scored off its test split
        result["series"] += f" ({result['split']} split)"
    result["setup"] = _setup(result, config, short)
    result["label"] = result["series"]
    if result.get("protocol") == "sliding":
        result["label"] += f" (sliding, stride {result['stride']})"
    return result


def _masked_lm(config: dict) -> bool:
    """Whether the run of `config` (its config.json) is a masked LM (its model kind's
    `masked_lm`); False for a kind this process has not registered."""
    from posjax import models  # jax and the model code: only a run's plots need it

    kind = config.get("model", {}).get("kind")
    return bool(kind in models.KINDS and models.KINDS[kind].masked_lm)


_THETA = re.compile(r"(?<![^,/])theta=[^,]*,?")


def _without_theta(name: str) -> str:
    """A run's name without its theta: "rope,theta=500,x=1" -> "rope,x=1"."""
    return _THETA.sub("", name).rstrip(",")


# What a run's config.json records of the run rather than of its setup, and what its seeds
# and the points of a theta sweep differ in.
_NOT_SETUP = {"provenance": None, "imports": None, "from_main": None, "eval": None,
              "train": ("seed",), "encoding": ("theta",)}


def _setup(result: dict, config: dict, short: str) -> str:
    """What a result measured but for its rotary base and seed, as one string: its run's
    config (or, with none beside it, its name; dtype=auto as its device resolved it) and
    how it was scored. Results of one setup
    differ in nothing else (`theta_curves`)."""
    trained = {key: ({k: v for k, v in value.items() if k not in _NOT_SETUP[key]}
                     if isinstance(value, dict) and _NOT_SETUP.get(key) else value)
               for key, value in config.items()
               if key not in _NOT_SETUP or _NOT_SETUP[key] is not None} if config else {
        "run": _without_theta(short)}
    # dtype=auto as the device resolved it (float32 on a CPU), where config.json records it
    resolved = config.get("provenance", {}).get("dtypes", {}).get("compute") if config else None
    if resolved and trained.get("model", {}).get("dtype") == "auto":
        trained["model"] = {**trained["model"], "dtype": resolved}
    scored = {k: result.get(k) for k in ("train_len", "stride", "max_tokens", "data",
                                         "learned_extension", "tokenizer", "smoke")}
    return json.dumps({**trained, **scored}, sort_keys=True, default=str)


def perplexity_unit(results: list[dict]) -> str:
    """What one perplexity is per: "byte" when every result's run read bytes (posjax's
    default tokenizer, also taken for a result whose run names none), else "token"."""
    return "byte" if all(r.get("tokenizer") in (BYTE_TOKENIZER, None) for r in results) \
        else "token"


def _data_labels(results: list[dict]) -> dict[str, str]:
    """{label: what that run's result was scored on}, for results that record it (`data`)."""
    return {r["label"]: line for r in results if (line := data_line(r))}


def _budgets_only(results: list[dict]) -> bool:
    """Whether `results` were scored on one recorded text with different token budgets
    (a smoke budget grows with the training length): one text, not one data set."""
    return (all(r.get("data") for r in results)
            and len({json.dumps(r["data"], sort_keys=True) for r in results}) == 1
            and len({r.get("max_tokens") for r in results}) > 1)


def _capitalised(line: str) -> str:
    """`line` with its first letter upper case, the rest as written (a glob's case is its
    own)."""
    return line[:1].upper() + line[1:]


def data_note(results: list[dict]) -> str:
    """What `results` were scored on, for a caption: the one line they share ("Scored on
    stdlib_text, validation split, bytes tokenizer."), that line and each run's token budget
    where only the budgets differ, or each run's line where the data differ, so runs scored
    on different texts are never read as one comparison; "" where none records it."""
    lines = _data_labels(results)
    if not lines:
        return ""
    if len(set(lines.values())) == 1 and len(lines) == len(results):
        return _capitalised(next(iter(lines.values()))) + "."
    if _budgets_only(results):
        line = data_line({**results[0], "max_tokens": None})
        each = "; ".join(f"{r['label']}: first {r['max_tokens']} tokens" for r in results)
        return f"{_capitalised(line)}; **not one token budget**, each run's: {each}."
    each = "; ".join(f"{label}: {line}" for label, line in lines.items())
    unrecorded = [r["label"] for r in results if r["label"] not in lines]
    return (f"**Not one data set**, each run's: {each}"
            + (f"; not recorded for {', '.join(unrecorded)}" if unrecorded else "") + ".")


def _short_data(result: dict, budget: bool = False) -> str:
    """The data a result was scored on in a few words: "local_text, BOOKS/*.txt (its files'
    fingerprint)", and its token budget (`budget`): ", first 4096 tokens"."""
    data = result.get("data") or {}
    if not data:
        return "data not recorded"
    files = data.get("text_glob")
    if files and data.get("fingerprint"):
        files += f" ({data['fingerprint']})"
    tokens = f"first {result['max_tokens']} tokens" if budget and result.get("max_tokens") \
        else ""
    return ", ".join(filter(None, (data["dataset"], files, tokens)))


def _series_data(results: list[dict]) -> dict[int, str]:
    """{id of each result: its `_short_data`}, where the results' data differ (legend labels
    then carry each result's own: a run's sliding windows may read other text than its
    non-overlapping ones); {} where they share one."""
    if len({data_line(r) for r in results}) < 2:
        return {}
    budgets = len({r.get("max_tokens") for r in results}) > 1
    return {id(r): _short_data(r, budgets) for r in results}


def _on(result: dict, on: dict[int, str]) -> str:
    """" [DATA]" after a legend label where `on` (`_series_data`) names `result`'s data."""
    return f" [{on[id(result)]}]" if id(result) in on else ""


def _ok(rows):
    return [r for r in rows if "ppl" in r]


def _plain_log_axes(ax, lengths: list[int]) -> None:
    """Log-log axes labelled as people read numbers: the evaluated lengths on x (128, 256,
    ...), and 1-2-5 steps on y (10, 20, 50), instead of 2^7 and 2×10^1."""
    glyphs.length_axis(ax, lengths)
    _plain_log_y(ax)


class _ReadableLogLocator(ticker.LogLocator):
    """Ticks of a log axis at 1, 1.5, 2, 3, 5 and 7 times the powers of ten; on a range too
    narrow for 4 of them (perplexity 9.8 to 16: 10 and 15 alone), evenly spaced round
    numbers (10, 11, ..., 16)."""

    def __init__(self):
        super().__init__(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0))

    def tick_values(self, vmin, vmax):
        ticks = super().tick_values(vmin, vmax)
        low, high = sorted((vmin, vmax))
        if sum(low <= t <= high for t in ticks) >= 4:
            return ticks
        even = ticker.MaxNLocator(nbins=7, steps=[1, 2, 2.5, 5, 10]).tick_values(low, high)
        return even[even > 0]


def _plain_log_y(ax) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(_ReadableLogLocator())
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def plot_extrapolation(results: list[dict], path: Path) -> Path:
    # a panel per kind of window: the protocol and, for sliding windows, each stride
    panels = sorted({(r["protocol"], r.get("stride") or 0) for r in results})
    series = list(dict.fromkeys(r["series"] for r in results))
    colors = glyphs.colours(series)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels) + 2.5, 5),
                             sharey=True, squeeze=False)
    on = _series_data(results)
    for ax, (protocol, stride) in zip(axes[0], panels, strict=True):
        for result in (r for r in results
                       if (r["protocol"], r.get("stride") or 0) == (protocol, stride)):
            rows = _ok(result["lengths"])
            name = result["series"]
            if rows:
                seeds.line(ax, rows, "ppl", color=colors[name],
                           label=f"{name}{_on(result, on)}")
        marks = glyphs.training_lengths(ax, results, colors, key="series")
        _plain_log_axes(ax, sorted({row["length"] for r in results for row in r["lengths"]}))
        ax.set_xlabel(f"evaluation length (tokens; {marks})")
        ax.set_title(f"{protocol} windows" + (f", stride {stride}" if stride else ""))
        ax.grid(True, which="both", alpha=0.3)
    masked = "masked-token " if all(r.get("masked_lm") for r in results) else ""
    axes[0][0].set_ylabel(f"{masked}perplexity (per {perplexity_unit(results)})")
    handles, labels = axes[0][-1].get_legend_handles_labels()
    for ax in axes[0][:-1]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    glyphs.legend(fig, handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    title = smoke.titled(fig, "Length extrapolation: perplexity against evaluation length"
                         + _data_caption(results, on) + seeds.band_note(results), results)
    glyphs.plain(fig)
    fig.tight_layout()
    # Over the panels, not the figure: the saved image also holds the legend on the right.
    left, right = axes[0][0].get_position().x0, axes[0][-1].get_position().x1
    title.set_x((left + right) / 2)
    glyphs.save(fig, path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def table(results: list[dict]) -> str:
    """Markdown: one row per run, one column per evaluation length (perplexity)."""
    lengths = sorted({r["length"] for res in results for r in res["lengths"]})
    header = "| run | " + " | ".join(str(n) for n in lengths) + " |"
    lines = [header, "|" + "---|" * (len(lengths) + 1)]
    for result in results:
        by_length = {r["length"]: r for r in result["lengths"]}
        cells = [seeds.cell(by_length.get(n), "ppl") for n in lengths]
        lines.append(f"| {result['label']} | " + " | ".join(cells) + " |")
    if unscored := seeds.unscored_note(results, "ppl"):
        lines += ["", unscored]
    lines.append("")
    masked = all(r.get("masked_lm") for r in results)
    what = ("Masked-token perplexity (a masked LM's: of its masked tokens, each read with the "
            "context on both sides)" if masked else "Perplexity")
    lines.append(f"{what} per {perplexity_unit(results)} at each evaluation length; "
                 f"{_trained_at(results)}. {seeds.seeds_note(results)}")
    if differ := _other_differences(results):
        lines.append(f"\n{differ}")
    if behind := _behind_note(results):
        lines.append(f"\n{behind}")
    if note := data_note(results):
        lines.append(f"\n{note}")
    return smoke.noted("\n".join(lines) + "\n", results)


def _behind_note(results: list[dict]) -> str:
    """A caption line naming the rows scored at a checkpoint before the one their run
    trained to (`trained_to`: --force with more steps), which read as the run's numbers;
    "" where there are none."""
    behind = dict.fromkeys(f"`{r['label']}` (step {m['step']} of {m['trained_to']})"
                           for r in results for m in r.get("per_seed", [r])
                           if m.get("trained_to"))
    if not behind:
        return ""
    return (f"Scored before their run trained on: {'; '.join(behind)}; score them again with "
            "posjax extrapolate to compare them with the rest.")


# What a run's setup holds that a caption says otherwise (the data, the lengths) or that
# is no training setting: left out of `_other_differences`.
_CAPTIONED = ("run", "train_len", "stride", "max_tokens", "data", "learned_extension",
              "tokenizer", "smoke", "encoding.", "data.", "eval.", "evals.", "model.kind")


def _other_differences(results: list[dict]) -> str:
    """A caption line naming the training settings, other than the encoding, the seed, what
    the labels show and what only observes a run (RESUMABLE_CHANGES), in which the runs of
    `results` differ (a learning rate, a model size, the steps): runs of different sweeps
    compared in one table are otherwise read as differing in their encoding alone; "" where
    none differs."""
    flats = {r["label"]: seeds.trained_settings(r) for r in results}
    named = " ".join(flats)
    # a key some run's config.json lacks was added since it trained (its default then)
    keys = sorted({key for flat in flats.values() for key in flat
                   if not key.startswith(_CAPTIONED)
                   and f"{key.rsplit('.', 1)[-1]}=" not in named
                   and all(key in other for other in flats.values())
                   and any(flat[key] != other[key] for other in flats.values())})
    if not keys:
        return ""

    def values(key: str) -> str:  # "V for `a` and `b`; W for the other 12"
        groups: dict[str, list[str]] = {}
        for label, flat in flats.items():
            groups.setdefault(json.dumps(flat[key]), []).append(f"`{label}`")
        *few, most = sorted(groups.items(), key=lambda kv: len(kv[1]))
        return "; ".join([*(f"{value} for {' and '.join(labels)}" for value, labels in few),
                          f"{most[0]} for the other {len(most[1])}" if len(most[1]) > 2 else
                          f"{most[0]} for {' and '.join(most[1])}"])

    shown = "; ".join(f"{key} ({values(key)})" for key in keys[:3])
    more = f", and {len(keys) - 3} more settings" if len(keys) > 3 else ""
    return f"The runs also differ in {shown}{more}."


def _trained_at(results: list[dict]) -> str:
    """What a caption says of the training lengths: "trained at 64, 192 tokens", and that a
    length is the longest stage's where a run trained in stages of several lengths."""
    lengths = ", ".join(map(str, sorted({r["train_len"] for r in results})))
    staged = any(r.get("staged") for r in results)
    return (f"trained at {lengths} tokens" + (" (for a run trained in stages of several lengths, "
                                              "its longest stage's)" if staged else ""))


def _data_caption(results: list[dict], on: dict[int, str]) -> str:
    """A figure title's line on what `results` were scored on ("" where none records it),
    `on` their legend's brackets (`_series_data`): the data they share, or that each run's
    is in brackets."""
    shared = (data_note(results) if not on else "Not one token budget: each run's in brackets"
              if _budgets_only(results) else "Not one data set: each run's in brackets")
    return f"\n{shared.rstrip('.')}" if shared else ""


def plot_position_loss(results: list[dict], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7.5, 5))
    on = _series_data(results)
    colors = glyphs.colours(r["label"] for r in results)
    for result in results:
        rows = _ok(result["lengths"])
        if not rows:
            continue
        longest = rows[-1]
        size = longest["bucket_size"]
        shown = [i for i, v in enumerate(longest["bucket_loss"]) if v is not None]
        # the centre of the positions each bucket holds: the last one may end at the length
        xs = [(i * size + min((i + 1) * size, longest["length"])) / 2 for i in shown]
        data = _on(result, on)
        ax.plot(xs, [longest["bucket_loss"][i] for i in shown], marker=".",
                color=colors[result["label"]],
                label=f"{result['label']} (L={longest['length']}){data}")
        if "bucket_loss_interval" in longest:  # the seeds' min-max
            low, high = zip(*(longest["bucket_loss_interval"][i] for i in shown), strict=True)
            ax.fill_between(xs, low, high, color=colors[result["label"]], alpha=0.18, lw=0)
    marks = glyphs.training_lengths(ax, results, colors)
    ax.set_xlabel(f"position in window (bucket centre; {marks})")
    ax.set_ylabel(f"loss (nats / {perplexity_unit(results)})")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # none where no row has a number; beside the axes,
        # where many lines would hide under it
        glyphs.legend(ax, *ax.get_legend_handles_labels(), fontsize=8, loc="center left",
                      bbox_to_anchor=(1.0, 0.5))
    smoke.titled(fig, "Loss by position in the longest evaluation window"
                 + _data_caption(results, on) + seeds.band_note(results), results)
    glyphs.plain(fig)
    fig.tight_layout()
    glyphs.save(fig, path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_theta(results: list[dict], path: Path) -> Path | None:
    """Perplexity against theta for each evaluation length, with the critical-length
    prediction (Liu et al.) marked, when runs alike but for theta were scored (a theta sweep,
    `theta_curves`); None otherwise. Where several such sets were plotted, each has its
    lines, named by its runs."""
    from posjax.results import analysis

    runs = [r for r in results if r["method"] == "none" and "theta" in r["encoding"]]
    protocols = sorted({r["protocol"] for r in runs})
    protocol = "nonoverlapping" if "nonoverlapping" in protocols else protocols[0] if runs else ""
    curves = theta_curves([r for r in runs if r["protocol"] == protocol])
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for name, members in curves.items():
        lengths = sorted({row["length"] for r in members for row in _ok(r["lengths"])})
        for n in lengths:
            at = sorted(((r["encoding"]["theta"], row) for r in members
                         for row in _ok(r["lengths"]) if row["length"] == n),
                        key=lambda point: point[0])
            line, = ax.plot([t for t, _ in at], [row["ppl"] for _, row in at], marker="o",
                            label=f"L={n}" + (f" ({name})" if len(curves) > 1 else ""))
            spread = [(t, row) for t, row in at if "ppl_interval" in row]  # seeds' min-max
            if spread:
                ax.errorbar([t for t, _ in spread], [row["ppl"] for _, row in spread],
                            yerr=[[row["ppl"] - row["ppl_interval"][0] for _, row in spread],
                                  [row["ppl_interval"][1] - row["ppl"] for _, row in spread]],
                            fmt="none", ecolor=line.get_color(), capsize=3, lw=1)
    ax.set_xscale("log")
    _plain_log_y(ax)
    shown = [r for members in curves.values() for r in members]
    thetas = sorted({r["encoding"]["theta"] for r in shown})
    names = sorted({r["encoding"]["name"] for r in shown})
    rotary = all(_rotary(name) for name in names)
    # the prediction in brackets (RoPE's: Liu et al.) where every curve's runs rotate and
    # share what it depends on
    setups = {(r.get("head_dim"), r["train_len"]) for r in shown}
    head_dim, train_len = next(iter(setups))
    limits = {t: analysis.critical_length(head_dim, train_len, t) for t in thetas} \
        if len(setups) == 1 and head_dim and rotary else {}
    ax.set_xticks(thetas, [f"{t:,.0f}" + (f"\n({limits[t]:.0f})" if t in limits else "")
                           for t in thetas])
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_xlabel(("rotary base theta" if rotary else "theta") + (
        " (in brackets: predicted critical length)" if limits else ""))
    ax.set_ylabel("perplexity")
    ax.set_title(f"{'RoPE base' if rotary else ', '.join(names) + ': theta'} against "
                 f"extrapolation, {protocol} windows")
    ax.grid(True, which="both", alpha=0.3)
    glyphs.legend(ax, *ax.get_legend_handles_labels(), fontsize=8)
    smoke.titled(fig, seeds.band_note(shown).strip().replace("bands", "bars"), shown)
    glyphs.plain(fig)
    fig.tight_layout()
    glyphs.save(fig, path, dpi=130)
    plt.close(fig)
    return path


def _rotary(name: str) -> bool:
    """Whether encoding `name` rotates queries and keys, so its theta is a rotary base (a
    user's encoding that plot has not imported is taken as not)."""
    from posjax import encoders  # noqa: PLC0415 - jax: only for a theta sweep's picture

    return name in encoders.names() and "rotate" in encoders.get(name).sites()


def theta_curves(results: list[dict]) -> dict[str, list[dict]]:
    """{name: results sorted by theta} for each set of results alike but for their rotary
    base (`setup`), of at least two thetas, one result each: only such a set is one curve.
    Runs that merely share a theta (a smoke run, a 600-step and a 5000-step one, all at
    10^4) make none. A set with two results of one theta (the same run in two folders) is
    named on stderr and left out."""
    sets: dict[str, list[dict]] = {}
    for result in results:
        sets.setdefault(result["setup"], []).append(result)
    curves = {}
    for members in sets.values():
        by_theta = collections.defaultdict(list)
        for result in members:
            by_theta[result["encoding"]["theta"]].append(result)
        if len(by_theta) < 2:  # one theta: no curve over theta to draw
            continue
        twice = next((alike for alike in by_theta.values() if len(alike) > 1), None)
        if twice:
            a, b = twice[:2]
            theta = f"theta={a['encoding']['theta']:g}"
            seeds_of = ({a.get("train_seed"), b.get("train_seed")} - {None})
            print(f"posjax plot: {a['label']} and {b['label']} " + (
                f"are seeds {' and '.join(map(str, sorted(seeds_of)))} of one setup at {theta}, "
                "in folders not named as seeds: left out of theta.png (name the folders "
                "NAME,seed=K to have them averaged)" if len(seeds_of) == 2 else
                f"are the same run at {theta}: left out of theta.png (plot one of them)"),
                file=sys.stderr)
        else:
            members = sorted(members, key=lambda r: r["encoding"]["theta"])
            name = _without_theta(members[0]["series"]) or "rope"
            curves[name if name not in curves else f"{name} ({len(curves) + 1})"] = members
    return curves


def plot_sweep(sources: Sources, output: str | Path | None = None) -> list[Path]:
    """Write every picture and table comparing the runs of `sources` (a sweep, a run, a
    folder of runs, or several of them: `runs_of`) into `output` (default
    `output_folder(sources)`); returns the paths written. Runs without results are named
    in one warning line on stderr and left out."""

    results = load_results(sources)
    # a user's evaluation: its seeds combined as the text report's are (means and intervals)
    found = (load_results(sources, RETRIEVAL_FILES, combined=False)
             + load_results(sources, COLUMN_FILES))
    missing = missing_runs(sources)
    _say_nested(sources)
    shown = ", ".join(map(str, _source_list(sources)))
    gone = runs_without_folder(sources)
    missing = [name for name in missing if name not in gone]
    if (results or found) and missing:
        finish = ("re-run the sweep's command" if any(
            (source / "sweep.json").is_file() for source in _source_list(sources))
            else "re-run the train command, which resumes")
        print(f"warning: {len(missing)} run(s) of {shown} have no extrapolation result and "
              f"are left out of the plots and table: {', '.join(missing)} (finish them: "
              f"{finish}, or posjax extrapolate --workdir=RUNDIR)", file=sys.stderr)
    if (results or found) and gone:
        print(f"warning: {len(gone)} run(s) that the sweep.json of {shown} lists have no "
              f"folder and are left out of the plots and table: {', '.join(gone)} (re-run "
              "the sweep to train them)", file=sys.stderr)
    failed = failed_runs(sources)
    if (results or found) and failed:
        print(f"warning: {len(failed)} run(s) of {shown} failed and are left out of the plots "
              f"and table: {', '.join(failed)} (sweep.json keeps each one's error)",
              file=sys.stderr)
    if not results and not found:
        elsewhere = _other_result_files(sources)
        if elsewhere:
            raise ConfigError(f"{shown} holds result files of other names, which a folder's "
                              f"plot does not read: give them, posjax plot "
                              f"{' '.join(map(str, elsewhere[:4]))}")
        raise ConfigError(f"{shown} has no evaluation results yet: {_how_to_score(sources)}")
    _warn_of_rows(results)
    out = Path(output or output_folder(sources))
    groups = _by_report(found + results)
    # One plot into a folder at a time; each draws into a folder of its own, moved into
    # place whole at the end, so a stopped or concurrent plot never leaves old and new mixed.
    with runlock.exclusive(out / PLOT_LOCK), _staging(out) as staged:
        paths = []
        for report, members in groups.items():
            prefix = _prefix(report, groups)
            datasets = {}
            for result in members:
                key = _dataset([result]) if REPORTS[report].per_dataset else ""
                datasets.setdefault(key, []).append(result)
            for dataset, part in datasets.items():
                named = f"{prefix}{dataset}_" if len(datasets) > 1 else prefix
                paths += REPORTS[report].pictures(part, staged, named)
        with runlock.deferred():
            paths = [_move(Path(path), staged, out) for path in paths]
            _remove_stale(out, paths, sorted(runs_of(sources)))
    return paths


def _warn_of_rows(results: list[dict]) -> None:
    """A warning line on stderr for results scored before their run trained on (--force
    with more steps), and one for lengths not every seed scored, which are left out."""
    behind = [f"{r['folder']}/{r['file']} (step {r['step']} of {r['trained_to']})"
              for r in results if r.get("trained_to")]
    if behind:
        print(f"warning: results scored before their run trained on: {'; '.join(behind)} "
              "(score them again with posjax extrapolate --workdir=RUN)", file=sys.stderr)
    partial = [f"{r['label']} ({', '.join(map(str, r['partial_lengths']))})"
               for r in results if r.get("partial_lengths")]
    if partial:
        print(f"warning: lengths that not every seed scored are left out: {'; '.join(partial)} "
              "(score every seed at the same --lengths with posjax extrapolate)", file=sys.stderr)


# Names of the files the last `plot_sweep` wrote into its folder (the folder's own record),
# and the lock file that keeps two plots from writing into one folder at once.
WRITTEN, PLOT_LOCK = ".posjax_plots.json", ".posjax_plots.lock"
# The hidden folder a plot draws into before its files take their places (`_staging`).
STAGING_PREFIX = ".posjax_plot."


@contextlib.contextmanager
def _staging(out: Path):
    """Within: a new hidden folder in `out` to draw into, removed with what is left in it.
    Called holding the folder's PLOT_LOCK, so any other such folder there is a killed
    plot's (kill -9 runs no cleanup): removed first."""
    out.mkdir(parents=True, exist_ok=True)
    for left in out.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(left, ignore_errors=True)
    staged = Path(tempfile.mkdtemp(dir=out, prefix=STAGING_PREFIX))
    try:
        yield staged
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _move(path: Path, staged: Path, out: Path) -> Path:
    """`path`, drawn under `staged`, renamed to its place under `out` (a path elsewhere is
    left where it is); returns where it is now."""
    if not path.is_relative_to(staged):
        return path
    target = out / path.relative_to(staged)
    if path.exists():  # a drawing function stubbed out (tests) writes nothing
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
    return target


def _remove_stale(out: Path, paths: list[Path], runs: list[str]) -> None:
    """Remove the files an earlier plot into `out` wrote (its WRITTEN record) that this one
    did not, saying so in one line on stderr: a picture of runs no longer shown (theta.png
    of a theta sweep, a task table) would otherwise sit beside the new ones as if of these
    runs. Files posjax plot did not write are never touched. Where the earlier plot drew
    runs this one does not (`runs`, by name: a study's collected copies of a sweep's runs are
    the same runs) into files this one replaces, a line says whose plots were replaced.
    Then record this plot's files and runs."""
    written = sorted(p.name for p in map(Path, paths) if p.parent == out)
    earlier = fileio.read_json(out / WRITTEN, default=[])
    if isinstance(earlier, list):  # the record before it named the folders
        earlier = {"files": earlier}
    stale = [name for name in earlier.get("files", [])
             if isinstance(name, str) and name not in written
             and Path(name).name == name and (out / name).is_file()]
    for name in stale:
        (out / name).unlink()
    if stale:
        print(f"posjax plot: removed {', '.join(stale)} from {out}: an earlier plot into it "
              "wrote them, and these results have none", file=sys.stderr)
    before = earlier.get("runs")
    if before and not stale and set(before) - set(runs):
        names = ", ".join(before)
        print(f"posjax plot: replaced the plots in {out} of {names} (an earlier plot of other "
              "runs); give --output=FOLDER to keep each comparison", file=sys.stderr)
    fileio.write_json(out / WRITTEN, {"files": written, "runs": runs})


def _prefix(report: str, shown: Sequence[str]) -> str:
    """'' or 'REPORT_' before the names of `report`'s files: where reports of `shown` write
    files of the same stem (text and task: extrapolation.png/.md), the first in REPORTS keeps
    its names and the others take their report's name before them (task_extrapolation.png),
    so none overwrites another."""
    stem = REPORTS[report].stem
    owner = next(name for name in REPORTS if name in shown and REPORTS[name].stem == stem)
    return "" if owner == report else f"{report}_"


def _text_pictures(results: list[dict], out: Path, prefix: str = "") -> list[Path]:
    paths = [
        plot_extrapolation(results, out / f"{prefix}extrapolation.png"),
        fileio.write_text(out / f"{prefix}extrapolation.md", table(results)),
        plot_position_loss(results, out / f"{prefix}position_loss.png"),
    ]
    theta = plot_theta(results, out / f"{prefix}theta.png")
    return paths + ([theta] if theta else [])


def _task_pictures(results: list[dict], out: Path, prefix: str = "") -> list[Path]:
    return [plot_task_accuracy(results, out / f"{prefix}extrapolation.png"),
            fileio.write_text(out / f"{prefix}extrapolation.md", task_table(results))]


# The report of a result by its protocol, where the protocol has one of its own.
_REPORT_OF_PROTOCOL = {"task": "task", "retrieval": "retrieval", "match": "match"}


def _other_result_files(sources: Sources) -> list[Path]:
    """Result files (posjax extrapolate --output=RUN/NAME.json) in the run folders of
    `sources` under names a folder's plot does not read."""
    found = []
    for folder in runs_of(sources).values():
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
            try:
                if "evaluation" in (fileio.read_json(path) or {}):
                    found.append(path)
            except ConfigError:  # a damaged file of the run's own: not a result to name
                continue
    return found


def _how_to_score(sources) -> str:
    """What gives `sources` (folders with no result yet) their results: a sweep's command
    for a sweep's folder (its runs planned, not yet trained), else extrapolate."""
    folders = _source_list(sources)
    sweeps = [source for source in folders if (source / "sweep.json").is_file()]
    if not sweeps:
        run = shlex.quote(str(folders[0])) if len(folders) == 1 else "RUNDIR"
        return (f"run `posjax extrapolate --workdir={run}` first"
                + ("" if len(folders) == 1 else " for each"))
    plan = fileio.read_json(sweeps[0] / "sweep.json", {})
    command = shlex.join(["posjax", "sweep", f"--config={plan.get('config')}:{plan.get('arg')}",
                          f"--workdir={sweeps[0]}"])
    return f"train and score its runs with its sweep, `{command}`"


def report_of(result: dict) -> str:
    """The report (a key of REPORTS) a result gets: "task", "retrieval" or "match" by its
    protocol (files written before results named their report, or named "text" for a
    match), else the one its file names, else "text"; a masked LM's text result (its run's
    "masked_lm", `_labelled`) "mlm": its perplexity is not a causal LM's, so the two are
    never drawn on one axis nor ranked in one table."""
    report = (_REPORT_OF_PROTOCOL.get(result.get("protocol")) or result.get("report")
              or "text")
    return _MASKED_REPORT.get(report, report) if result.get("masked_lm") else report


# The report a masked LM's result of a report gets (`report_of`).
_MASKED_REPORT = {"text": "mlm"}


def _by_report(results: list[dict]) -> dict[str, list[dict]]:
    """The results grouped by their report (`report_of`)."""
    groups: dict[str, list[dict]] = {}
    for result in results:
        groups.setdefault(report_of(result), []).append(result)
    return groups


def draw_result(result: dict, path: str | Path) -> list[Path]:
    """The pictures of one result, written next to its file `path` (a retrieval result's
    heatmap, same name, .png); the paths written (none for other results)."""
    return REPORTS[report_of(result)].own(result, Path(path))


# --- task sweeps: accuracy against problem size -------------------------------------------


def _dataset(results: list[dict]) -> str:
    return results[0].get("dataset", "algorithmic")


def _task_kind(results: list[dict]):
    """The data kind class of task results, whose size_label and panels label the plot."""
    from posjax import data

    kind = data.kinds.kind_class(_dataset(results))
    if not issubclass(kind, data.TaskData):
        raise ConfigError(f"task results of dataset {_dataset(results)!r}, which no task kind "
                          "is registered as: plot them where that kind's module is installed")
    return kind


def plot_task_accuracy(results: list[dict], path: Path) -> Path:
    """Accuracy against problem size, one line per run; sizes trained on are shaded (as in
    Kazemnejad et al. 2023, Fig. 3). Sizes a run cannot reach (error rows) are left out."""
    dataset, kind = _dataset(results), _task_kind(results)
    panels = kind.panels
    fig, axes = plt.subplots(1, len(panels), figsize=(12, 4.8), sharex=True)
    sizes = sorted({r["length"] for res in results for r in res["lengths"]})
    colors = glyphs.colours(r["label"] for r in results)
    for ax, (key, name) in zip(axes, panels, strict=True):
        for result in results:
            rows = [r for r in result["lengths"] if key in r]
            if rows:
                seeds.line(ax, rows, key, label=result["label"], color=colors[result["label"]])
        for train_len in sorted({r["train_len"] for r in results}):
            # light yellow, not grey: tab10 draws one encoding in grey, with its seed band
            ax.axvspan(min(sizes) - 0.5, train_len + 0.5, color="gold", alpha=0.12, lw=0)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel(kind.size_label)
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
    tasks = ", ".join(sorted({str(r.get("task")) for r in results}))
    smoke.titled(fig, f"{dataset} {tasks}: accuracy against size (shaded: sizes trained on)"
                 + seeds.band_note(results), results)
    glyphs.plain(fig)
    fig.tight_layout()
    # one legend for both panels, below them, so no line is hidden behind it
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3,
               fontsize=8, frameon=False)
    glyphs.save(fig, path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def size_columns(results: list[dict]) -> tuple[int, list[tuple[str, int | None]]]:
    """(bucket_size, [(heading, bucket)]): "seen" (bucket None), then the unseen sizes in at
    most four buckets of equal width (one per size when there are few); a size with no
    example (`ranking.measured`) makes no column."""
    train_len = max(r["train_len"] for r in results)
    sizes = sorted({row["length"] for r in results
                    for row in filter(ranking.measured, r["lengths"])})
    unseen = [n for n in sizes if n > train_len]
    bucket_size = max(1, -(-(max(unseen, default=train_len) - train_len) // 4))
    columns: list[tuple[str, int | None]] = [(f"seen (<= {train_len})", None)]
    for bucket in sorted({ranking.size_bucket(n, train_len, bucket_size) for n in unseen}):
        members = [n for n in unseen
                   if ranking.size_bucket(n, train_len, bucket_size) == bucket]
        heading = str(members[0]) if len(members) == 1 else f"{members[0]}-{members[-1]}"
        columns.append((heading, bucket))
    return bucket_size, columns


def bucket_means(result: dict, bucket, bucket_size: int, keys) -> tuple[float, ...] | None:
    """Each metric of `keys` averaged over the sizes of one column (a size the encoding
    cannot reach counts 0, one with no example none: `ranking.measured`), None if none
    scored."""
    rows = [r for r in filter(ranking.measured, result["lengths"])
            if ranking.size_bucket(r["length"], result["train_len"], bucket_size) == bucket]
    if not rows or all("error" in r for r in rows):
        return None
    return tuple(sum(r.get(key, 0.0) for r in rows) / len(rows) for key in keys)


def results_table(results: list[dict]) -> str:
    """The Markdown table of a sweep's results, as their evaluation's report makes it: per
    size bucket for tasks, retrieval accuracy per length (uncombined), else perplexity per
    length."""
    return "\n".join(REPORTS[report].table(members)
                     for report, members in _by_report(results).items())


def task_table(results: list[dict]) -> str:
    """Markdown: per run, the mean accuracy over the sizes trained on and over each bucket of
    unseen sizes (cells "accuracy / second metric", errors count as 0), then the mean
    reciprocal rank of the runs over those buckets (by the kind's `rank_by`); one such table per
    task and training size, whose buckets are its own (a run ranks against runs of its task).
    A cell of "-": the run reaches no size of that column."""
    tables: dict[tuple, list[dict]] = {}
    for result in results:
        tables.setdefault((str(result.get("task")), result["train_len"]), []).append(result)
    named = len({task for task, _ in tables}) > 1
    return smoke.noted("\n".join((f"Task {task}:\n\n" if named else "")
                                 + _task_table_at(tables[task, n])
                                 for task, n in sorted(tables)), results)


def _task_table_at(results: list[dict]) -> str:
    """`task_table` of results of one training size."""
    kind = _task_kind(results)
    (first, first_name), (second, second_name) = kind.panels
    rank_key, rank_name = kind.panels[kind.rank_by]
    bucket_size, columns = size_columns(results)
    lines = ["| run | " + " | ".join(h for h, _ in columns) + " |",
             "|" + "---|" * (len(columns) + 1)]
    for result in results:
        cells = []
        for _, bucket in columns:
            means = [bucket_means(member, bucket, bucket_size, (first, second))
                     for member in result.get("per_seed", [result])]
            if any(m is None for m in means):
                cells.append("-")
                continue
            cells.append(" / ".join(seeds.format_interval(list(v)) for v in zip(*means,
                                                                                 strict=True)))
        lines.append(f"| {result['label']} | " + " | ".join(cells) + " |")
    lines += ["", f"Cells: {first_name} / {second_name}, mean over the sizes of each column "
              f"(a size a run cannot reach counts 0; -: it reaches none of them); trained on "
              f"sizes up to "
              f"{results[0]['train_len']}. {seeds.seeds_note(results)}"]
    absent = sorted({row["length"] for r in results for row in r["lengths"]
                     if not ranking.measured(row)})
    if absent:  # a column's heading names its first and last size measured, not these
        lines += ["", f"The scored data hold no example of size {', '.join(map(str, absent))}: "
                  "in no column."]
    mrr = ranking.mean_reciprocal_rank(results, metric=rank_key, bucket_size=bucket_size,
                                     label=lambda r: r["label"])
    if len(mrr) > 1:
        tied, ranked = ranking.tied_groups(results, metric=rank_key, bucket_size=bucket_size,
                                           label=lambda r: r["label"])
        lines += ["", f"Mean reciprocal rank by {rank_name} over the unseen-size columns "
                  "(Kazemnejad et al. 2023):", "", "| run | MRR |", "|---|---|"]
        lines += [f"| {name} | {value:.3f} |"
                  for name, value in sorted(mrr.items(), key=lambda kv: -kv[1])]
        if tied:
            lines += ["", "Every run ties on every column (each ranked first): this ranks "
                      "nothing." if tied == ranked else f"Every run ties on {tied} of the "
                      f"{ranked} columns ranked, where each ranks first."]
    return "\n".join(lines) + "\n"


def _no_pictures(result: dict, path: Path) -> list[Path]:
    del result, path
    return []


def _retrieval_picture(result: dict, path: Path) -> list[Path]:
    from posjax.results import heatmap

    return [heatmap.picture(result, path.with_suffix(".png"))]


class Report(NamedTuple):
    """How a sweep of one evaluation's results is drawn (pictures(results, folder, prefix) ->
    paths written; prefix, "" or "REPORT_", keeps two reports' files apart: `_prefix`) and
    tabulated (table(results) -> Markdown), and one result's own pictures (own(result, its
    file) -> paths written next to it)."""

    pictures: Callable[[list[dict], Path, str], list[Path]]
    table: Callable[[list[dict]], str]
    own: Callable[[dict, Path], list[Path]] = _no_pictures
    stem: str = "extrapolation"  # the name its pictures and table share (`_prefix`)
    # results of different datasets measure different sizes (task: sequence lengths, grid
    # sides): each dataset then gets its own pictures and table, named by it
    per_dataset: bool = False


def _retrieval_pictures(results: list[dict], out: Path, prefix: str = "") -> list[Path]:
    from posjax.results import heatmap

    del prefix  # retrieval_*.png/retrieval.md clash with no other report

    return heatmap.plot_sweep(results, out)


def _retrieval_table(results: list[dict]) -> str:
    from posjax.results import heatmap

    return heatmap.table(results)


# Keyed by a result's "report" (`Evaluation.report` of the evaluation that wrote it).
REPORTS = {"text": Report(_text_pictures, table),
           "mlm": Report(_text_pictures, table),
           "task": Report(_task_pictures, task_table, per_dataset=True),
           "retrieval": Report(_retrieval_pictures, _retrieval_table, _retrieval_picture,
                               "retrieval"),
           "match": Report(finetune.pictures, finetune.table, stem="finetune"),
           "columns": Report(columns.pictures, columns.table, stem="")}
