"""A study's tables and plots regenerated from its raw results: `posjax report EXPERIMENT_DIR`.

A study folder holds `results/` as `scripts/collect_results.py` leaves it (sweep.json and one
folder per run with config.json, stages.json, metrics.jsonl and extrapolation*.json). The
report draws the sweep's plots into the folder and rewrites every generated block of a
Markdown file that names the folder:

    <!-- posjax:table experiments/main -->
    ...the table `posjax plot` writes, from those raw files...
    <!-- /posjax:table -->

`check` regenerates the blocks without writing and lists those whose text differs, so a test
keeps every quoted table equal to what its raw files give.
"""

from __future__ import annotations

import re
from pathlib import Path

from posjax import io
from posjax.errors import ConfigError
from posjax.eval import plots

_BLOCK = re.compile(
    r"(<!-- posjax:table (?P<study>\S+) -->\n)(?P<body>.*?)(<!-- /posjax:table -->)", re.S)


def study_table(study: Path) -> str:
    """The table of a study folder's raw results (what `posjax plot` writes)."""
    return plots.table(plots.load_results(study / "results"))


def _regenerate(text: str, root: Path) -> str:
    def block(match):
        return match.group(1) + study_table(root / match.group("study")) + match.group(4)

    return _BLOCK.sub(block, text)


def report(study: str | Path, root: str | Path = ".") -> list[Path]:
    """Draw `study`'s plots from its raw results and rewrite the generated blocks of its
    README and of ROOT/README.md; returns the paths written."""
    study, root = Path(study), Path(root)
    if not (study / "results" / "sweep.json").exists():
        raise ConfigError(f"{study} has no results/sweep.json: collect a sweep into it with "
                          "scripts/collect_results.py SWEEPDIR STUDY_DIR")
    written = plots.plot_sweep(study / "results", output=study)
    for readme in (study / "README.md", root / "README.md"):
        if readme.exists():
            text = readme.read_text()
            new = _regenerate(text, root)
            if new != text:
                written.append(io.write_text(readme, new))
    return written


def check(markdown: str | Path, root: str | Path = ".") -> list[str]:
    """The studies whose generated blocks in `markdown` differ from their raw results."""
    text = Path(markdown).read_text()
    return [m.group("study") for m in _BLOCK.finditer(text)
            if m.group("body") != study_table(Path(root) / m.group("study"))]
