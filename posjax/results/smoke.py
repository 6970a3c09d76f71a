"""What a picture or table of smoke runs (config train.smoke: a config arg's smoke) says on
it: its numbers check the set-up, not a result."""

from __future__ import annotations


def note(results: list[dict]) -> str:
    """The line for labelled `results` (posjax.results.plots), naming the smoke runs where not
    every run is one; "" when none is."""
    runs = [r for r in results if r.get("smoke")]
    if not runs:
        return ""
    which = "" if len(runs) == len(results) else f" ({', '.join(r['label'] for r in runs)})"
    return f"smoke run{which}: checks the set-up, not a result"


def noted(text: str, results: list[dict]) -> str:
    """A Markdown table `text` under its results' note, in bold, when they have one."""
    line = note(results)
    return f"**{line}**\n\n{text}" if line else text


def titled(fig, title: str, results: list[dict]):
    """The figure's title, with its results' note (the title in red) on a line of its own;
    an empty `title` is the note alone (and no title without one: None)."""
    line = note(results)
    if not (title or line):
        return None
    text = fig.suptitle("\n".join(filter(None, (title, line))))
    if line:
        text.set_color("firebrick")
    return text
