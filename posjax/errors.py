"""One-line user errors that name the problem and the fix."""

import difflib
from collections.abc import Iterable


class ConfigError(ValueError):
    """A bad name, key or value in what the user asked for."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest choice, or ''."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown(kind: str, word: str, choices: Iterable[str]) -> ConfigError:
    """Error for a name that is not one of `choices`, listing them all."""
    choices = sorted(choices)
    return ConfigError(
        f"unknown {kind} {word!r}{did_you_mean(word, choices)}; valid: {', '.join(choices)}"
    )
