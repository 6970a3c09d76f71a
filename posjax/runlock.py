"""One process at a time per run (or sweep) directory, and clean interruption.

`RunLock(directory)` holds a POSIX record lock (`fcntl.lockf`, which NFS also honours) on
DIRECTORY/.lock for as long as a process trains, evaluates or sweeps it. The kernel drops the
lock when its holder dies, however it dies, so the lock of a dead process is simply taken;
the file's text names the holder for the one-line error a second process gets.

`exclusive(path)` is the blocking kind, for work several processes may start at once and that
must happen once (a sweep's parallel runs building the same dataset): the others wait for it.

`interruptible()` turns SIGTERM and SIGHUP (a closed terminal or SSH session) into the same
KeyboardInterrupt as Ctrl-C and ignores any later signal, so the interrupted work's cleanup
(waiting for an in-flight checkpoint) is not itself cut short; `check_stop()`, called once
per training step and evaluation batch, raises it again should Python have dropped the first
one; within `deferred()` (a checkpoint being handed to orbax) a signal waits for the block to
end; within `noted_until_checked()` (a training loop) it is raised by the next check_stop(),
so a step and its files are never cut in half; within `nothing_to_save()` (a run's first
step) a signal ends the process at once.
`stop_while_starting()` ends a command stopped while it loads, in one line.
`die_with_parent()` makes a sweep's child stop when its sweep dies, even by SIGKILL.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
import threading
import time
from pathlib import Path

import tqdm

from posjax.errors import ConfigError

# What a sweep sets in its children's environment: the sweep's PID.
PARENT_ENV = "POSJAX_SWEEP_PID"
INTERRUPTED = 130  # the shell's exit code for SIGINT
# The signals that stop a command as Ctrl-C does (SIGHUP's default, a silent exit 129, would
# leave no word of what happened nor how to resume).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def exclusive(path: str | Path):
    """Hold an exclusive lock on the file `path` for the block, waiting while another process
    holds it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock_file:
        fcntl.lockf(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(lock_file, fcntl.LOCK_UN)


class RunLock:
    """An exclusive lock on `directory`, held between `acquire()` and `release()`; process
    I > 0 of a multi-process run holds its own, DIRECTORY/.lock-process-I, so each process
    of the run is refused a second time, and the run as a whole too."""

    def __init__(self, directory: str | Path, what: str = "run", process: int = 0,
                 reading: bool = False):
        self.path = Path(directory) / (f".lock-process-{process}" if process else ".lock")
        self.what = what
        self.reading = reading
        self._file = None

    def acquire(self) -> RunLock:
        """Take the lock, or raise a one-line ConfigError naming the process that holds it.
        A `reading` holder (an evaluation writing its result elsewhere) of a directory this
        process cannot write (a read-only copy or mount) takes none: nothing here can change
        that run."""
        if self.reading and self.path.parent.is_dir() and not os.access(self.path.parent,
                                                                         os.W_OK):
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_file = open(self.path, "a+")  # noqa: SIM115 (held open while locked)
        try:
            fcntl.lockf(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock_file.seek(0)
            holder = lock_file.read().strip() or "another process"
            lock_file.close()
            raise ConfigError(
                f"{self.path.parent} is in use by {holder}: wait for it to finish, or stop it "
                "and re-run this command"
            ) from None
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(f"PID {os.getpid()} ({' '.join(Path(a).name for a in sys.argv[:2])})")
        lock_file.flush()
        self._file = lock_file
        return self

    def holder(self) -> str:
        """Who holds the lock, as its file says ("PID 123 (python posjax)")."""
        try:
            return self.path.read_text().strip() or "another process"
        except OSError:
            return "another process"

    def held(self) -> bool:
        """Whether a process (another one: POSIX locks are per process) holds the lock now."""
        if not self.path.is_file():
            return False
        with open(self.path, "a+") as lock_file:
            try:
                fcntl.lockf(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.lockf(lock_file, fcntl.LOCK_UN)
            return False

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the lock
            self._file = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class Interrupted(KeyboardInterrupt):
    """A stop signal's KeyboardInterrupt, raised again with the line the command prints
    (what was kept and what its re-run does) in place of its generic one."""


class _Flag:
    """A flag that signal handlers set and read, taking no lock: threading.Event's set() and
    clear() take one, and a handler that runs while another handler (or the main thread)
    holds it, between two of their bytecodes, waits on it forever."""

    def __init__(self):
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True

    def clear(self) -> None:
        self._set = False


# Set by the first stop signal inside interruptible(), cleared when it is left.
_STOP = _Flag()
# interruptible()'s line for a stop and the command that prints it (None outside it), and
# whether a stop may end the process at once (inside nothing_to_save()).
_STOPPED_LINE: list[str | None] = [None, None]
_AT_ONCE = _Flag()
# How many interruptible() blocks are open: two where a sweep runs a command in its own
# process (--executor=inprocess).
_DEPTH = [0]
# The line a stop prints once the innermost interruptible()'s command has written its
# result (`written`), in place of the command's own.
_WRITTEN_LINE: list[str | None] = [None]
_EXITING = threading.Lock()
# The first stop signal the innermost interruptible() took: its exit code is 128 + it.
_STOP_SIGNAL: list[int] = []
# Whether the first stop signal raises KeyboardInterrupt where the main thread is (False
# within noted_until_checked(): check_stop() raises it).
_RAISE_AT_ONCE = [True]


def _mid_line() -> bool:
    """Whether stderr may be mid-line, a progress bar drawing its line there: stderr is a
    terminal, or a bar is open (tqdm draws into a file or pipe too, with no newline until
    it closes)."""
    try:
        return sys.stderr.isatty() or bool(getattr(tqdm.tqdm, "_instances", ()))
    except (AttributeError, ValueError):  # replaced, or closed
        return False


def close_bars() -> None:
    """Close the progress bars an error left open (its traceback holds them), so the line
    that reports it starts a line of its own, not glued to a bar's."""
    for bar in list(getattr(tqdm.tqdm, "_instances", ())):
        with contextlib.suppress(Exception):  # a bar whose stream is gone
            bar.close()


def _exit_at_once() -> None:
    """Print the stop line and end the process; return at once where another caller is
    ending it already: the signal watcher thread, or this thread's own handler, which a
    second signal interrupted inside its print (waiting on the lock there never ended)."""
    if not _EXITING.acquire(blocking=False):
        return
    try:  # on a terminal a new line first: the progress bar's line ends without one
        for undo in list(_UNDO):
            with contextlib.suppress(OSError):
                undo()
        newline = "\n" if _mid_line() else ""
        print(f"{newline}{_STOPPED_LINE[0]}", file=sys.stderr, flush=True)
    finally:  # a closed stderr (its reader gone) must not keep the process alive
        os._exit(stopped_code())


# What `undone_unless_finished` blocks in progress undo if the process ends at once.
_UNDO: list = []


@contextlib.contextmanager
def undone_unless_finished(undo):
    """Within: `undo()` runs where the block ends in an exception or in a stop that ends the
    process at once (nothing_to_save), e.g. to remove a folder the command made for a result
    it never wrote."""
    _UNDO.append(undo)
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            undo()
        raise
    finally:
        _UNDO.remove(undo)


def stopped_code() -> int:
    """The exit code of a command a stop signal ended: 128 + the signal, as the shell reports
    a process that signal killed (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), so a scheduler tells
    a preemption from a Ctrl-C; INTERRUPTED where no signal was taken (a KeyboardInterrupt
    raised by the caller's own code)."""
    return 128 + _STOP_SIGNAL[0] if _STOP_SIGNAL else INTERRUPTED


def _note_signal(signum: int) -> None:
    if not _STOP_SIGNAL:
        _STOP_SIGNAL.append(signum)


def _stop(signum, frame):
    _note_signal(signum)
    if _AT_ONCE.is_set():
        _exit_at_once()
        return  # the process is ending: raising here would cut the line being printed
    if _STOP.is_set():  # a stop is under way: its cleanup is not cut short again
        return
    _STOP.set()
    if _RAISE_AT_ONCE[0]:
        raise KeyboardInterrupt


def stop_while_starting(command: str, program: str = "posjax") -> None:
    """Until the command takes its own stops (`interruptible`), a stop signal ends the
    process at once in one line that starts "PROGRAM COMMAND:" (a script passes its name as
    `program` and no command): nothing is written while the command line loads (seconds of
    imports), where Python would print a traceback (Ctrl-C) or nothing (SIGTERM)."""
    line = " ".join(filter(None, (program, command)))
    line += ": interrupted while starting, before any work: re-run the command"

    stopping: list[int] = []

    def stop(signum, frame):
        if stopping:  # a later signal, landing inside the first one's print
            return
        stopping.append(signum)
        try:
            print(line, file=sys.stderr, flush=True)
        finally:
            os._exit(128 + signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)


def check_stop() -> None:
    """Raise KeyboardInterrupt if a signal has asked to stop. The trainer calls it once per
    step and every evaluation once per batch: Python drops an exception raised in a gc
    callback or a finaliser (JAX's gc callback took a sweep child's SIGTERM that way, and the
    child trained on as an orphan), so the handler's own KeyboardInterrupt can be lost."""
    if _STOP.is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def interruptible(stopped_line: str | None = None, command: str | None = None,
                  then_ignored: bool = False):
    """Within: the first of STOP_SIGNALS raises KeyboardInterrupt (and check_stop() raises
    it again until the block is left), later ones are ignored; inside nothing_to_save() it
    prints `stopped_line` (or that block's own words after `command`'s name, "posjax
    train: ...") and ends the process. After it, the handlers from before it are back, or
    with `then_ignored` (a command line's process, which then prints its line and ends) the
    signals are ignored: a second Ctrl-C there ran the start-up's handler, which printed
    "interrupted while starting, before any work" for a run that had trained and saved.
    A no-op off the main thread (only it can take signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _STOP.clear()
    _STOP_SIGNAL.clear()
    outer = list(_STOPPED_LINE)  # a sweep's, around the command it runs in this process
    outer_written = _WRITTEN_LINE[0]
    _STOPPED_LINE[:] = stopped_line, command
    _WRITTEN_LINE[0] = None
    _DEPTH[0] += 1
    previous = {s: signal.signal(s, _stop) for s in STOP_SIGNALS}
    unraisable = sys.unraisablehook

    def quiet_when_stopping(info):
        # The dropped KeyboardInterrupt is raised again by check_stop(): no traceback for it.
        if not (_STOP.is_set() and isinstance(info.exc_value, KeyboardInterrupt)):
            unraisable(info)

    sys.unraisablehook = quiet_when_stopping
    try:
        yield
    except KeyboardInterrupt as stop:
        if _WRITTEN_LINE[0] is None or isinstance(stop, Interrupted):
            raise
        raise Interrupted(_WRITTEN_LINE[0]) from None
    finally:
        sys.unraisablehook = unraisable
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_IGN if then_ignored else handler)
        _STOP.clear()
        _STOPPED_LINE[:] = outer
        _WRITTEN_LINE[0] = outer_written
        _DEPTH[0] -= 1


def written(line: str) -> None:
    """The command has written its result: from now on, within interruptible(), a stop
    raises Interrupted(line) (what was written, and that nothing needs redoing) in place of
    its generic KeyboardInterrupt, wherever the stop lands (the table's print, a picture's
    drawing)."""
    _WRITTEN_LINE[0] = line


@contextlib.contextmanager
def noted_until_checked():
    """Within (inside interruptible()): a stop signal is noted, and the next check_stop()
    raises it, wherever the main thread was. For a loop that checks between units of work
    that must not be cut in half (a training step, its metrics row and its checkpoint): the
    KeyboardInterrupt then comes between two of them. nothing_to_save() still ends the
    process at once."""
    before = _RAISE_AT_ONCE[0]
    _RAISE_AT_ONCE[0] = False
    try:
        yield
    finally:
        _RAISE_AT_ONCE[0] = before


@contextlib.contextmanager
def nothing_to_save(said: str | None = None):
    """Within (a run's first step: compiled, then run, before anything is worth saving),
    inside interruptible(stopped_line, command): a stop signal prints that line (or `said`
    after the command's name) and ends the process at once, exit code stopped_code().
    Raising KeyboardInterrupt would not do: Python runs its handler only when the main thread leaves
    XLA's compiler, and the interpreter's exit waits for the step in flight, minutes for a
    long sequence. A thread of its own wakes on the signal (signal.set_wakeup_fd) while the
    main thread is inside XLA. Not within a sweep's own interruptible() (a command it runs in
    its process): ending the process would leave the sweep's record of the run unwritten,
    so the stop comes when the step returns."""
    if (threading.current_thread() is not threading.main_thread()
            or _STOPPED_LINE[0] is None or _STOP.is_set() or _DEPTH[0] > 1):
        yield
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    left = threading.Event()

    def watch():
        while not left.is_set():
            taken = [s for s in os.read(read_end, 64) if s in STOP_SIGNALS]
            if taken and not left.is_set():
                _note_signal(taken[0])
                _exit_at_once()

    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    watcher = threading.Thread(target=watch, name="posjax-stop-at-once", daemon=True)
    watcher.start()
    own_line = _STOPPED_LINE[0]
    if said and _STOPPED_LINE[1]:
        _STOPPED_LINE[0] = f"{_STOPPED_LINE[1]}: {said}"
    _AT_ONCE.set()
    try:
        yield
    finally:
        _AT_ONCE.clear()
        _STOPPED_LINE[0] = own_line
        signal.set_wakeup_fd(previous)
        left.set()
        os.write(write_end, b"\0")  # wakes the watcher, which then returns
        watcher.join()
        os.close(read_end)
        os.close(write_end)


@contextlib.contextmanager
def deferred():
    """Within: STOP_SIGNALS wait until the block ends, then act as they would have.
    For work that an exception must not cut in half (orbax's save and close bookkeeping)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: received.append(signum))
                for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if received:
            signal.raise_signal(received[0])


def die_with_parent() -> None:
    """In a sweep's child (PARENT_ENV set): get SIGTERM when the sweep dies.

    Linux delivers it through prctl(PR_SET_PDEATHSIG); elsewhere a daemon thread watches the
    parent PID. Either way the child then stops as on Ctrl-C, saving nothing half-done.
    """
    parent = os.environ.get(PARENT_ENV)
    if not parent:
        return
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    else:
        def watch():
            while os.getppid() == int(parent):
                time.sleep(1.0)
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != int(parent):  # the sweep died before the watch began
        os.kill(os.getpid(), signal.SIGTERM)
