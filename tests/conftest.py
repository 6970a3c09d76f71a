"""Fixtures shared by the end-to-end test files."""

from __future__ import annotations

import pytest

from posjax import data

MAX_TEXT_BYTES = 200_000


@pytest.fixture(scope="session")
def data_flags(tmp_path_factory) -> list[str]:
    """Overrides that point a run at a 200 kB stdlib corpus, built once per session."""
    root = tmp_path_factory.getbasetemp() / "posjax_data"
    cfg = data.default_data_config("stdlib_text")
    cfg.update(data_dir=str(root), max_text_bytes=MAX_TEXT_BYTES)
    data.prepare(cfg)
    return [f"--config.data.data_dir={root}", f"--config.data.max_text_bytes={MAX_TEXT_BYTES}"]
