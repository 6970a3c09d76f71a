"""MXFP4 weights (the OCP Microscaling format's FP4 with an 8-bit shared exponent), as GPT-OSS's
snapshots store their experts: dequantized to bfloat16 at load.

    dequantize(blocks uint8[..., R, G, 16], scales uint8[..., R, G]) -> bfloat16[..., G * 32, R]

Each byte of `blocks` holds two FP4 (E2M1) codes, the low nibble first; each group of 32 values
along a row shares the exponent scales - 127: value = FP4[code] * 2^(scale - 127). The rows R
are the output features and the 32 G values of a row its inputs (a torch Linear's [out, in]
per expert), so the result is transposed to [..., in, out], the layout of a bfloat16
snapshot's `gate_up_proj` and `down_proj` (transformers' convert_moe_packed_tensors).
bfloat16 holds every such value exactly (two significant bits, float32's exponents), in half
float32's memory: gpt-oss-20b's experts take 38 GB.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from posjax.errors import ConfigError

# The 16 FP4 (E2M1) values by code: sign bit, 2 exponent bits, 1 mantissa bit.
FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32)
SCALE_BIAS = 127


def dequantize(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The weights [..., in, out], bfloat16, of MXFP4 `blocks` [..., out, G, 16] and `scales`
    [..., out, G] (module docstring)."""
    if blocks.shape[:-1] != scales.shape or blocks.ndim < 3:
        raise ConfigError(f"MXFP4 blocks {blocks.shape} and scales {scales.shape} do not pair "
                          "(blocks [..., rows, groups, 16] bytes, scales [..., rows, groups]): "
                          "the snapshot is damaged, download it again")
    values = np.empty((*blocks.shape[:-1], 2 * blocks.shape[-1]), np.float32)
    values[..., 0::2] = FP4[blocks & 0x0F]
    values[..., 1::2] = FP4[blocks >> 4]
    values *= np.exp2(scales.astype(np.int32) - SCALE_BIAS)[..., None].astype(np.float32)
    values = values.astype(ml_dtypes.bfloat16)
    return np.swapaxes(values.reshape(*blocks.shape[:-2], -1), -1, -2)
