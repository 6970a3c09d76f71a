"""A study's tables and plots regenerated from its raw results: `posjax report EXPERIMENT_DIR`.

A study folder holds `results/` as `scripts/collect_results.py` leaves it (sweep.json and one
folder per run with config.json, stages.json, metrics.jsonl and extrapolation*.json). The
report draws the sweep's plots into the folder and rewrites every generated block of the
Markdown pages that quote results (`pages`: the study's README, the project README and the
reference in docs/):

    <!-- posjax:table experiments/main -->
    ...the table `posjax plot` writes, from those raw files...
    <!-- /posjax:table -->

A study without a sweep (a benchmark) names its tables instead, `<!-- posjax:table
experiments/bench#attention -->`: its values.py defines `tables(study) -> {name: markdown}`.

Numbers quoted in the prose (`<!-- v KEY -->NUMBER`, posjax.results.values) are rewritten the
same way, and a claim on two of them (`<!-- c A < B -->`) is checked against them: one
that they contradict writes nothing. `check` regenerates without writing and lists every
stale table, every quoted number and claim its raw files contradict and every unmarked figure
or ranking in a findings section, so a test keeps the records equal to what the raw files
give.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from posjax import fileio, runlock
from posjax.errors import ConfigError
from posjax.results import plots, values

_UNCLAIMED = ("ranking words with no claim in a findings section: '{}...' (mark it "
              "<!-- c A < B -->, > or ~, or say <!-- unchecked: why --> where the raw files "
              "hold no keys for it)")
_BLOCK = re.compile(r"(<!-- posjax:table (?P<study>[^\s#]+)(?:#(?P<name>\S+))? -->\n)"
                    r"(?P<body>.*?)(<!-- /posjax:table -->)", re.S)


def study_table(study: Path, name: str | None = None) -> str:
    """The table of a study folder's raw results (what `posjax plot` writes), or the table
    `name` of its values.py."""
    if name is None:
        return plots.results_table(plots.sweep_results(study / "results"))
    module = values.study_module(study)
    tables = values.study_call(study, module, "tables") if hasattr(module, "tables") else {}
    if name not in tables:
        raise ConfigError(f"{study} has no table {name!r}; its values.py gives "
                          f"{sorted(tables) or 'none'}")
    if not isinstance(tables[name], str):
        raise ConfigError(f"{study / 'values.py'}: tables() gives {name!r} as "
                          f"{type(tables[name]).__name__}, not Markdown text: make it a str")
    return tables[name] + "\n"


def _table(match: re.Match, root: Path) -> str:
    study = root / match.group("study")
    if not study.is_dir():
        raise ConfigError(
            f"a marker <!-- posjax:table {match.group('study')} --> names {study}, which does "
            f"not exist: a marker names its study by its path from the checkout's root "
            f"({root.resolve()})")
    return study_table(study, match.group("name"))


def _regenerate(text: str, readme: Path, root: Path, cache: dict) -> str:
    def block(match):
        return match.group(1) + _table(match, root) + match.group(5)

    quotes = values.Quotes(readme, root, cache)
    return values.outside_code(text, lambda part: values.QUOTE.sub(
        quotes.rendered, _BLOCK.sub(block, part)))


def checkout_root(study: str | Path) -> Path:
    """The folder the pages' markers name studies from (`experiments/main`): the nearest one
    at or above `study` holding pyproject.toml or .git, so a study given from outside its
    checkout is found; outside any checkout, the folder its own README's markers name it
    from (`<!-- posjax:table mystudy -->`: the folder holding mystudy), else the working
    folder if the study is under it, else its parent; "." when that is the working folder.
    A study outside any checkout whose markers name it by a path it is not at (a copy of
    experiments/theta elsewhere) is a one-line ConfigError."""
    here, cwd = Path(study).resolve(), Path.cwd().resolve()
    found = next((folder for folder in (here, *here.parents)
                  if (folder / "pyproject.toml").exists() or (folder / ".git").exists()),
                 None) or _named_from(here)
    if found is None and (named := _marker_studies(here)):
        raise ConfigError(
            f"{study} is outside a checkout, and its README's markers name its study "
            f"{named[0]}, which is not the end of its path: put the study at "
            f"FOLDER/{named[0]}, or make its markers name it by its folder's name "
            f"({here.name})")
    found = found or (cwd if cwd in here.parents else here.parent)
    return Path(".") if found == cwd else found


def _marker_studies(study: Path) -> list[str]:
    """The studies its README's markers name (a table's study, or the study of a quoted
    key), in order."""
    readme = study / "README.md"
    if not readme.is_file():
        return []
    text = values.without_code(readme.read_text())
    named = [m.group("study") for m in _BLOCK.finditer(text)]
    named += [m.group("key").rpartition("|")[0] for m in values.QUOTE.finditer(text)]
    return list(dict.fromkeys(filter(None, named)))


def _named_from(study: Path) -> Path | None:
    """The folder F with F / NAME == `study` for a study NAME that its README's markers
    name, or with F / NAME a sub-study in it (experiments/retrieval quotes only
    experiments/retrieval/passkey and /flipflop), or None."""
    for name in _marker_studies(study):
        parts = Path(name).parts
        for cut in range(len(parts), 0, -1):
            head, rest = parts[:cut], parts[cut:]
            if study.parts[-cut:] == head and study.joinpath(*rest).is_dir():
                return Path(*study.parts[:-cut])
    return None


def pages(study: str | Path, root: str | Path = ".") -> list[Path]:
    """The Markdown pages whose generated blocks and quoted numbers `report` rewrites and
    `check` verifies: the study's README, those of its folders that are no study of their
    own (experiments/bench/seed_steps_cpu, whose unprefixed quotes are the study's),
    ROOT/README.md and every page of ROOT/docs/."""
    study, root = Path(study), Path(root)
    parts = [page for page in sorted(study.glob("*/README.md"))
             if not values.is_study(page.parent)]
    candidates = [study / "README.md", *parts, root / "README.md",
                  *sorted((root / "docs").glob("*.md"))]
    return [page for page in candidates if page.exists()]


def report(study: str | Path, root: str | Path = ".") -> list[Path]:
    """Draw the plots of `study` and its sub-studies from their raw results and rewrite the
    generated blocks of its `pages`; returns the paths written."""
    study, root = Path(study), Path(root)
    swept = (study / "results" / "sweep.json").exists()
    if not swept and not (study / "values.py").exists():
        raise ConfigError(f"{study} has no results/sweep.json: collect a sweep into it with "
                          "scripts/collect_results.py SWEEPDIR STUDY_DIR, or compare its runs "
                          f"with posjax plot {study}")
    gone = runs_without_folders(study)
    if gone:
        raise ConfigError(f"{gone[0]}; nothing was written")
    # Every page regenerated before anything is written: a quote its raw files no longer
    # give fails here, with the plots and pages as they were.
    changed, cache = [], {}  # the studies' values once for every page
    for page in pages(study, root):
        text = page.read_text()
        new = _regenerate(text, page, root, cache)
        bare = values.unmarked(values.without_code(new))
        if bare:
            raise ConfigError(f"{page}: unmarked figure {bare[0]!r} in a findings section: "
                              "quote it as <!-- v KEY --> (or <!-- p --> if published); "
                              "nothing was written")
        unclaimed = values.unclaimed(new)
        if unclaimed:
            raise ConfigError(f"{page}: {_UNCLAIMED.format(unclaimed[0])}; nothing was written")
        wrong = values.Quotes(page, root, cache).contradicted(new)
        if wrong:
            raise ConfigError(f"{wrong[0]}; nothing was written")
        if new != text:
            changed.append((page, new))
    with runlock.deferred():  # the plots and pages as one: a stop waits for every file
        written = [path for folder in _plotted(study)
                   for path in plots.plot_sweep(folder / "results", output=folder)]
        written += [fileio.write_text(page, new) for page, new in changed]
        runlock.written(f"interrupted after every plot and page of {study} was written")
    return written


def _plotted(study: Path) -> list[Path]:
    """`study` and its sub-studies (folders in it with their own results/sweep.json,
    experiments/encodings_2025/text_image), those whose results/ `report` draws."""
    return [folder for folder in [study, *sorted(p.parents[1]
                                                 for p in study.glob("*/results/sweep.json"))]
            if (folder / "results" / "sweep.json").is_file()]


def runs_without_folders(study: str | Path) -> list[str]:
    """One line (or none) naming the runs the study's results/sweep.json lists that have no
    folder: its numbers would be computed over the runs left (two seeds quoted for three)."""
    results = Path(study) / "results"
    if not (results / "sweep.json").is_file():
        return []
    gone = plots.runs_without_folder(results)
    return [f"{results / 'sweep.json'} lists {len(gone)} run(s) with no folder: "
            f"{', '.join(gone)} (restore them, e.g. with git checkout {results}, or train "
            "them again with the study's sweep)"] if gone else []


def stale_plots(study: str | Path) -> list[str]:
    """One line per picture or plotted table of `study` and of its sub-studies (folders in
    it with their own results/sweep.json, experiments/encodings_2025/text_image): what
    `report` draws from their results/, missing or differing, byte for byte, from what their
    raw results draw now. Drawn into a temporary folder, so nothing of the study's is
    written."""
    lines = []
    for folder in _plotted(Path(study)):
        fix = f"(run `posjax report {folder}`)"
        with tempfile.TemporaryDirectory() as fresh:
            for drawn in plots.plot_sweep(folder / "results", output=fresh):
                kept = folder / drawn.name
                if not kept.is_file():
                    lines.append(f"{kept}: missing {fix}")
                elif kept.read_bytes() != drawn.read_bytes():
                    lines.append(f"{kept}: stale, its raw results draw it otherwise {fix}")
    return lines


def check(markdown: str | Path, root: str | Path = ".",
          cache: dict[Path, dict] | None = None) -> list[str]:
    """One line per problem of `markdown` against the raw results: a stale generated table,
    a quoted number they contradict, a figure in a findings section with no marker.
    `cache`: the studies' values, shared by the pages checked together (values.Quotes)."""
    markdown, root = Path(markdown), Path(root)
    text = values.without_code(markdown.read_text())
    problems = [f"{markdown}: stale table {m.group('study')}"
                f"{'#' + m.group('name') if m.group('name') else ''} (run `posjax report "
                f"{root / m.group('study')}`)" for m in _BLOCK.finditer(text)
                if m.group("body") != _table(m, root)]
    quotes = values.Quotes(markdown, root, cache)
    problems += quotes.mismatches(text) + quotes.contradicted(text)
    problems += [f"{markdown}: unmarked figure {n!r} in a findings section (quote it as "
                 "<!-- v KEY -->, or <!-- p --> if published)" for n in values.unmarked(text)]
    problems += [f"{markdown}: {_UNCLAIMED.format(words)}" for words in values.unclaimed(text)]
    return problems
