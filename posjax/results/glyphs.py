"""Text a figure's fonts can draw: a run folder may be named in any script ("ロープ rope"),
and matplotlib's default font (DejaVu Sans) has no CJK glyphs, so it would draw boxes and
warn once per glyph and layout pass. Such a text is shown in its ASCII-safe form
("\\u30ed\\u30fc\\u30d7 rope") instead; tables keep the name as it is.

    plain(fig)            every text of `fig` its fonts cannot draw, made ASCII-safe
    save(fig, path, ...)  plain(fig), then posjax.fileio.save_figure
    legend(target, ...)   a legend whose long labels wrap
    length_axis(ax, ...)  a log2 axis of evaluated lengths, labels that do not overlap
"""

from __future__ import annotations

import functools
import math
import textwrap
from pathlib import Path

from matplotlib import colormaps, font_manager, rcParams, ticker

from posjax import fileio


@functools.cache
def _characters(fonts: tuple[str, ...]) -> frozenset[int]:
    """The code points the font files `fonts` (a family list with its fallbacks) draw."""
    return frozenset(c for path in fonts for c in font_manager.get_font(path).get_charmap())


def _fonts(properties) -> tuple[str, ...]:
    """The font files matplotlib draws `properties` with, its fallbacks included."""
    find = getattr(font_manager.fontManager, "_find_fonts_by_props", None)
    paths = find(properties) if find else [font_manager.findfont(properties)]
    return tuple(str(p) for p in paths)


def drawable(text: str, properties) -> str:
    """`text`, or its ASCII-safe form where the fonts of `properties` lack a character."""
    if text.isascii():
        return text
    have = _characters(_fonts(properties))
    if all(ord(c) in have or c.isspace() for c in text):
        return text
    return text.encode("ascii", "backslashreplace").decode("ascii")


def plain(fig) -> None:
    """Make every text of `fig` (titles, labels, legend entries) one its fonts can draw;
    call it before a layout pass and before saving."""
    for artist in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "set_text")
                              and hasattr(a, "get_fontproperties")):
        text = artist.get_text()
        if text and not text.isascii():
            shown = drawable(text, artist.get_fontproperties())
            if shown != text:
                artist.set_text(shown)


def colours(names) -> dict:
    """One colour per distinct name, in order: tab10's (matplotlib's default cycle), tab20's
    past 10 names, where that cycle would draw two lines of one picture alike, and past 20
    tab20, tab20b and tab20c's 60 (a run scored with every method)."""
    names = list(dict.fromkeys(names))
    maps = ["tab10"] if len(names) <= 10 else ["tab20"] if len(names) <= 20 else [
        "tab20", "tab20b", "tab20c"]
    palette = [colour for name in maps for colour in colormaps[name].colors]
    return {name: palette[i % len(palette)] for i, name in enumerate(names)}


def save(fig, path: str | Path, **kwargs) -> Path:
    """`plain(fig)`, then save it atomically (posjax.fileio.save_figure)."""
    plain(fig)
    return fileio.save_figure(fig, path, **kwargs)


# Characters per line of a legend entry: a long one (a JSON --rope_scaling block) wraps
# rather than pushing the plot off its figure.
LEGEND_WIDTH = 40


def legend(target, handles: list, labels: list[str], **kwargs):
    """`target.legend` (an Axes' or a Figure's) with each label wrapped to LEGEND_WIDTH."""
    return target.legend(handles, [textwrap.fill(label, LEGEND_WIDTH) for label in labels],
                         **kwargs)


def training_lengths(ax, results: list[dict], colour_of: dict, key: str = "label") -> str:
    """A dashed vertical line at each training length (`train_len`) of `results`. Where
    their runs trained at different lengths, each line is drawn in the colour (`colour_of`,
    by result[key]) of the one run that trained there, grey where several did, and is named
    at its end. Returns what the axis label says of the lines."""
    lengths: dict[int, list[str]] = {}
    for result in results:
        names = lengths.setdefault(result["train_len"], [])
        if result[key] not in names:
            names.append(result[key])
    for length, names in sorted(lengths.items()):
        alone = len(names) == 1 and len(lengths) > 1
        ax.axvline(length, color=colour_of[names[0]] if alone else "grey", ls="--", lw=1)
        if len(lengths) > 1:
            said = ", ".join(names) if len(names) <= 2 else f"{len(names)} runs"
            ax.text(length, 0.98, f" {said}", transform=ax.get_xaxis_transform(), rotation=90,
                    va="top", ha="right", fontsize=7, color="dimgrey")
    return ("dashed: each run's training length" if len(lengths) > 1
            else "dashed: training length")


def _spaced(lengths: list[int], inches_per_octave: float, char_inches: float) -> list[str]:
    """A label for each of the sorted `lengths`, blank where it would touch the one labelled
    before it; the longest length is always labelled (the one before it gives way)."""
    def apart(a: int, b: int) -> bool:
        needed = char_inches * ((len(str(a)) + len(str(b)) + 1) / 2)
        return math.log2(b / a) * inches_per_octave >= needed
    shown = [lengths[0]]
    for length in lengths[1:]:
        if apart(shown[-1], length):
            shown.append(length)
        elif length == lengths[-1] and len(shown) > 1:
            shown[-1] = length
    return [str(n) if n in shown else "" for n in lengths]


def length_axis(ax, lengths) -> None:
    """A log2 x axis with a tick at each evaluated length, labelled as people read numbers
    (128, not 2^7), with no minor ticks; a label too close to the one before it to be read
    (128 beside 129) is left blank, its tick kept."""
    lengths = sorted(set(lengths))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    if not lengths:
        return
    inches = ax.get_position().width * ax.figure.get_figwidth()
    octaves = math.log2(lengths[-1] / lengths[0]) or 1.0
    char = font_manager.FontProperties(size=rcParams["xtick.labelsize"]).get_size_in_points()
    ax.set_xticks(lengths, _spaced(lengths, inches / octaves, 0.6 * char / 72))
