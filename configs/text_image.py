"""Text and an image in one sequence (M-RoPE's setting, Qwen2-VL; Wang et al. 2024): a causal
LM trained from scratch on grids of sides min_grid_size..grid_size placed between text tokens,
scored by exact match of the answer per side, up to larger grids with longer texts
(posjax.data.text_image).

    posjax train --config=configs/text_image.py:encoding=mrope --workdir=DIR
    posjax extrapolate --workdir=DIR          # exact match per grid side
    posjax sweep --config=configs/text_image.py --workdir=SWEEPDIR && posjax plot SWEEPDIR

Arg keys (defaults below) plus any hyperparameter of the chosen encoding. Tasks: next_row
(each image row the row above advanced by one symbol, every patch below the top row scored:
the patch one row up, S steps back in the raster order; learned in a few hundred steps),
successor (the text symbol after the one the named cell shows: the cell's row and column and
the text's order), cell (the named cell's symbol: the image lookup alone), below (the symbol
of the cell under the one showing q). The last three were not learned by any encoding in
CPU probes of up to 3000 steps.

How each encoding reads positions (position_rule, "" = the encoding's own):
  mrope     (t, h, w) by Qwen2-VL's rule: text t = h = w, the image's patches at
            (p0, p0 + row, p0 + col), the text after it continuing from p0 + side.
  rope2d    axial (h, w): M-RoPE's rule without t, so a text token sits at (p, p) on the
            diagonal (its order a step in both coordinates) and a patch at
            (p0 + row, p0 + col); relative offsets inside the image are those of the grid.
            With position_rule=rope_tv: Su's RoPE-Tie-v2, the image worth its S * S patches
            and centred in that span (posjax.encoders.rotary_multimodal.rope_tv_positions).
  rope, none and every other 1-D encoding
            the index in the sequence: the image flattened in raster order, so a patch's
            distance to the text before it grows with row * side, and changes with the side.
"""

from posjax import config as configlib
from posjax.data import text_image
from posjax.errors import ConfigError

SIZES = {
    # d_model, num_layers, num_heads, head_dim, mlp_dim, batch_size, steps
    "smoke": configlib.SMOKE_SIZE,
    "main": dict(d_model=128, num_layers=4, num_heads=4, head_dim=32, mlp_dim=512,
                 batch_size=32, steps=3000),
}

DEFAULTS = dict(
    encoding="mrope",
    task="next_row",
    grid_size=6,
    min_grid_size=2,
    test_grid_sizes=(9, 12),
    num_symbols=0,  # 0: as many as the task needs on the largest test grid
    position_rule="",  # "": the encoding's own (module docstring)
    size="main",
    smoke=False,
    steps=0,  # 0: the size's budget
    batch_size=0,  # 0: the size's batch
    learning_rate=1e-3,
    seed=0,
    # sweep only: the encodings of SWEEP_POINTS compared
    encodings=("mrope", "rope", "rope2d", "none"),
)

# M-RoPE with Qwen2-VL's sections and Qwen3-VL's interleaving; axial 2-D RoPE by M-RoPE's
# rule and by Su's; 1-D RoPE on the flattened sequence; no position encoding.
SWEEP_POINTS = (
    dict(encoding="mrope"),
    dict(encoding="mrope", interleaved=True),
    dict(encoding="rope2d"),
    dict(encoding="rope2d", position_rule="rope_tv"),
    dict(encoding="rope"),
    dict(encoding="none"),
)

# The position rule an encoding reads by default: its (t, h, w), (h, w), else the sequence.
ENCODING_RULES = {"mrope": "mrope", "rope2d": "axial", "rope_mixed": "axial"}

# Smoke data: enough examples for a few steps and one evaluation batch per side.
SMOKE_EXAMPLES = dict(num_train_examples=64, num_eval_examples=8)


def get_config(arg: str = ""):
    a = configlib.parse_arg(arg, DEFAULTS)
    configlib.check_sweep_encodings(a, arg)
    size, dims, batch, steps = configlib.size_budget(a, SIZES, arg)
    if not 2 <= a.min_grid_size <= a.grid_size or any(
            s <= a.grid_size for s in a.test_grid_sizes):
        raise ConfigError(
            f"min_grid_size={a.min_grid_size}, grid_size={a.grid_size}, test_grid_sizes="
            f"{a.test_grid_sizes}: need 2 <= min_grid_size <= grid_size and test sides larger "
            "than grid_size (write several as 9+12)")
    configlib.check_each_once("test_grid_sizes", a.test_grid_sizes)
    rule = a.position_rule or ENCODING_RULES.get(a.encoding, "sequence")
    if rule not in text_image.POSITION_AXES:
        raise ConfigError(f"position_rule={rule!r}: use one of "
                          f"{', '.join(text_image.POSITION_AXES)}, or '' for the encoding's own")
    config = configlib.base_config(
        encoding=a.encoding,
        encoding_overrides=a,
        kind="mixed_lm",
        dataset="text_image",
        stages=((text_image.sequence_length(a.grid_size), batch, steps),),
        smoke=size == "smoke",
    )
    configlib.apply_size(config, dims, steps)
    config.data.task = a.task
    config.data.grid_size = a.grid_size
    config.data.min_grid_size = a.min_grid_size
    config.data.test_grid_sizes = tuple(a.test_grid_sizes)
    config.data.num_symbols = a.num_symbols or text_image.task_of(a.task)[1](
        max(a.test_grid_sizes))
    config.data.position_rule = rule
    config.train.learning_rate = a.learning_rate
    config.train.seed = a.seed
    # The trainer's evaluation would compile once per side; `posjax extrapolate` scores them.
    config.train.eval_batches = 0
    config.eval.batch_size = 32
    if size == "smoke":
        config.data.update(SMOKE_EXAMPLES)
    return config


def sweep(add, arg: str = ""):
    """The SWEEP_POINTS of the encodings in `encodings` (default: all six points), and a run
    at its defaults for each other encoding named there."""
    encodings = configlib.parse_arg(arg, DEFAULTS).encodings
    for point in SWEEP_POINTS:
        if point["encoding"] in encodings:
            add(**point)
    for name in dict.fromkeys(encodings):
        if name not in {point["encoding"] for point in SWEEP_POINTS}:
            add(encoding=name)
