"""Where a run's numbers came from, recorded in its config.json under "provenance": the
code (git commit, uncommitted changes), the libraries and the devices."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path

import jax

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
