"""Numbers quoted in a README's prose, recomputed from a study's raw results.

A README quotes a result as `<!-- v KEY -->NUMBER`: the comment does not show once rendered,
`posjax report` rewrites NUMBER (to the digits shown) from the raw files, and
`posjax report --check` (and the test suite) fails on a quoted number that differs beyond
rounding. KEY is `NAME` for the README's own study folder, or `STUDY|NAME` with STUDY a folder
such as experiments/main. Names every study has:

    POINT:METRIC@LENGTH          mean over seeds of a number of an evaluation row,
                                 e.g. alibi:ppl@2048, rope:exact@25 (task rows: @size)
    POINT:METRIC@LENGTH:lo|hi    the bounds of its interval (posjax.results.seeds.interval)
    POINT:ppl@LENGTH/FIRST       perplexity at LENGTH over that at the first length, per seed,
                                 then mean and interval (with :lo|hi)
    POINT:stageS.FIELD[:lo|hi]   a number of stage S (from 1) of the runs' stages.json,
                                 e.g. schedule=single:stage1.final_acc
    POINT:seeds                  how many seeds the point has
    POINT:params                 the model's parameter count
    setup:NAME                   the study's budget, for its setup table: params_M (median
                                 over points, millions), tokens_M and steps (per run, median),
                                 points, runs, seeds (fewest of a point), runs_timed and
                                 wall_s / wall_s:lo / wall_s:hi (median, min and max seconds of
                                 the runs this sweep timed: sweep.json's `seconds`), wall_h
                                 (their sum, hours)

POINT is the run name without `seed=K` and without a leading `encoding=` (a plot's label).
A study folder may add derived numbers (ratios, differences, bucket means) with a file
`values.py` defining `values(study: Path) -> dict[str, float]`; `per_seed` and
`add_interval` are the pieces for that. A values.py that also reads other folders names them,
relative to the study, in `READS` (a tuple of paths): a number missing while one of them is
absent says so. A number written with `%` after it is compared as a percentage of the value.

A sentence that ranks two results marks its claim `<!-- c A < B -->` (A's interval below B's,
apart), `<!-- c A > B -->` (above, apart) or `<!-- c A ~ B -->` (the intervals overlap:
within noise), A and B keys as above (a key without `:lo|hi` is its one value) or a number
(`<!-- c peers:rope:ratio ~ 1 -->`: a ratio's range spans 1). `@*` in both keys claims it
at every length both have, `@N..M` at those from N to M (either end may be
left open: `@256..`); against a key without one, each of those lengths against that key
(`<!-- c t5:ppl@512.. > t5:ppl@128 -->`: above the training length's from 512 on).
`posjax report --check` fails on a claim the raw files contradict, so a sentence changes
when its data do. A claim in inline code is an example, not checked. In a findings section,
a paragraph, list item or table row with ranking words ("ranges apart", "within noise",
"brackets overlap") and no claim is an error too; words that rank nothing the raw files
hold (a definition, runs not kept) say why: `<!-- unchecked: the brackets' definition -->`.

A published figure is quoted as `<!-- p -->NUMBER` (its source is in the setup table). In a
findings section (a `## Findings` or `## Results` heading, up to the next `## `), a decimal
number or a percentage without either marker is an error: no figure reaches the prose
unchecked. A marker inside a fenced code block is an example (a page showing how to write
one) and is neither rewritten nor checked.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import re
import statistics
from collections.abc import Callable
from pathlib import Path

from posjax import fileio
from posjax.errors import ConfigError
from posjax.results import plots, seeds

# A fenced code block (``` to ```): a marker shown there is an example, never rewritten.
_FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
# A quote's number: a plain decimal, or (refused, never rewritten in part) one in scientific
# notation or not finite, so that no quote escapes the check.
QUOTE = re.compile(r"<!-- v (?P<key>[^>]+?) -->(?P<number>-?\d+(?:\.\d+)?|-?(?:nan|inf))"
                   r"(?P<exponent>[eE][-+]?\d+)?(?P<percent> ?%)?")
# A claim on two keys' intervals; keys hold spaces ("rope +yarn:acc@2048"), never " < ".
CLAIM = re.compile(r"<!-- c (?P<a>.+?) (?P<op>[<>~]) (?P<b>.+?) -->")
_INLINE_CODE = re.compile(r"`[^`\n]*`")  # where a page shows a claim's syntax
_LENGTHS = re.compile(r"@(\*|(?P<lo>\d*)\.\.(?P<hi>\d*))")
# Words that rank two results by their intervals, and a unit of prose that may hold them:
# a paragraph, a list item or a table row (a heading names its section's claims).
_RANKING = re.compile(r"\b(?:ranges?|brackets?|intervals?)\b[^.;:()]{0,20}?\b(?:apart|separate|"
                      r"overlap\w*)\b|\bwithin noise\b|\bapart from\b", re.I)
_UNIT = re.compile(r"\n\s*\n|\n(?=\s*(?:[-*|#]|\d+\.) )")
_UNCHECKED = re.compile(r"<!-- unchecked: [^>]+ -->")
_PUBLISHED = re.compile(r"<!-- p -->-?\d+(?:\.\d+)?(?: ?%)?")
# Decimals (not version strings such as 0.10.2) and percentages.
_RESULT_NUMBER = re.compile(r"(?<![\w.])-?\d+\.\d+(?![.\d])(?: ?%|x)?|(?<![\w.])\d+ ?%")
_FINDINGS = re.compile(r"^## (Findings|Results)\b.*?(?=^## |\Z)", re.S | re.M)
_GENERATED = r"<!-- posjax:table .*?<!-- /posjax:table -->"  # a table `posjax report` writes
_SKIPPED = re.compile(rf"```.*?```|`[^`\n]*`|{_GENERATED}|<!-- .*? -->", re.S)


def add_interval(out: dict, name: str, values: list[float]) -> None:
    """out[name], out[name:lo], out[name:hi]: the mean of `values` (one per seed) and its
    interval (posjax.results.seeds.interval)."""
    mean, low, high = seeds.interval(values)
    out[name], out[f"{name}:lo"], out[f"{name}:hi"] = mean, low, high


def add_spread(out: dict, name: str, values: list[float]) -> None:
    """out[name], out[name:lo], out[name:hi]: the median, min and max of `values` (one per
    repeat of a benchmark)."""
    out[name], out[f"{name}:lo"], out[f"{name}:hi"] = (
        statistics.median(values), min(values), max(values))


def task_column_values(resultsdir: Path, prefix: str) -> dict[str, float]:
    """PREFIX:POINT:COLUMN:acc|exact[:lo|hi] of a task sweep's results (counting, selective
    copy, ...): answer-token accuracy / exact match, mean over the sizes of a column of its
    table (COLUMN: seen, then the headings of the unseen sizes, e.g. 21-25), per seed, then
    mean and interval."""
    out: dict[str, float] = {}
    results = plots.load_results(resultsdir)
    bucket_size, columns = plots.size_columns(results)
    for result in results:
        for heading, bucket in columns:
            means = [plots.bucket_means(member, bucket, bucket_size, ("acc", "seq_acc"))
                     for member in result.get("per_seed", [result])]
            column = "seen" if bucket is None else heading
            for index, metric in enumerate(("acc", "exact")):
                add_interval(out, f"{prefix}:{result['label']}:{column}:{metric}",
                             [m[index] for m in means])
    return out


RETRIEVAL_METRICS = ("acc", "exact", "token_acc")


def retrieval_values(resultsdir: Path, prefix: str) -> dict[str, float]:
    """Numbers of a retrieval sweep's results (passkey, flipflop, ...):

        PREFIX:POINT:METRIC@LENGTH[:lo|hi]  METRIC (acc: the answer against its distractors;
                                            exact: greedy decoding right; token_acc: share
                                            of answer tokens right), mean over depths, per
                                            seed, then mean and interval
        PREFIX:POINT:acc@past[:lo|hi]       acc over the lengths past the training length
                                            (mean over them per seed, then mean, interval)
        PREFIX:POINT:train_acc[:lo|hi]      token accuracy of the last logged training step
                                            (metrics.jsonl), per seed, then mean, interval
    """
    out: dict[str, float] = {}
    for result in plots.load_results(resultsdir, plots.RETRIEVAL_FILES):
        by_length = per_seed(result)
        for length, rows in by_length.items():
            for metric in RETRIEVAL_METRICS:
                if all(metric in row for row in rows):
                    add_interval(out, f"{prefix}:{result['label']}:{metric}@{length}",
                                 [row[metric] for row in rows])
        past = [rows for length, rows in by_length.items() if length > result["train_len"]
                and all("acc" in row for row in rows)]
        if past:
            add_interval(out, f"{prefix}:{result['label']}:acc@past",
                         [statistics.fmean(row["acc"] for row in seed_rows)
                          for seed_rows in zip(*past, strict=True)])
    by_point: dict[str, list[float]] = {}
    for run in sorted(p for p in resultsdir.iterdir() if (p / "metrics.jsonl").exists()):
        rows = fileio.read_jsonl(run / "metrics.jsonl")
        by_point.setdefault(seeds.label(run.name), []).append(rows[-1]["acc"])
    for point, accs in by_point.items():
        add_interval(out, f"{prefix}:{point}:train_acc", accs)
    return out


def _numbers(values: list) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def per_seed(result: dict) -> dict[int, list[dict]]:
    """length -> the evaluation row of every seed of a (combined) result, for the lengths
    every seed scored."""
    rows = [{row["length"]: row for row in m["lengths"]} for m in result.get("per_seed",
                                                                             [result])]
    return {n: [r[n] for r in rows] for n in rows[0] if all(n in r for r in rows)}


def _evaluation_values(results: list[dict]) -> dict[str, float]:
    out = {}
    for result in results:
        out[f"{result['label']}:seeds"] = len(result.get("per_seed", [result]))
        by_length = per_seed(result)
        for length, rows in by_length.items():
            for key in rows[0]:
                numbers = [row.get(key) for row in rows]
                if key not in ("length", "bucket_size") and _numbers(numbers):
                    add_interval(out, f"{result['label']}:{key}@{length}", numbers)
        first = min(by_length)
        for length, rows in by_length.items():
            if length != first and all("ppl" in r for r in rows + by_length[first]):
                add_interval(out, f"{result['label']}:ppl@{length}/{first}",
                             [r["ppl"] / f["ppl"] for r, f in zip(rows, by_length[first],
                                                                  strict=True)])
    return out


def _stage_values(resultsdir: Path, index: dict) -> dict[str, float]:
    by_point: dict[str, list[list[dict]]] = {}
    for name in _finished(index):
        stages = fileio.read_stages(resultsdir / name / "stages.json", {}).get("stages")
        if stages:
            by_point.setdefault(seeds.label(name), []).append(stages)
    out = {}
    for point, runs in by_point.items():
        for s, stage in enumerate(runs[0], start=1):
            for field in stage:
                numbers = [run[s - 1].get(field) for run in runs if len(run) >= s]
                if len(numbers) == len(runs) and _numbers(numbers):
                    add_interval(out, f"{point}:stage{s}.{field}", numbers)
    return out


def _params(run: Path) -> int:
    """The parameter count of the model of the run in `run` (Experiment.num_params, counted
    once per model structure)."""
    from posjax.experiment import Experiment

    return Experiment.from_workdir(run).num_params


def _finished(index: dict) -> dict[str, dict]:
    """The entries of sweep.json's runs that finished (a failed run is no part of the
    study's numbers: sweep.json keeps its error)."""
    return {name: entry for name, entry in plots.sweep_entries(index).items()
            if entry.get("status", "done") == "done"}


