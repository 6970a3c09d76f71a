"""Several seeds of one sweep point, summarised as a mean and an interval.

A sweep with `seeds=N` runs every point N times (`seed=0..N-1` in the run names); the
results of one point are combined here. With n seeds the interval of a number is its min and
max for n < 5, where a t-interval from so few values says little, and the 95 % Student-t
interval of the mean, mean +- t(0.975, n - 1) s / sqrt(n), for n >= 5. Two points are ranked
only when their intervals do not overlap (`separated`).
"""

from __future__ import annotations

import json
import math
import re
import statistics

from posjax.errors import ConfigError
from posjax.records import RESUMABLE_CHANGES, flatten

T_INTERVAL_SEEDS = 5  # from this many seeds on, the interval is the 95 % t-interval
_SEED = re.compile(r"(^|,)seed=\d+(?=,|$)")


def point(run_name: str) -> str:
    """The sweep point of a run: its name without the seed, e.g. "encoding=rope"."""
    return _SEED.sub("", run_name).strip(",")


def label(run_name: str) -> str:
    """A sweep point as plots and quoted numbers name it: the point without a leading
    `encoding=`, e.g. "encoding=rope,theta=500,seed=1" -> "rope,theta=500"."""
    return point(run_name).removeprefix("encoding=")


def interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high) of `values` (see the module doc for which interval)."""
    mean = statistics.fmean(values)
    if len(values) < T_INTERVAL_SEEDS:
        return mean, min(values), max(values)
    from scipy import stats  # half a second to import, for 5 seeds or more only

    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(
        len(values))
    return mean, mean - half, mean + half


def interval_kind(seeds: int) -> str:
    """How `format`'s brackets read for `seeds` runs."""
    return "min-max" if seeds < T_INTERVAL_SEEDS else "95 % t-interval of the mean"


