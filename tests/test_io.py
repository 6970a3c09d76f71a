"""Result files: strict JSON (no bare NaN), one-line errors for damaged files."""

from __future__ import annotations

import errno
import json

import numpy as np
import pytest

from posjax import fileio
from posjax.errors import OS_ERROR_HINTS, ConfigError, os_error_line


def test_json_never_holds_a_bare_nan_or_infinity(tmp_path):
    path = fileio.write_json(tmp_path / "r.json", {
        "loss": float("nan"), "ppl": np.float32("inf"), "rows": [1.5, np.nan, -np.inf],
        "array": np.array([0.25, np.nan]),
    })
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    strict = json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name}"))
    assert strict == {"loss": None, "ppl": None, "rows": [1.5, None, None], "array": [0.25, None]}
    fileio.write_jsonl(tmp_path / "m.jsonl", [{"loss": float("nan")}])
    assert (tmp_path / "m.jsonl").read_text() == '{"loss": null}\n'


def test_a_damaged_json_file_is_one_line_naming_it(tmp_path):
    path = tmp_path / "stages.json"
    path.write_text('{"stages": [{"stage": 1, "final_lo')
    with pytest.raises(ConfigError) as error:
        fileio.read_json(path)
    message = str(error.value)
    assert len(message.splitlines()) == 1
    assert str(path) in message and "not valid JSON" in message


def test_binary_garbage_in_a_json_file_is_the_same_one_line(tmp_path):
    """Random bytes over stages.json were a UnicodeDecodeError traceback in every command."""
    for name, read in (("stages.json", fileio.read_json), ("metrics.jsonl", fileio.read_jsonl)):
        path = tmp_path / name
        path.write_bytes(b'{"step": 1}\n\xf2\x80\xff garbage')
        with pytest.raises(ConfigError) as error:
            read(path)
        assert str(error.value).startswith(f"{path} is not ") and (
            "(not UTF-8 text at byte 12): it was damaged; restore " in str(error.value))


def test_a_torn_last_line_of_a_jsonl_file_is_dropped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    assert fileio.read_jsonl(path) == [{"step": 1}, {"step": 2}]


def test_a_damaged_line_before_the_last_of_a_jsonl_file_is_one_line_naming_it(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n')
    with pytest.raises(ConfigError, match=f"^{path}: line 2 of 3 is not valid JSON .*: it was "
                       "damaged, not torn by a stopped write; restore the file from a copy, "
                       "or mend or delete that line$"):
        fileio.read_jsonl(path)


# A process with a stand-in torch installed (it marks each import) writes TensorBoard scalars.
WRITES_SCALARS = """
import sys
from pathlib import Path
from posjax import fileio
with fileio.summary_writer(Path(sys.argv[1]) / "tb") as writer:
    writer.add_scalar("loss", 1.5, 1)
print("torch loaded:", "torch" in sys.modules)
import torch  # a later import of the user's own still works
print("torch loaded after:", "torch" in sys.modules)
"""


def test_tensorboard_logging_does_not_load_torch(tmp_path):
    """tensorboardX imports torch (seconds) where it is installed; posjax's writer does not
    need it, so a run that logs never loads it itself."""
    import subprocess
    import sys

    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "from pathlib import Path\n"
        f"Path({str(tmp_path / 'imported')!r}).write_text('yes')\n")
    env = {"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", WRITES_SCALARS, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["torch loaded: False", "torch loaded after: True"]
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert (tmp_path / "imported").read_text() == "yes"  # the stand-in, loaded once, after


# A script's start: the event file on a disk with no room left (FullDisk, wrapping the
# file tensorboardX writes to), where every flush fails, as write(2) does.
FULL_DISK = """
import errno, os, sys, time
from pathlib import Path
from posjax import fileio


class FullDisk:
    def __init__(self, file):
        self.file = file

    def write(self, data):
        return len(data)

    def flush(self):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def close(self):
        self.file.close()
        self.flush()

"""

FILLS_THE_DISK = FULL_DISK + """
writer = fileio.summary_writer(Path(sys.argv[1]))
writer.add_scalar("loss", 1.5, 1)
records = writer.file_writer.event_writer._ev_writer._py_recordio_writer
records._writer = FullDisk(records._writer)
try:
    writer.close()
except OSError as e:
    print("posjax train: error:", e, file=sys.stderr)
writer.close()  # closed: nothing again
"""


def test_a_tensorboard_writer_on_a_full_disk_fails_once_with_no_traceback_at_exit(tmp_path):
    """A run stopped by a full disk printed its one line, then two tracebacks at exit:
    tensorboardX's exit hook flushed the failed writer again and its thread read a closed
    queue."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FILLS_THE_DISK, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.splitlines() == [
        "posjax train: error: [Errno 28] No space left on device"]



FILLS_THE_DISK_IN_ITS_THREAD = FULL_DISK + """
writer = fileio.summary_writer(Path(sys.argv[1]), flush_secs=0.01)
worker = writer._get_file_writer().event_writer._worker
records = writer.file_writer.event_writer._ev_writer._py_recordio_writer
records._writer = FullDisk(records._writer)
writer.add_scalar("loss", 1.5, 1)
while worker.is_alive() and getattr(worker, "error", None) is None:  # its flush fails
    time.sleep(0.01)
for step in range(50):  # more than its queue holds (10)
    writer.add_scalar("loss", 1.5, step)
try:
    writer.close()
except OSError as e:
    print("posjax train: error:", e, file=sys.stderr)
"""


def test_a_write_that_fails_in_the_writers_thread_is_one_line_at_close_and_never_hangs(
        tmp_path):
    """A full disk met by tensorboardX's thread (its flush every flush_secs) printed a
    traceback from the thread, which died: its queue then filled, and the next scalar
    waited forever. CI caught the traceback when the thread's first flush came after the
    test above made the disk full."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FILLS_THE_DISK_IN_ITS_THREAD, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.splitlines() == [
        "posjax train: error: [Errno 28] No space left on device"]


def test_a_write_that_fails_names_the_file_asked_for_not_its_temporary_file(tmp_path,
                                                                           monkeypatch):
    """`--output=/proc/x.json` said `No such file or directory (/proc/.x.json.k2j1.tmp)`: a
    file the user never named, and which no longer exists."""
    def refused(dir, prefix, suffix):
        raise PermissionError(errno.EACCES, "Permission denied", f"{dir}/{prefix}k2j1{suffix}")

    with monkeypatch.context() as patch:
        patch.setattr(fileio.tempfile, "mkstemp", refused)
        with pytest.raises(PermissionError) as error:
            fileio.write_json(tmp_path / "x.json", {})
    assert os_error_line(error.value) == (
        f"Permission denied ({tmp_path / 'x.json'}): {OS_ERROR_HINTS[errno.EACCES]}")

    (tmp_path / "folder.json").mkdir()  # the rename over it fails
    with pytest.raises(IsADirectoryError) as error:
        fileio.write_json(tmp_path / "folder.json", {})
    assert (error.value.filename, error.value.filename2) == (str(tmp_path / "folder.json"), None)
    assert [p.name for p in tmp_path.iterdir()] == ["folder.json"]  # no temporary file left
