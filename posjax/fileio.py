"""Atomic result files: write to a temporary file beside the target, then rename; the
file gets the mode a plain open() would give it (its own, or 0666 less the umask).

JSON never holds a bare NaN or Infinity (not JSON, and most readers refuse it): a non-finite
float is written as null. A file that does not parse is a one-line ConfigError naming it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import stat
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from posjax.errors import ConfigError

# The names of a run's own results, which `posjax plot` reads from its folder: text and
# task evaluations', then retrieval's.
OWN_RESULTS = EXTRAPOLATION_FILES, RETRIEVAL_FILES = ("extrapolation*.json", "retrieval_*.json")
# The other files a run keeps in its folder, which training and evaluation read back.
RUN_FILES = ("config.json", "stages.json", "metrics.jsonl", "log.txt")


def is_run_file_name(path: str | os.PathLike) -> bool:
    """Whether `path` has the name of a run's own file (RUN_FILES, OWN_RESULTS): in a run's
    folder, writing it would replace what training and evaluation read back."""
    return any(Path(path).match(pattern) for pattern in RUN_FILES + OWN_RESULTS)


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (setting and
    restoring it would race with threads that create files meanwhile)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _file_mode(path: Path) -> int:
    """The mode `open(path, "w")` would leave: the file's own if it exists, else 0666 less
    the umask (mkstemp's file is 0600 whatever the umask)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _atomic(path: str | os.PathLike, write: Callable[[Any], None], mode: str = "w") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise _naming(error, path) from None
    try:
        with os.fdopen(fd, mode) as f:
            os.fchmod(f.fileno(), _file_mode(path))
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename == tmp:
            raise _naming(error, path) from None
        raise
    return path


def _naming(error: OSError, path: Path) -> OSError:
    """`error` naming the file asked for, not the temporary file written beside it (which a
    reader never sees, and which is gone)."""
    return type(error)(error.errno, error.strerror, str(path))


def check_writable(path: str | os.PathLike, flag: str = "--workdir",
                   inside: tuple[str, ...] = (), given: str | os.PathLike | None = None) -> None:
    """A one-line ConfigError now, before any work, if `path` cannot become a directory this
    process writes into: it is a file, a file is in its way, or the nearest existing folder
    is read-only; or one of the folders and files `inside` it that exist is read-only (a
    run's checkpoints/, where orbax's save would fail in a thread and time out after
    minutes). Creates nothing. given: the flag's value as typed, where `path` is derived
    from it (the folder of --output=FILE); the messages quote it."""
    path = Path(path)
    flag_text = f"{flag}={given if given is not None else path}"
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:  # bytes the locale's encoding could not decode: orbax fails
        raise ConfigError(f"{flag}={ascii(str(given if given is not None else path))} has "
                          f"characters this process's encoding ({sys.getfilesystemencoding()}) "
                          "cannot read, which checkpoints cannot be written under: run with "
                          "PYTHONUTF8=1 (or a UTF-8 locale), or give an ASCII path") from None
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = ("is a file" if existing == path and given is None
                else f"is under the file {existing}")
        raise ConfigError(f"{flag_text} {what}, not a directory: choose another {flag}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag_text}: {existing} is not writable: choose a writable "
                          f"{flag} or change its permissions")
    for inner in inside:
        if (path / inner).exists() and not os.access(
                path / inner, os.W_OK | (os.X_OK if (path / inner).is_dir() else 0)):
            raise ConfigError(f"{flag_text}: {path / inner} is not writable: change its "
                              f"permissions (chmod -R u+w {path / inner}), then re-run")


def summary_writer(logdir: str | os.PathLike, suffix: str | None = None, **kwargs):
    """A tensorboardX SummaryWriter whose event file no other writer can share.

    tensorboardX names event files by the second and the host only, and opens them with
    "wb": a second writer on the same folder in the same second (a resumed run's, then its
    hparams' at the finish; an extrapolation just after training) would empty the first's
    file. A random suffix (default; or `suffix`, which the caller makes unique) keeps every
    writer's events, and the file's name ends with it.
    """
    suffix = suffix or event_file_suffix()
    return _tensorboardx_writer()(str(logdir), filename_suffix=suffix, **kwargs)


@functools.cache
def _tensorboardx_writer():
    """tensorboardX's SummaryWriter, imported without torch where torch is installed but not
    loaded: tensorboardX.writer imports it only to accept torch tensors, which posjax never
    writes, and loading torch takes seconds of every posjax process that logs (each run of a
    sweep). Where torch is loaded already, or tensorboardX is, nothing changes.

    Its close, where the last write fails (a full disk: OSError), raises that error once:
    the writer's events are dropped and its thread stopped, where tensorboardX's exit hook
    would write them again and print two tracebacks after the command's one line. A write
    that fails in the writer's thread is raised by close too (`_quiet_worker`)."""
    if "torch" not in sys.modules and "tensorboardX" not in sys.modules:
        sys.modules["torch"] = None  # `import torch` raises ImportError meanwhile
        try:
            import tensorboardX  # noqa: F401
        finally:
            del sys.modules["torch"]
    from tensorboardX import SummaryWriter, event_file_writer

    event_file_writer._EventLoggerThread = _quiet_worker(event_file_writer._EventLoggerThread)

    class Writer(SummaryWriter):
        def close(self):
            workers = [w.event_writer._worker for w in (self.all_writers or {}).values()]
            try:
                super().close()
                failed = [w.error for w in workers if w.error]
                if failed:
                    raise failed[0]
            except OSError:
                for file_writer in (self.all_writers or {}).values():
                    events = file_writer.event_writer
                    with contextlib.suppress(Exception):
                        events._worker.stop()
                    with contextlib.suppress(OSError):  # the file is closed, its data lost
                        events._ev_writer._py_recordio_writer.close()
                    events._closed = True
                self.file_writer = self.all_writers = None
                raise

    return Writer


def _quiet_worker(base: type) -> type:
    """tensorboardX's writer thread, keeping a failed write's OSError (a full disk) for the
    writer's close to raise, where the thread printed a traceback and died: the events added
    after it then filled its queue, and the next one waited forever for room."""

    class Worker(base):
        error: OSError | None = None

        def run(self):
            try:
                super().run()
            except OSError as error:
                self.error = error
                # Dropped, as the failed file cannot take them, until close's stop signal
                # (a plain object, a copy of it through the queue: told by its type).
                stop = type(self._shutdown_signal)
                while type(self._queue.get()) is not stop:
                    pass

    return Worker


def event_file_suffix() -> str:
    """A random ending for one writer's TensorBoard event file (`summary_writer`)."""
    return f".{uuid.uuid4().hex[:12]}"


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` atomically."""
    return _atomic(path, lambda f: f.write(text))


def copy(src: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Copy the file `src` to `dest` atomically."""
    data = Path(src).read_bytes()
    return _atomic(dest, lambda f: f.write(data), mode="wb")


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write `obj` as indented JSON to `path` atomically."""
    return write_text(path, dumps(obj, indent=2) + "\n")


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> Path:
    """Rewrite a JSON-lines file atomically (used to drop rows a resumed run will redo)."""
    return write_text(path, "".join(dumps(r) + "\n" for r in rows))


def dumps(obj: Any, **kwargs) -> str:
    """`obj` as strict JSON: arrays as lists, non-finite floats as null."""
    return json.dumps(_finite(obj), default=_jsonable, allow_nan=False, **kwargs)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if hasattr(obj, "tolist") or hasattr(obj, "to_dict"):
        return _finite(_jsonable(obj))
    return obj


def save_figure(fig, path: str | os.PathLike, **kwargs) -> Path:
    """Save a matplotlib figure atomically (PNG unless the suffix says otherwise)."""
    path = Path(path)
    return _atomic(path, lambda f: fig.savefig(f, format=path.suffix.lstrip(".") or "png",
                                              **kwargs), mode="wb")


def read_json(path: str | os.PathLike, default: Any = None,
              remedy: str = "delete it and re-run the command that wrote it") -> Any:
    """The JSON in `path`, or `default` when the file does not exist; a damaged file is a
    one-line ConfigError saying to restore it from a copy, or (`remedy`) what else to do."""
    path = Path(path)
    if not path.exists():
        return default
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"{path} is not valid JSON ({json_problem(e)}): it was damaged; restore it from a "
            f"copy (git checkout, a backup), or {remedy}") from None


def read_stages(path: str | os.PathLike, default: Any = None) -> Any:
    """A run's stages.json (`read_json`): a damaged one says to restore it or train again,
    since no command writes the records of a run's ended stages again (deleting it loses
    them, and the run's re-run refuses to finish without them)."""
    return read_json(path, default, remedy=(
        "train the run again in a new --workdir: the records of its ended stages are not "
        "written again"))


def read_sweep_json(path: str | os.PathLike, keys: tuple[str, ...] = ("runs",)) -> dict | None:
    """A sweep's sweep.json at `path` (None when there is none); a one-line ConfigError where
    it lacks `keys` or its "runs" are not entries by name (edited by hand: `{}`, `[]`). A
    study's collected copy (`keys` "runs" alone) may list the runs' names instead."""
    data = read_json(path)
    if data is None:
        return None
    runs = data.get("runs") if isinstance(data, dict) else None
    names = keys == ("runs",) and isinstance(runs, list) and all(
        isinstance(name, str) for name in runs)
    if any(key not in data for key in keys) or not names and not (
            isinstance(runs, dict) and all(_sweep_entry(entry) for entry in runs.values())):
        raise ConfigError(
            f"{path} is not a sweep's record (it holds {', '.join(keys)}, the runs by name): "
            "restore it from a copy (git checkout, a backup), or delete it and re-run the "
            "sweep's command (its runs' folders show which finished)")
    return data


def _sweep_entry(entry) -> bool:
    """Whether `entry` reads as a run's entry in a sweep.json: a dict, its status text and
    its summary a dict, where given."""
    return isinstance(entry, dict) and isinstance(entry.get("status", ""), str) and isinstance(
        entry.get("summary", {}), (dict, type(None)))


def json_problem(error: json.JSONDecodeError | UnicodeDecodeError) -> str:
    """Where a file failed to read as JSON, for a one-line refusal."""
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg}: line {error.lineno}"
    return f"not UTF-8 text at byte {error.start}"


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Rows of a JSON-lines file ([] when missing); a torn last line (a stopped write) is
    dropped. A damaged line before the last is a ConfigError: a writer that rewrites the
    file from these rows would lose every row after it."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not JSON lines (not UTF-8 text at byte {e.start}): it "
                          "was damaged; restore the file from a copy, or delete it") from None
    rows = []
    for number, line in enumerate(lines, 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if number == len(lines):
                break
            raise ConfigError(
                f"{path}: line {number} of {len(lines)} is not valid JSON ({e.msg}): it was "
                "damaged, not torn by a stopped write; restore the file from a copy, or mend "
                "or delete that line") from None
    return rows


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
