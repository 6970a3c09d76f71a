"""The figures of `scripts/gpu_check.sh`'s raw files, per visit, for the H200 record's summary
(experiments/bench/nvidia-h200/summary.py) and the numbers the pages quote from it
(experiments/bench/values.py): one computation for both.

MFU is by the field's convention: the model FLOPs of a step (MaxText's count, as recorded in
the raw file; PaLM's beside it) over the visit's step seconds over the datasheet's dense peak.
A ratio to RoPE is taken visit by visit (the same repeat, the same process).
"""

from __future__ import annotations

GIB = 2**30


def speed_figures(section: dict, peak: float) -> dict[str, dict[str, list[float]]]:
    """{encoding label: {figure: one value per visit}} of a speed or flash stage's section
    (speed_bB.json / flash_bB.json's "speed"): tokens_k (thousands of tokens/s), step_ms,
    mfu and mfu_palm (fractions of the peak), and over_rope (tokens/s over RoPE's, where
    RoPE ran)."""
    flops = section["flops"]
    palm = flops["dense_flops"] + flops["attention_flops_full"]
    rows = {row["encoding"]: row["visits"] for row in section["rows"]}
    rope = rows.get("rope")
    out = {}
    for name, visits in rows.items():
        figures = {"tokens_k": [v["tokens_per_s"] / 1e3 for v in visits],
                   "step_ms": [1e3 * v["step_s"] for v in visits],
                   "mfu": [flops["flops"] / v["step_s"] / peak for v in visits],
                   "mfu_palm": [palm / v["step_s"] / peak for v in visits]}
        if rope:
            figures["over_rope"] = [v["tokens_per_s"] / r["tokens_per_s"]
                                    for v, r in zip(visits, rope, strict=True)]
        out[name] = figures
    return out


def long_figures(section: dict) -> dict[tuple[str, int], dict[str, float]]:
    """{(encoding label, length): figures} of the long stage's section (long.json's "long"):
    tokens_k, over_rope (tokens/s over RoPE's at that length, where RoPE ran), step_ms (one
    per timed step) and memory_gib (the compiled step's temp + arguments + outputs)."""
    rope = {row["seq_len"]: row["tokens_per_s"] for row in section["rows"]
            if row["encoding"] == "rope"}
    out = {}
    for row in section["rows"]:
        length = row["seq_len"]
        out[(row["encoding"], length)] = {
            "tokens_k": row["tokens_per_s"] / 1e3,
            "over_rope": row["tokens_per_s"] / rope[length] if length in rope else None,
            "step_ms": [1e3 * s for s in row["step_s_all"]],
            "memory_gib": row["memory"]["peak_bytes"] / GIB,
            "batch_size": row["batch_size"]}
    return out
