"""Where a run's numbers came from, recorded in its config.json under "provenance": the
code (git commit, uncommitted changes), the libraries and the devices; and what a result
file was measured on, in words for its tables and pictures."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

PACKAGES = ("posjax", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "grain")


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=Path(__file__).resolve().parent,
                              capture_output=True, text=True, check=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):  # no git, or not a checkout
        return None


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def code_version() -> dict:
    """{git_commit, git_dirty} of posjax's checkout (tracked files changed since the
    commit: dirty); both None outside a git checkout."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def provenance() -> dict:
    """{git_commit, git_dirty, versions, python, platform, device_kind, device_count,
    process_count}; git fields are None outside a git checkout."""
    import jax  # here, so that reading a result's provenance (data_line) loads no jax

    devices = jax.devices()
    return {
        **code_version(),
        "versions": {package: _version(package) for package in PACKAGES},
        "python": platform.python_version(),
        "platform": devices[0].platform,
        "device_kind": devices[0].device_kind,
        "device_count": jax.device_count(),
        "process_count": jax.process_count(),
    }


def data_line(result: dict) -> str | None:
    """What a result was measured on ("scored on local_text, the files matching GLOB, first N
    tokens, bytes tokenizer"); None for a result written before its data was recorded."""
    data = result.get("data")
    if not data:
        return None
    parts = [data["dataset"]]
    split = f"{data['split']} split" if data.get("split") else ""
    if data.get("text_glob"):
        files = f"the files matching {data['text_glob']}"
        if data.get("fingerprint"):  # their names, sizes and times (an edit changes it)
            files += f" (fingerprint {data['fingerprint']})"
        parts.append(f"{split + ' of ' if split else ''}{files}")
    elif split:
        parts.append(split)
    if result.get("max_tokens"):
        parts.append(f"first {result['max_tokens']} tokens")
    if data.get("tokenizer"):
        parts.append("the model's own tokenizer" if data["tokenizer"] == "model"
                     else f"{data['tokenizer']} tokenizer")
    return "scored on " + ", ".join(parts)


def allowed_cores() -> int:
    """How many CPU cores this process may run on: its affinity where the platform has one
    (Linux), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