def _setup_values(resultsdir: Path, index: dict) -> dict[str, float]:
    runs = [name for name in _finished(index) if (resultsdir / name / "config.json").exists()]
    if not runs:
        return {}
    points: dict[str, list[str]] = {}
    for name in runs:
        points.setdefault(seeds.label(name), []).append(name)
    out = {f"{point}:params": _params(resultsdir / names[0]) for point, names in points.items()}
    stages = [fileio.read_json(resultsdir / name / "config.json")["train"]["stages"]
              for name in runs]
    out.update({
        "setup:params_M": statistics.median(out[f"{p}:params"] for p in points) / 1e6,
        "setup:tokens_M": statistics.median(sum(n * b * k for n, b, k in st)
                                            for st in stages) / 1e6,
        "setup:steps": statistics.median(sum(k for *_, k in st) for st in stages),
        "setup:points": len(points),
        "setup:runs": len(runs),
        "setup:seeds": min(len(names) for names in points.values()),
    })
    seconds = [entry["seconds"] for entry in _finished(index).values() if entry.get("seconds")]
    if seconds:
        out.update({"setup:runs_timed": len(seconds), "setup:wall_s": statistics.median(seconds),
                    "setup:wall_s:lo": min(seconds), "setup:wall_s:hi": max(seconds),
                    "setup:wall_h": sum(seconds) / 3600})
    return out


