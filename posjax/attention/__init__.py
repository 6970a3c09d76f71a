"""Attention kernels with one signature, and the dispatcher the models call (dispatch.py:
which kernel carries which encoding site, `auto`, the refusals by name)."""

from posjax.attention.dispatch import (
    IMPLS,
    INTERPRETED,
    Kernel,
    auto_impl,
    check_compatible,
    encodings_carried_by,
    interpreted_here,
    multi_head_attention,
    one_row,
    register,
    whole_rows,
)
from posjax.attention.softmax import capped
from posjax.registry import import_package_modules

import_package_modules(__name__, __path__)  # a kernel module registers itself on import

__all__ = ["IMPLS", "INTERPRETED", "Kernel", "auto_impl", "capped", "check_compatible",
           "encodings_carried_by", "interpreted_here", "multi_head_attention", "one_row",
           "register", "whole_rows"]
