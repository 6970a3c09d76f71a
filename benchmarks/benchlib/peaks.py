"""MFU by the field's convention (PaLM, MaxText, torchtitan, llm.c): model FLOPs per step over
step seconds over the device's datasheet dense peak in the dtype its matmuls run in (float32
under JAX's default precision runs on TF32 tensor cores on an NVIDIA GPU, and in one bfloat16
pass on a TPU: `matmul_dtype`); and, as a second figure, the matmul rate this device reaches,
timed as chains of products.

    model FLOPs (MaxText, llm.c)  6 N B L + 12 layers B L^2 (H Dh) / 2  (causal half)
    PaLM's count                  6 N B L + 12 layers B L^2 (H Dh)      (no causal halving)
"""

from __future__ import annotations

import re
import time

import jax
import jax.numpy as jnp

# Dense (without sparsity) peak FLOP/s by device and compute dtype, and where each is given.
PEAKS = {
    # NVIDIA H100 Tensor Core GPU datasheet, SXM column: bf16 989 TFLOP/s dense, fp32 67;
    # TF32 989 with sparsity, so 494.5 dense (the datasheet's sparse figures are twice dense).
    "H100 SXM": {"bfloat16": 989e12, "tfloat32": 494.5e12, "float32": 67e12,
                 "source": "NVIDIA H100 datasheet, SXM, dense"},
    # NVIDIA H200 Tensor Core GPU datasheet, SXM column: as the H100 SXM's.
    "H200": {"bfloat16": 989e12, "tfloat32": 494.5e12, "float32": 67e12,
             "source": "NVIDIA H200 datasheet, dense"},
    # NVIDIA H100 Tensor Core GPU datasheet, PCIe column: bf16 756 TFLOP/s dense; TF32 756
    # with sparsity, 378 dense.
    "H100 PCIe": {"bfloat16": 756e12, "tfloat32": 378e12,
                  "source": "NVIDIA H100 datasheet, PCIe, dense"},
    # NVIDIA A100 Tensor Core GPU datasheet: bf16 312 TFLOP/s dense, TF32 156, fp32 19.5.
    "A100": {"bfloat16": 312e12, "tfloat32": 156e12, "float32": 19.5e12,
             "source": "NVIDIA A100 datasheet, dense"},
    # NVIDIA L40S datasheet: bf16 362 TFLOP/s dense, TF32 183.
    "L40S": {"bfloat16": 362e12, "tfloat32": 183e12, "source": "NVIDIA L40S datasheet, dense"},
    # NVIDIA L4 datasheet: bf16 121 TFLOP/s dense; TF32 120 with sparsity, 60 dense.
    "L4": {"bfloat16": 121e12, "tfloat32": 60e12, "source": "NVIDIA L4 datasheet, dense"},
    # Google Cloud TPU documentation, TPU v4: bf16 275 TFLOP/s per chip.
    "TPU v4": {"bfloat16": 275e12, "source": "Google Cloud TPU docs, v4"},
    # Google Cloud TPU documentation, TPU v5e: bf16 197 TFLOP/s per chip.
    "TPU v5e": {"bfloat16": 197e12, "source": "Google Cloud TPU docs, v5e"},
    # Google Cloud TPU documentation, TPU v5p: bf16 459 TFLOP/s per chip.
    "TPU v5p": {"bfloat16": 459e12, "source": "Google Cloud TPU docs, v5p"},
    # Google Cloud TPU documentation, TPU v6e (Trillium): bf16 918 TFLOP/s per chip.
    "TPU v6e": {"bfloat16": 918e12, "source": "Google Cloud TPU docs, v6e"},
}
# jax.devices()[0].device_kind, lower-cased -> PEAKS key; the first pattern that matches wins.
# "NVIDIA H100 80GB HBM3" is the SXM part; NVL parts have other peaks and are left unknown.
KINDS = {
    r"\bh200\b(?!.*nvl)": "H200",
    r"\bh100\b.*pcie": "H100 PCIe",
    r"\bh100\b(?!.*nvl)": "H100 SXM",
    r"\ba100\b": "A100",
    r"\bl40s\b": "L40S",
    r"\bl4\b": "L4",
    r"^tpu v4$": "TPU v4",
    r"^tpu v5(e| lite)\b": "TPU v5e",
    r"^tpu v5p?$": "TPU v5p",
    r"^tpu v6(e| lite)\b": "TPU v6e",
}


# What float32 matmuls run in on each accelerator at each jax_default_matmul_precision (None:
# the default): TF32 tensor cores on an NVIDIA GPU but at "highest" (XLA keeps TF32 below it),
# one bfloat16 pass on a TPU; a precision missing here (a TPU's three bfloat16 passes) has no
# datasheet peak.
_FLOAT32_RUNS_IN = {
    "gpu": {None: "tfloat32", "default": "tfloat32", "fastest": "tfloat32",
            "tensorfloat32": "tfloat32", "high": "tfloat32", "bfloat16": "bfloat16",
            "highest": "float32", "float32": "float32"},
    "tpu": {None: "bfloat16", "default": "bfloat16", "fastest": "bfloat16",
            "bfloat16": "bfloat16", "highest": "float32", "float32": "float32"},
}


