"""2-D positions: the patch model on the grid2d task, trained on grid_size x grid_size grids and
scored per patch on larger grids (Heo et al. 2024, "Rotary Position Embedding for Vision
Transformer", arXiv:2403.13298, ask the same of RoPE-2D against 1-D and absolute encodings).

    posjax train --config=configs/patch2d.py:encoding=rope2d --workdir=DIR
    posjax extrapolate --workdir=DIR          # per-patch accuracy per grid side
    posjax sweep --config=configs/patch2d.py --workdir=SWEEPDIR && posjax plot SWEEPDIR

Arg keys (defaults below) plus any hyperparameter of the chosen encoding. Tasks: row_col,
manhattan (posjax.data.grid2d); every cell is classified (model.output = per_patch).

How each encoding reads the (row, col) of a patch:
  rope2d, rope_mixed  (row, col) directly: axial halves, or learned mixed frequencies.
  mrope               an image's (t, h, w) = (0, row, col), as Qwen2-VL places one: its h and
                      w sections rotate by the row and the column, its t section is constant.
  rope                the raster index row * grid_width + col, with model.grid_width the
                      widest grid evaluated (max of grid_size and test_grid_sizes) so the index
                      is unique on every grid; "same row" then depends on the grid, the point
                      of the comparison.
  learned             axial absolute: a row table and a column table of d_model / 2 each
                      (PatchModel's 2-D input path). The tables have max_len = grid_size**2
                      rows (the stage's seq_len is the patch count), so the coordinates of the
                      test grids have rows, but rows past grid_size - 1 were never trained: the
                      test accuracy measures what untrained absolute embeddings do.
"""

from posjax import config as configlib
from posjax.errors import ConfigError

SIZES = {
    # d_model, num_layers, num_heads, head_dim, mlp_dim, batch_size, steps
    "smoke": configlib.SMOKE_SIZE,
    "main": dict(d_model=64, num_layers=2, num_heads=4, head_dim=16, mlp_dim=256,
                 batch_size=32, steps=1500),
}

DEFAULTS = dict(
    encoding="rope2d",
    task="row_col",
    grid_size=8,
    test_grid_sizes=(12, 16),
    size="main",
    smoke=False,
    steps=0,  # 0: the size's budget
    batch_size=0,  # 0: the size's batch
    learning_rate=1e-3,
    seed=0,
    # sweep only: 1-D flattened RoPE, axial and mixed 2-D RoPE, axial learned absolute
    encodings=("rope", "rope2d", "rope_mixed", "learned"),
)

# Smoke data: enough grids for a few steps and one evaluation batch per side.
SMOKE_EXAMPLES = dict(num_train_examples=64, num_eval_examples=8)


def get_config(arg: str = ""):
    a = configlib.parse_arg(arg, DEFAULTS)
    configlib.check_sweep_encodings(a, arg)
    size, dims, batch, steps = configlib.size_budget(a, SIZES, arg)
    if a.grid_size < 2 or any(s < 2 for s in a.test_grid_sizes):
        raise ConfigError(
            f"grid_size={a.grid_size}, test_grid_sizes={a.test_grid_sizes}: grid sides must be "
            ">= 2 (write several test sides as 12+16)"
        )
    configlib.check_each_once("test_grid_sizes", a.test_grid_sizes)
    config = configlib.base_config(
        encoding=a.encoding,
        encoding_overrides=a,
        kind="patch2d",
        dataset="grid2d",
        stages=((a.grid_size**2, batch, steps),),
        smoke=size == "smoke",
    )
    configlib.apply_size(config, dims, steps)
    config.model.output = "per_patch"
    config.model.grid_width = max((a.grid_size, *a.test_grid_sizes))
    config.data.task = a.task
    config.data.grid_size = a.grid_size
    config.data.test_grid_sizes = tuple(a.test_grid_sizes)
    config.train.learning_rate = a.learning_rate
    config.train.seed = a.seed
    config.eval.batch_size = 32
    if size == "smoke":
        config.data.update(SMOKE_EXAMPLES)
        config.train.eval_batches = 0  # `posjax extrapolate` scores every side after training
    return config


def sweep(add, arg: str = ""):
    """One run per encoding of `encodings` (default: rope, rope2d, rope_mixed, learned)."""
    for encoding in configlib.parse_arg(arg, DEFAULTS).encodings:
        add(encoding=encoding)