def study_module(study: Path):
    """The study folder's own `values.py` as a module (`values(study)`, and optionally
    `tables(study) -> {name: markdown}`), or None."""
    path = Path(study) / "values.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"posjax_values_{Path(study).name}", path)
    module = importlib.util.module_from_spec(spec)
    _one_line(path, "loading it", lambda: spec.loader.exec_module(module))
    return module


def failed_points(study: Path) -> set[str]:
    """The points whose every run sweep.json records as failed (plots.failed_runs)."""
    results = Path(study) / "results"
    index = fileio.read_json(results / "sweep.json")
    if index is None:
        return set()
    return ({seeds.label(name) for name in plots.failed_runs(results)}
            - {seeds.label(name) for name in _finished(index)})


def absent_reads(study: Path) -> list[str]:
    """The folders of the study's values.py's `READS` that are not there."""
    module = study_module(study)
    reads = getattr(module, "READS", ()) if module is not None else ()
    return [read for read in reads if not (Path(study) / read).exists()]


def study_call(study: Path, module, function: str):
    """`module.function(study)` of a study's values.py; an error in it is one line naming the
    file, the function and the error."""
    return _one_line(Path(study) / "values.py", f"{function}()",
                     lambda: getattr(module, function)(study))


def _one_line(path: Path, what: str, call):
    try:
        return call()
    except ConfigError:
        raise
    except Exception as error:
        raise ConfigError(f"{path}: {what} failed with {type(error).__name__}: {error} (fix "
                          "the file, or the raw result it reads)") from error