def matmul_dtype(compute_dtype: str, platform: str, precision: str | None) -> str:
    """The dtype whose datasheet peak bounds matmuls of `compute_dtype` on `platform` ("cpu",
    "gpu", "tpu") at JAX's default matmul precision `precision` (jax.config's
    jax_default_matmul_precision; None: the default): float32 runs on TF32 tensor cores on
    an NVIDIA GPU and in one bfloat16 pass on a TPU unless the precision asks for full
    float32 (`_FLOAT32_RUNS_IN`; another precision: "float32 at precision P", which no
    datasheet lists); anything else runs as it is."""
    if compute_dtype != "float32" or platform not in _FLOAT32_RUNS_IN:
        return compute_dtype
    return _FLOAT32_RUNS_IN[platform].get(precision, f"float32 at precision {precision}")


def datasheet_peak(device_kind: str, dtype: str) -> tuple[float | None, str]:
    """(dense FLOP/s, its source) of `device_kind` in `dtype`, or (None, why there is none):
    MFU's denominator, so that figures compare across codebases and machines."""
    kind = device_kind.strip().lower()
    key = next((key for pattern, key in KINDS.items() if re.search(pattern, kind)), None)
    if key is None:
        return None, f"no datasheet peak for device kind {device_kind!r}"
    if dtype not in PEAKS[key]:
        return None, f"{PEAKS[key]['source']} gives no {dtype} peak"
    return PEAKS[key][dtype], PEAKS[key]["source"]


def model_flops(matmul_params: int, num_layers: int, num_heads: int, head_dim: int,
                batch: int, seq_len: int, causal: bool = True) -> dict:
    """FLOPs of one training step: MaxText's and llm.c's count (`flops`: 6 per weight and
    token, forward 2 + backward 4, plus QK^T and PV counted over the causal triangle, or the
    whole L x L square of a bidirectional model, `causal` False) and PaLM's (`palm_flops`:
    the whole square either way)."""
    dense = 6 * matmul_params * batch * seq_len
    attention = 12 * num_layers * batch * seq_len**2 * num_heads * head_dim
    return dict(matmul_params=matmul_params, dense_flops=dense, attention_flops_full=attention,
                flops=dense + (attention // 2 if causal else attention),
                palm_flops=dense + attention,
                formula="6 N B L + 12 layers B L^2 (H Dh)" + (" / 2 (causal half)" if causal
                                                              else " (bidirectional)"),
                palm_formula="6 N B L + 12 layers B L^2 (H Dh) (PaLM: no causal halving)")


def mfu(flops: float, seconds: float, peak: float | None) -> float | None:
    """Model FLOPs per second over `peak` (None where the device has no known peak)."""
    return None if peak is None else flops / seconds / peak


# The chained matmul's sizes per platform: large enough that the multiply, not its launch, is
# timed on an accelerator; small enough for a test on a CPU.
MATMUL_SIZES = {"cpu": (256, 512)}
ACCELERATOR_MATMUL_SIZES = (4096, 8192)


def matmul_sizes(platform: str) -> tuple[int, ...]:
    """The chained matmul's square sizes on `platform` (jax.default_backend())."""
    return MATMUL_SIZES.get(platform, ACCELERATOR_MATMUL_SIZES)


def _operands(size: int, dtype):
    """Two square operands; the second scaled by 1/sqrt(size), so a chain's values stay
    normal numbers."""
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (size, size), dtype)
    b = (jax.random.normal(kb, (size, size), jnp.float32) / size**0.5).astype(dtype)
    return a, b


_DOT = jax.jit(jnp.dot)


def chain_seconds(a, b, chain: int = 10) -> tuple[float, float]:
    """(wall, process CPU) seconds of `chain` products by `b`, each fed the previous one's
    result, dispatched back to back and waited for once (after an untimed product, which
    compiles it and maps its output)."""
    jax.block_until_ready(_DOT(a, b))
    cpu, wall = time.process_time(), time.perf_counter()
    x = a
    for _ in range(chain):
        x = _DOT(x, b)
    jax.block_until_ready(x)
    return time.perf_counter() - wall, time.process_time() - cpu


def achievable(sizes: tuple[int, ...], dtype, chain: int = 10, chains: int = 5) -> dict:
    """The matmul rate this device reaches in `dtype`: per size, the best of `chains` chains
    of `chain` products; overall, the best size's. A figure beside MFU, never its
    denominator."""
    per_size = {}
    for size in sizes:
        a, b = _operands(size, dtype)
        timed = [chain_seconds(a, b, chain) for _ in range(chains)]
        wall, cpu = min(timed)
        flops = chain * 2 * size**3
        per_size[str(size)] = dict(seconds_per_product=wall / chain, flops_per_s=flops / wall,
                                   flops_per_cpu_s=flops / max(cpu, 1e-9))
    best = max(per_size, key=lambda s: per_size[s]["flops_per_s"])
    return dict(dtype=jnp.dtype(dtype).name, chain=chain, chains=chains, sizes=per_size,
                size=int(best), flops_per_s=per_size[best]["flops_per_s"],
                flops_per_cpu_s=per_size[best]["flops_per_cpu_s"],
                method=f"best of {chains} chains of {chain} products under one "
                       "synchronisation, best size")
