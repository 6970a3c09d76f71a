"""One-line user errors that name the problem and the fix."""

import difflib
import errno
import os
from collections.abc import Iterable
from pathlib import Path


class ConfigError(ValueError):
    """A bad name, key or value in what the user asked for."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest choice (one that differs only in case first),
    or ''."""
    choices = list(choices)
    folded = {choice.lower(): choice for choice in choices if isinstance(choice, str)}
    if isinstance(word, str) and word.lower() in folded:
        return f" (did you mean {folded[word.lower()]!r}?)"
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown(kind: str, word: str, choices: Iterable[str]) -> ConfigError:
    """Error for a name that is not one of `choices`, listing them all."""
    choices = sorted(choices)
    return ConfigError(
        f"unknown {kind} {word!r}{did_you_mean(word, choices)}; valid: {', '.join(choices)}"
    )


def nearest_run_folder(path: str | Path) -> str | None:
    """The folder beside `path` whose name is closest to its name among the run and sweep
    folders there (those holding a config.json or sweep.json; any folder where none does),
    as `path` spells its parent, or that name in the runs/ folder of a sweep there
    (runs/mlm/encoding=rope for runs/mlm/runs/encoding=rope); None when nothing is close."""
    path = Path(path)
    parent = path.parent
    if not parent.is_dir():
        return None
    if (parent / "sweep.json").is_file() and (parent / "runs" / path.name).is_dir():
        return str(parent / "runs" / path.name)
    folders = [p for p in parent.iterdir() if p.is_dir()]
    runs = [p for p in folders if (p / "config.json").is_file() or (p / "sweep.json").is_file()]
    close = difflib.get_close_matches(path.name, [p.name for p in runs or folders], n=1)
    return str(parent / close[0]) if close else None


def missing_folder(path: str | Path, fix: str) -> ConfigError:
    """'PATH does not exist (did you mean NEAREST?): FIX' for a run or sweep folder that is
    not there (`nearest_run_folder`), or 'PATH is a file, not a folder: FIX'."""
    if Path(path).exists():
        return ConfigError(f"{path} is a file, not a folder: {fix}")
    nearest = nearest_run_folder(path)
    hint = f" (did you mean {nearest}?)" if nearest else ""
    return ConfigError(f"{path} does not exist{hint}: {fix}")


def raised(error: BaseException) -> str:
    """'TYPE: the first line of its message', naming a caught exception on one line."""
    what = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {what}" if what else type(error).__name__


def raised_in(error: BaseException) -> str:
    """`raised(error)` and the user's file and line it came from ("RuntimeError: boom, at
    /home/me/lib.py:3"), for an exception from the user's own code: the innermost frame
    outside posjax and the installed packages (the file, or a module it imports), not the
    posjax or library line that raised it (a name registered twice is raised in posjax's
    registry, and the line to fix is the user's); the innermost frame where every frame
    is theirs."""
    frames = _frames(error)
    return raised(error) + _at((_theirs(frames) or frames or [None])[-1])


def in_user_code(error: BaseException) -> str:
    """", at FILE:LINE" of the innermost frame of the user's own code (an encoding of theirs,
    a config file) that `error` passed through, or "" where none did."""
    return _at((_theirs(_frames(error)) or [None])[-1])


def _frames(error: BaseException) -> list:
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    return frames


def _theirs(frames: list) -> list:
    return [f for f in frames if not _library_file(f.tb_frame.f_code.co_filename)]


def _at(tb) -> str:
    return f", at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else ""


_POSJAX = Path(__file__).resolve().parent


def _library_file(filename: str) -> bool:
    """Whether `filename` is posjax's own, an installed package's or the standard library's
    (not a file the user wrote)."""
    path = Path(filename).resolve()
    return (path.is_relative_to(_POSJAX) or "site-packages" in path.parts
            or path.is_relative_to(Path(os.__file__).resolve().parent) or not path.exists())


def module_not_found(where: str, error: ModuleNotFoundError, roots) -> ConfigError:
    """The one line for the user's file `where` whose import of a module failed: where posjax
    looked (`roots`, registry.import_roots) and the three ways to make it found."""
    return ConfigError(
        f"{where}: no module named {error.name!r} among the installed packages or in "
        f"{', '.join(roots)} (where posjax looks for your own modules): move it there, put "
        "its folder on PYTHONPATH, or pip install it")


_NOT_WRITABLE = ("posjax cannot write there: point POSJAX_DATA_DIR (datasets), --workdir "
                 "(runs) or --output (plots and results) at a writable folder, then re-run the "
                 "command")
_NOT_A_FOLDER = ("a file is where posjax writes a folder: give a folder's path (or move that "
                 "file), then re-run the command")
_UNREACHABLE = ("cannot reach it: check the address and that it is up and reachable from "
                "this machine, then re-run the same command")
# The fix for an OSError, by errno; a ConnectionError without one of these gets _UNREACHABLE.
OS_ERROR_HINTS = {
    errno.ENOSPC: "free space on that disk, then re-run the same command to resume",
    errno.EDQUOT: "your disk quota there is used up: free some of it or point --workdir / "
                  "POSJAX_DATA_DIR at a disk with room, then re-run the same command to resume",
    errno.EFBIG: "a limit on a file's size stops the write (`ulimit -f`, or the file "
                 "system's largest file): raise it or point --workdir / --output at another "
                 "disk, then re-run the same command to resume",
    errno.EROFS: _NOT_WRITABLE,
    errno.EACCES: _NOT_WRITABLE,
    errno.EPERM: _NOT_WRITABLE,
    errno.EEXIST: _NOT_A_FOLDER,
    errno.ENOTDIR: _NOT_A_FOLDER,
    errno.EISDIR: "a folder is where posjax writes a file: give a file's path (--output=FILE "
                  "names the file itself), then re-run the command",
    errno.ENOENT: "it is missing: create it or fix the path (was it moved or unmounted?), "
                  "then re-run the same command",
    errno.EHOSTUNREACH: _UNREACHABLE,
    errno.ENETUNREACH: _UNREACHABLE,
    errno.ETIMEDOUT: _UNREACHABLE,
}


def os_error_line(error: OSError) -> str:
    """'WHAT (WHERE): FIX' for an OSError, on one line; an errno without a known fix gives
    'WHAT (WHERE)'."""
    what = (error.strerror or str(error) or type(error).__name__).splitlines()[0]
    paths = [str(p) for p in (error.filename, error.filename2) if p]
    where = f" ({' -> '.join(paths)})" if paths else ""
    hint = OS_ERROR_HINTS.get(error.errno) or (
        _UNREACHABLE if isinstance(error, ConnectionError) else "")
    return f"{what}{where}: {hint}" if hint else f"{what}{where}"