def study_values(study: str | Path) -> dict[str, float]:
    """Every quotable number of a study folder (see the module doc), by name."""
    study = Path(study)
    resultsdir = study / "results"
    index = fileio.read_json(resultsdir / "sweep.json")
    out: dict[str, float] = {}
    if index is not None:
        out.update(_evaluation_values(plots.load_results(resultsdir)))
        out.update(_stage_values(resultsdir, index))
        out.update(_setup_values(resultsdir, index))
    module = study_module(study)
    if module is not None:
        out.update(study_call(study, module, "values"))
    if not out:
        raise ConfigError(f"{study} has neither results/sweep.json nor values.py: nothing "
                          "there can be quoted")
    return out


class MissingNumber(ConfigError):
    """A quoted key that its study's values do not hold (a typo, a run no longer there)."""


def is_study(folder: str | Path) -> bool:
    """Whether `folder` is a study (results/sweep.json collected into it, or a values.py
    naming its tables), not run folders to compare."""
    return ((Path(folder) / "results" / "sweep.json").exists()
            or (Path(folder) / "values.py").exists())


def owning_study(folder: Path) -> Path:
    """The study whose numbers a README in `folder` quotes without naming a study: `folder`
    itself, or the nearest study above it (a folder of raw files inside a study,
    experiments/bench/seed_steps_cpu); `folder` where none is."""
    return next((f for f in (folder, *folder.parents) if is_study(f)), folder)