def separated(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool:
    """Whether two intervals (mean, low, high) do not overlap."""
    return a[2] < b[1] or b[2] < a[1]


def format_interval(values: list[float], digits: int = 3) -> str:
    """"mean [low, high]" of several seeds' values, or the value of one."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    mean, low, high = interval(values)
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def _numbers(values) -> bool:
    return isinstance(values, list) and all(
        x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)) for x in values)


def _combine_rows(rows: list[dict]) -> dict:
    """One evaluation row from the same row of every seed: numbers become means with their
    interval in KEY_interval; lists of numbers (per-position losses) become elementwise
    means with each element's [min, max] in KEY_interval; anything else is kept where every
    seed agrees and dropped where they differ."""
    out = dict(rows[0])
    for key, value in rows[0].items():
        if key == "length":
            continue
        values = [r.get(key) for r in rows]
        if any(v is None for v in values):
            out.pop(key, None)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            mean, low, high = interval([float(v) for v in values])
            out[key], out[f"{key}_interval"] = mean, [low, high]
        elif isinstance(value, list) and all(_numbers(v) and len(v) == len(value)
                                             for v in values):
            columns = [None if any(x is None for x in column) else column
                       for column in zip(*values, strict=True)]
            out[key] = [column and statistics.fmean(column) for column in columns]
            out[f"{key}_interval"] = [column and [min(column), max(column)]
                                      for column in columns]
        elif any(v != value for v in values):
            out.pop(key, None)
    return out


def _check_distinct_seeds(label: str, members: list[dict]) -> None:
    """A one-line ConfigError where two runs of one point trained with the same seed (a run
    by hand beside a sweep's `seed=0`): their results would count as two seeds."""
    first: dict[object, dict] = {}
    for member in members:
        seed = member.get("train_seed")
        if seed is None:  # a result with no run config beside it (--output, a snapshot)
            continue
        if seed in first and first[seed]["folder"] != member["folder"]:
            raise ConfigError(
                f"runs {first[seed]['folder']} and {member['folder']} are the point {label!r} "
                f"trained with the same seed {seed}: they would count as two seeds; plot "
                "one of them")
        first.setdefault(seed, member)


# What the seeds of one point must share to be one point's seeds: what they encoded and how
# they were scored (the text, its budget, the windows, the method; a retrieval task's trials
# and depths).
_SHARED = ("encoding", "train_len", "protocol", "stride", "method", "learned_extension",
           "max_tokens", "data", "trials_per_cell", "depths")


def _check_one_setup(label: str, members: list[dict]) -> None:
    """A one-line ConfigError where results grouped as one point's seeds (by their folders'
    names) differ in what they encoded or how they were scored: a mean over them would
    mix two things under one name."""
    first = members[0]
    for member in members[1:]:
        for key in _SHARED:
            if first.get(key) != member.get(key):
                ours, theirs = _difference(first.get(key), member.get(key))
                one_folder = first.get("folder") == member.get("folder")
                a, b = ((f"{first['folder']}/{first.get('file')}",
                         f"{member['folder']}/{member.get('file')}") if one_folder
                        else (first.get("folder"), member.get("folder")))
                raise ConfigError(
                    f"{'results' if one_folder else 'runs'} {a} and {b} count as seeds of "
                    f"{label!r} by their names but differ in {key} ({ours} against {theirs}): "
                    "score them alike (posjax extrapolate with the same settings), or " + (
                        "delete one" if one_folder else "rename one so they are two points"))
        if differ := _trained_differences(first, member):
            key, ours, theirs = differ[0]
            more = f" (and {len(differ) - 1} more settings)" if len(differ) > 1 else ""
            raise ConfigError(
                f"runs {first.get('folder')} and {member.get('folder')} count as seeds of "
                f"{label!r} by their names but trained with {key}={ours} against {theirs}"
                f"{more}: rename one so they are two points, or train them alike")


def _trained_differences(a: dict, b: dict) -> list[tuple[str, object, object]]:
    """(key, a's value, b's value) of each training setting, but for the seed, what only
    observes a run (RESUMABLE_CHANGES) and where it read its files (_WHERE_NOT_WHAT), that
    the config.json beside results `a` and `b` (their "setup") sets differently; none where
    either has no config.json, or where a key is in one alone (added to posjax since the
    other trained)."""
    ours, theirs = trained_settings(a), trained_settings(b)
    if "run" in ours or "run" in theirs:  # named by its folder: no config beside it
        return []
    return [(key, ours[key], theirs[key]) for key in sorted(ours.keys() & theirs.keys())
            if ours[key] != theirs[key]]


# Settings that say where a run read its files, not what it trained on.
_WHERE_NOT_WHAT = ("data.data_dir",)


def trained_settings(result: dict) -> dict:
    """{"section.key": value} of what the run of `result` trained with and how it was scored
    (its "setup", flattened), but for what only observes a run (RESUMABLE_CHANGES) and where
    it read its files (_WHERE_NOT_WHAT)."""
    return {key: value for key, value in flatten(json.loads(result.get("setup") or "{}")).items()
            if not key.startswith((*RESUMABLE_CHANGES, *_WHERE_NOT_WHAT))}


def _difference(a, b) -> tuple[str, str]:
    """Two values as shown in a message: of two dicts, the entries that differ (the name
    alone where the names differ)."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = (["name"] if a.get("name") != b.get("name") else
                [k for k in sorted({*a, *b}) if a.get(k) != b.get(k)])
        return tuple(", ".join(f"{k}={d.get(k)}" for k in keys) for d in (a, b))
    return str(a), str(b)


def combine(results: list[dict]) -> list[dict]:
    """Results with the same label (one sweep point and method) merged into one with
    "seeds": n, combined rows (lengths every seed scored; "partial_lengths": those some seeds
    lack) and "per_seed": the results merged (for statistics of derived numbers); single
    results unchanged."""
    groups: dict[str, list[dict]] = {}
    for result in results:
        groups.setdefault(result["label"], []).append(result)
    combined = []
    for label, members in groups.items():
        _check_distinct_seeds(label, members)
        if len(members) == 1:
            combined.append(members[0])
            continue
        _check_one_setup(label, members)
        by_length = [{r["length"]: r for r in m["lengths"]} for m in members]
        common = [n for n in by_length[0] if all(n in rows for rows in by_length)]
        # a length some seeds scored and others did not (one refused, as past a learned
        # table or a fine-tune's documents, is no length a seed left unscored)
        partial = sorted({n for rows in by_length for n, row in rows.items()
                          if "error" not in row} - set(common))
        combined.append({**members[0], "seeds": len(members), "per_seed": members, "lengths": [
            _combine_rows([rows[n] for rows in by_length]) for n in common],
            **({"partial_lengths": partial} if partial else {})})
    return combined


def line(ax, rows: list[dict], key: str, **style) -> None:
    """`key` against length, with its seeds' band when the rows have one."""
    lengths = [r["length"] for r in rows]
    line, = ax.plot(lengths, [r[key] for r in rows], marker="o", ms=3, **style)
    if all(f"{key}_interval" in r for r in rows):
        low, high = zip(*(r[f"{key}_interval"] for r in rows), strict=True)
        ax.fill_between(lengths, low, high, color=line.get_color(), alpha=0.18, lw=0)


def cell(row: dict | None, key: str, digits: int = 3) -> str:
    """A table cell: the value, and its seeds' interval in brackets when there is one."""
    if not row or key not in row:
        return "-"
    if f"{key}_interval" not in row:
        return f"{row[key]:.{digits}f}"
    low, high = row[f"{key}_interval"]
    return f"{row[key]:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def band_note(results: list[dict]) -> str:
    """A figure's line on what its lines and their bands are ("" for one seed a run): a
    shaded band is otherwise unexplained on the picture."""
    counts = sorted({r.get("seeds", 1) for r in results})
    if counts == [1]:
        return ""
    return (f"\nLines: means over {', '.join(map(str, counts))} seeds; bands: their "
            f"{' / '.join(interval_kind(n) for n in counts)}")


def unscored_note(results: list[dict], key: str) -> str:
    """A table's line on its "-" cells: each result's lengths with no `key` and the error
    their rows give ("" where there are none)."""
    unscored: dict[tuple[str, str], list[int]] = {}  # (label, why) -> its lengths
    for result in results:
        for row in result["lengths"]:
            if key not in row and row.get("error"):
                why = row["error"].strip().splitlines()[0]
                unscored.setdefault((result["label"], why), []).append(row["length"])
    return "Not scored (-): " + "; ".join(
        f"{label} at {', '.join(map(str, sorted(at)))}: {why}"
        for (label, why), at in unscored.items()) + "." if unscored else ""


def seeds_note(results: list[dict]) -> str:
    """The caption's line on seeds: how many each mean is over and what its brackets are;
    rows over fewer seeds than the most are named with their seeds (a method scored on
    seed 2 alone beside one scored on seeds 0 and 1 differs by its seeds too)."""
    counts = sorted({r.get("seeds", 1) for r in results})
    if counts == [1]:
        return "One seed per run."
    most = counts[-1]
    fewer = [f"`{r['label']}` over {_seeds_of(r)}" for r in results if r.get("seeds", 1) < most]
    return (f"Means over {most} seeds, in brackets the {interval_kind(most)}"
            + (f" (fewer for {'; '.join(fewer)}: compare rows on the same seeds)"
               if fewer else "")
            + "; rank two runs only where their brackets do not overlap.")


def _seeds_of(result: dict) -> str:
    """'seed 2', 'seeds 0, 1' (by their train.seed, else how many) of a row."""
    seeds = [m.get("train_seed") for m in result.get("per_seed", [result])]
    if None in seeds:
        return f"{len(seeds)} seed{'s' * (len(seeds) != 1)}"
    return f"seed{'s' * (len(seeds) != 1)} {', '.join(map(str, sorted(seeds)))}"