class Quotes:
    """The quoted numbers of one README, resolved against the studies they name; `cache`
    (study folder -> its values) may be shared by the pages of one check, whose raw files
    do not change while it runs."""

    def __init__(self, readme: Path, root: Path, cache: dict[Path, dict] | None = None):
        self.readme, self.root = Path(readme), Path(root)
        self._cache: dict[Path, dict[str, float]] = {} if cache is None else cache

    def _values(self, key: str) -> tuple[Path, dict[str, float], str]:
        """(study folder, its values, the key's name in them)."""
        study, _, name = key.rpartition("|")
        folder = (self.root / study) if study else owning_study(self.readme.parent)
        if folder not in self._cache:
            if not folder.is_dir():
                raise MissingNumber(f"{self.readme}: {key} names the study {study}, which is "
                                    f"not there ({folder}): fix the key's study")
            self._cache[folder] = study_values(folder)
        return folder, self._cache[folder], name

    def value(self, key: str) -> float:
        folder, values, name = self._values(key)
        if name not in values:
            point = name.partition(":")[0]
            if point in failed_points(folder):
                raise MissingNumber(f"{self.readme}: no number {name!r} in {folder}: {point} "
                                    "failed in its sweep (results/sweep.json keeps its error)")
            absent = absent_reads(folder)
            near = difflib.get_close_matches(name, values, n=3, cutoff=0.6)
            raise MissingNumber(f"{self.readme}: no number {name!r} in {folder}; " + (
                f"its values.py also reads {', '.join(absent)}, not there: put "
                f"{'that folder' if len(absent) == 1 else 'those folders'} beside the study"
                if absent else f"did you mean {', '.join(near)}?" if near else
                f"it has e.g. {', '.join(sorted(values)[:4])}"))
        return values[name]

    def rendered(self, match: re.Match) -> str:
        """The quote with its number recomputed, written with the digits it had."""
        key, number, percent = match.group("key"), match.group("number"), match.group("percent")
        if match.group("exponent"):
            raise MissingNumber(f"{self.readme}: {key} is quoted as {number}"
                                f"{match.group('exponent')}: write it as a plain decimal "
                                "(140.54, not 1.4054e2), the digits it shows")
        value = self.value(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MissingNumber(f"{self.readme}: {key} is {value!r} ({type(value).__name__}) in "
                                "its study's values, not a number: make values() give a float")
        if not math.isfinite(value):
            raise MissingNumber(f"{self.readme}: {key} is {value} in its study's values, not a "
                                "finite number: fix the raw result or values() that gives it")
        digits = len(number.partition(".")[2])
        value *= 100 if percent else 1
        return f"<!-- v {key} -->{value:.{digits}f}{percent or ''}"

    def mismatches(self, text: str) -> list[str]:
        """One line per quoted number that differs from its raw files beyond rounding, or
        that they cannot give (a key its study lacks)."""
        problems = []
        for match in QUOTE.finditer(without_code(text)):
            try:  # every quote is checked: a key its study lacks is one line among the rest
                fresh = QUOTE.match(self.rendered(match))
            except MissingNumber as error:
                problems.append(str(error))
                continue
            if fresh.group("number") != match.group("number"):
                problems.append(f"{self.readme}: {match.group('key')} is quoted as "
                                f"{match.group('number')}, its raw files give "
                                f"{fresh.group('number')}")
        return list(dict.fromkeys(problems))  # a study that fails fails once, not per quote

    def _interval(self, key: str) -> tuple[float, float]:
        """(low, high) of a key: its :lo and :hi, or its one value twice (a number: itself)."""
        number = _number(key)
        if number is not None:
            return number, number
        _, values, name = self._values(key)
        if f"{name}:lo" in values:
            return self.value(f"{key}:lo"), self.value(f"{key}:hi")
        return self.value(key), self.value(key)

    def _pairs(self, a: str, b: str) -> list[tuple[str, str]]:
        """The (A, B) key pairs a claim stands for: itself, or one per length the keys with
        an `@*` or `@N..M` all have within it (a key without one, or a number, stays as it
        is: `t5:ppl@512.. > t5:ppl@128`)."""
        spans = {key: span for key in (a, b) if _number(key) is None
                 and (span := _LENGTHS.search(key.rpartition("|")[2]))}
        if not spans:
            return [(a, b)]
        if len({s.group(0) for s in spans.values()}) > 1:
            raise MissingNumber(f"{self.readme}: the claim {a} ... {b} ranges over different "
                                "lengths in its keys: write the same @* or @N..M in both")
        span = next(iter(spans.values()))
        low, high = int(span.group("lo") or 0), int(span.group("hi") or 2 ** 62)
        at = {}  # per key: {length: its key at that length}
        for key, span in spans.items():
            study, bar, name = key.rpartition("|")
            head, tail = name[:span.start()], name[span.end():]
            pattern = re.compile(re.escape(head) + r"@(\d+)" + re.escape(tail))
            at[key] = {int(m.group(1)): f"{study}{bar}{m.group(0)}"
                       for m in map(pattern.fullmatch, self._values(key)[1]) if m}
        lengths = sorted(n for n in set.intersection(*map(set, at.values()))
                         if low <= n <= high)
        if not lengths:
            raise MissingNumber(f"{self.readme}: the claim {a} ... {b} has no length both "
                                "keys hold in its range: fix the keys or the range")
        return [tuple(at[key][n] if key in at else key for key in (a, b)) for n in lengths]

    def contradicted(self, text: str) -> list[str]:
        """One line per claim (`<!-- c A < B -->`, `>`, `~`) its raw files contradict, or
        whose keys they cannot give."""
        problems = []
        for match in CLAIM.finditer(_INLINE_CODE.sub("", without_code(text))):
            claim, op = f"{match['a']} {match['op']} {match['b']}", match["op"]
            try:
                pairs = self._pairs(match["a"], match["b"])
            except MissingNumber as error:
                problems.append(str(error))
                continue
            for a, b in pairs:
                try:
                    (a_lo, a_hi), (b_lo, b_hi) = self._interval(a), self._interval(b)
                except MissingNumber as error:
                    problems.append(str(error))
                    continue
                apart = a_hi < b_lo or b_hi < a_lo
                if {"<": a_hi < b_lo, ">": a_lo > b_hi, "~": not apart}[op]:
                    continue
                where = f" at {a.rpartition('@')[2]}" if len(pairs) > 1 else ""
                found = ("overlapping" if not apart else "apart" if op == "~"
                         else "apart the other way")
                problems.append(
                    f"{self.readme}: the claim {claim} does not hold{where}: {a} spans "
                    f"[{a_lo:.4g}, {a_hi:.4g}], {b} [{b_lo:.4g}, {b_hi:.4g}], {found}: change "
                    "the sentence and its claim to what the data say")
        return list(dict.fromkeys(problems))


def _number(key: str) -> float | None:
    """A claim's side written as a number (a ratio's 1), else None."""
    try:
        return float(key)
    except ValueError:
        return None


def outside_code(text: str, edit: Callable[[str], str]) -> str:
    """`text` with `edit` applied to each stretch outside its fenced code blocks, which are
    kept as they are (a page showing how to write a marker)."""
    out, last = [], 0
    for fence in _FENCE.finditer(text):
        out += [edit(text[last:fence.start()]), fence.group(0)]
        last = fence.end()
    return "".join([*out, edit(text[last:])])


def without_code(text: str) -> str:
    """`text` without its fenced code blocks: what a page's markers are read from."""
    return _FENCE.sub("", text)


def unclaimed(text: str) -> list[str]:
    """The start of each paragraph, list item or table row of the findings sections whose
    ranking words carry no claim (`<!-- c A < B -->`) and no `<!-- unchecked: why -->`."""
    found = []
    for section in _FINDINGS.finditer(without_code(text)):
        for unit in _UNIT.split(re.sub(_GENERATED, "", section.group(0), flags=re.S)):
            words, marked = _SKIPPED.sub("", unit), _INLINE_CODE.sub("", unit)
            if (not unit.lstrip().startswith("#") and _RANKING.search(words)
                    and not CLAIM.search(marked) and not _UNCHECKED.search(marked)):
                found.append(" ".join(words.split())[:60])
    return found


def unmarked(text: str) -> list[str]:
    """Decimal numbers and percentages in findings sections with no `v` or `p` marker."""
    found = []
    for section in _FINDINGS.finditer(without_code(text)):
        body = _PUBLISHED.sub("", QUOTE.sub("", section.group(0)))
        body = _SKIPPED.sub("", body)
        found += [m.group(0) for m in _RESULT_NUMBER.finditer(body)]
    return found
