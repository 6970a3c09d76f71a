"""Text and an image in one sequence (posjax.data.text_image, configs/text_image.py): the
position rules on a hand-worked example, answers checked against their construction, batches
against the batch spec, larger test grids and texts, the mixed_lm model reading every
component, and smoke runs trained and scored per grid side."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import config as configlib
from posjax import data, encoders
from posjax.data import text_image
from posjax.encoders.rotary_multimodal import rope_tv_positions
from posjax.errors import ConfigError
from posjax.eval import evaluate
from posjax.launch import sweep
from posjax.models import build_model
from posjax.train import trainer

CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "text_image.py")
SMALL = dict(grid_size=3, test_grid_sizes=(4, 6), num_symbols=16, num_train_examples=40,
             num_eval_examples=12)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tfds")


def _kind(data_dir, rule="mrope", task="successor"):
    cfg = data.default_data_config("text_image")
    cfg.update(data_dir=str(data_dir), position_rule=rule, task=task, **SMALL)
    return data.kind_of(cfg)


def test_position_rules_on_a_hand_worked_example():
    # x0 x1 ROW COL VISION_START | 2 x 2 image | VISION_END SEP answer
    mrope = text_image.example_positions("mrope", prefix_length=5, side=2)
    expected = [[0, 0, 0], [1, 1, 1], [2, 2, 2], [3, 3, 3], [4, 4, 4],  # text: t = h = w
                [5, 5, 5], [5, 5, 6], [5, 6, 5], [5, 6, 6],  # patches (5, 5 + row, 5 + col)
                [7, 7, 7], [8, 8, 8], [9, 9, 9]]  # text after: from 5 + max(1, 2, 2)
    np.testing.assert_array_equal(mrope, expected)
    np.testing.assert_array_equal(text_image.example_positions("axial", 5, 2),
                                  np.asarray(expected)[:, 1:])
    np.testing.assert_array_equal(text_image.example_positions("sequence", 5, 2), np.arange(12))
    with pytest.raises(ConfigError, match="unknown data.position_rule"):
        text_image.example_positions("raster", 5, 2)


def test_next_row_scores_every_patch_below_the_top_row_as_the_one_above_plus_one():
    rng = np.random.default_rng(3)
    for side in (2, 4, 9):
        ex = text_image.make_example("next_row", rng, side, 6, 2 * side)
        tokens, mask = ex["tokens"], ex["answer_mask"]
        start = ex["prefix_length"] - 1  # VISION_START
        assert tokens[start] == text_image.VISION_START and tokens[-1] == text_image.VISION_END
        grid = tokens[start + 1:-1] - text_image.SYMBOL_OFFSET
        grid = grid.reshape(side, side)
        np.testing.assert_array_equal(grid[1:], (grid[:-1] + 1) % (2 * side))
        scored = np.zeros_like(mask)
        scored[start + 1 + side:start + 1 + side * side] = 1  # rows 1..S-1
        np.testing.assert_array_equal(mask, scored)
        assert len(tokens) <= text_image.sequence_length(side)


def test_rope_tv_counts_an_image_as_its_patches_with_equal_gaps_around_it():
    # x0 x1 x2 x3 VISION_START | 3 x 3 image | VISION_END SEP answer
    tv = text_image.example_positions("rope_tv", prefix_length=5, side=3)
    np.testing.assert_array_equal(tv[:5], np.stack([np.arange(5)] * 2, -1))  # text: (n, n)
    patches = tv[5:14].reshape(3, 3, 2)
    rows, cols = np.meshgrid(np.arange(3), np.arange(3), indexing="ij")
    # after VISION_START at 4, offset (9 - 3) / 2 + 1 = 4, patches one apart
    np.testing.assert_array_equal(patches, np.stack([8 + rows, 8 + cols], -1))
    # the text after the image continues where the flattened sequence does: 5 + 9
    np.testing.assert_array_equal(tv[14:], [[14, 14], [15, 15], [16, 16]])
    gap_before = patches[0, 0] - tv[4]
    gap_after = tv[14] - patches[-1, -1]
    np.testing.assert_array_equal(gap_before, gap_after)
    # one patch is one token: 2-D RoPE on the diagonal is then RoPE-1D
    np.testing.assert_array_equal(rope_tv_positions([2, (1, 1, 1), 2]),
                                  np.stack([np.arange(5)] * 2, -1))
    with pytest.raises(ConfigError, match="a square grid"):
        rope_tv_positions([2, (1, 2, 3), 2])


def _read_example(tokens: np.ndarray, num_symbols: int, named_side: int) -> dict:
    """The checker's reading of an example's tokens, by the vocabulary alone: text symbols,
    named (row, col), grid int[S, S] of symbols and the answer symbol."""
    start = int(np.flatnonzero(tokens == text_image.VISION_START)[0])
    end = int(np.flatnonzero(tokens == text_image.VISION_END)[0])
    side = int(round((end - start - 1) ** 0.5))
    names = tokens[start - 2:start] - text_image.SYMBOL_OFFSET - num_symbols
    return {"text": tokens[:start - 2] - text_image.SYMBOL_OFFSET,
            "row": int(names[0]), "col": int(names[1] - named_side),
            "grid": (tokens[start + 1:end] - text_image.SYMBOL_OFFSET).reshape(side, side),
            "answer": int(tokens[-1] - text_image.SYMBOL_OFFSET)}


@pytest.mark.parametrize("task", ["successor", "cell"])
def test_answers_are_right_by_construction(task):
    offset = {"successor": 1, "cell": 0}[task]
    rng = np.random.default_rng(1)
    for side in (2, 3, 4, 6):
        for _ in range(50):
            ex = text_image.make_example(task, rng, side, 3, 16)
            tokens = ex["tokens"]
            n = ex["prefix_length"] - 3  # text symbols, then ROW COL VISION_START
            assert len(tokens) == n + 6 + side * side and side <= n <= 2 * side
            np.testing.assert_array_equal(np.flatnonzero(ex["answer_mask"]), [len(tokens) - 1])
            parts = _read_example(tokens, 16, 3)
            text, grid = list(parts["text"]), parts["grid"]
            assert len(set(text)) == len(text) == n  # distinct symbols
            assert grid.shape == (side, side) and set(grid.ravel()) <= set(text)
            named = min(side, 3)  # in the grid, and in the block whose names are trained
            assert 0 <= parts["row"] < named and 0 <= parts["col"] < named
            shown = text.index(grid[parts["row"], parts["col"]])
            assert parts["answer"] == text[shown + offset]
    with pytest.raises(ConfigError, match="unknown text_image task"):
        text_image.make_example("count", rng, 3, 3, 16)


def test_below_answers_the_cell_one_row_down_from_q():
    rng = np.random.default_rng(2)
    rows_seen = set()
    for side in (2, 3, 5, 9):
        for _ in range(40):
            ex = text_image.make_example("below", rng, side, 3, 4 * side + side * side)
            tokens = ex["tokens"]
            start = int(np.flatnonzero(tokens == text_image.VISION_START)[0])
            assert ex["prefix_length"] == start + 1 and side <= start <= 2 * side
            grid = tokens[start + 1:start + 1 + side * side].reshape(side, side)
            assert tokens[start + 1 + side * side] == text_image.VISION_END
            text, after = tokens[:start], tokens[start + 2 + side * side:]
            # distinct symbols, none of the image's in the text: each q names one cell
            assert len(set(grid.ravel()) | set(text)) == side * side + start
            assert len(after) == 2 * text_image.BELOW_QUESTIONS
            for q, answer in after.reshape(-1, 2):
                (r,), (c,) = np.nonzero(grid == q)
                assert r < side - 1 and answer == grid[r + 1, c]
                rows_seen.add((side, int(r)))
            answers = len(tokens) - 2 * text_image.BELOW_QUESTIONS + 1 + 2 * np.arange(
                text_image.BELOW_QUESTIONS)
            np.testing.assert_array_equal(np.flatnonzero(ex["answer_mask"]), answers)
            assert len(tokens) <= text_image.sequence_length(side)
            np.testing.assert_array_equal(  # the questions continue the text after the image
                text_image.lm_row(ex, "mrope", len(tokens))["positions"][-len(after) - 1:, 0],
                start + 1 + side + np.arange(len(after) + 1))
    assert (9, 7) in rows_seen  # q anywhere above the bottom row, not only in a trained block
    with pytest.raises(ConfigError, match="needs up to 168 distinct symbols"):
        text_image.text_image_config("below", 2, 6, (9, 12), 64, 10, 10, 0)


@pytest.mark.parametrize("rule, axes", [("mrope", 3), ("axial", 2), ("sequence", 0)])
def test_training_batches_match_the_batch_spec(data_dir, rule, axes):
    kind = _kind(data_dir, rule)
    seq_len = text_image.sequence_length(3)
    spec = kind.batch_spec(seq_len, 4)
    assert spec.position_axes == axes and spec.vocab_size == 4 + 16 + 2 * 3
    batch = next(iter(kind.train_dataset(seq_len, 4, seed=0)))
    assert set(batch) == set(spec.arrays)
    for key, array in spec.arrays.items():
        assert batch[key].shape == array.shape and batch[key].dtype == array.dtype, key
    for row in range(4):
        real = int(batch["segment_ids"][row].sum())  # one example, then padding
        tokens = list(batch["inputs"][row])
        start, end = tokens.index(text_image.VISION_START), tokens.index(text_image.VISION_END)
        side = round((end - start - 1) ** 0.5)
        assert 2 <= side <= 3 and real == start + side * side + 4
        np.testing.assert_array_equal(batch["positions"][row][:real],
                                      text_image.example_positions(rule, start + 1, side))
        # one scored target: at SEP, the answer
        (at,) = np.flatnonzero(batch["weights"][row])
        assert at == real - 2 and batch["inputs"][row][at] == text_image.SEP
        assert batch["targets"][row][at] == batch["inputs"][row][real - 1]
    with pytest.raises(ConfigError, match="set seq_len >= 35"):  # 2S + 3 + S^2 + 17 (below)
        kind.batch_spec(34, 4)


def test_test_splits_hold_larger_grids_and_longer_texts(data_dir):
    kind = _kind(data_dir)
    assert set(kind.split_names()) == {"train", "validation", "test_4", "test_6"}
    by_side = {}
    for split, side, batch in kind.task_batches(8):
        by_side.setdefault(side, set()).add(split)
        assert batch["inputs"].shape[1] == text_image.sequence_length(side)
        real = batch["segment_ids"].sum(axis=1)
        assert np.all(real[real > 0] >= side + 6 + side * side)
    # validation: the training sides 2..3; test: the larger ones
    assert by_side == {2: {"validation"}, 3: {"validation"}, 4: {"test_4"}, 6: {"test_6"}}
    config = _config("encoding=mrope", data_dir)
    reach = [kind.reach(config, None, side) for side in (3, 4, 6)]
    assert reach == [3 * 3 + 20, 3 * 4 + 20, 3 * 6 + 20]  # 2S text + 3, S patches, 17 after


def _config(arg, data_dir):
    config = configlib.load_config_module(CONFIG).get_config("smoke," + arg)
    config.data.update(data_dir=str(data_dir), **SMALL)
    config.train.stages = ((text_image.sequence_length(3), 4, 4),)
    return config


def test_config_picks_each_encodings_positions_and_the_sweep_compares_six():
    load = configlib.load_config_module(CONFIG).get_config
    rules = {e: load(f"smoke,encoding={e}").data.position_rule
             for e in ("mrope", "rope", "rope2d", "none")}
    assert rules == {"mrope": "mrope", "rope": "sequence", "rope2d": "axial", "none": "sequence"}
    assert load("smoke,encoding=rope2d,position_rule=rope_tv").data.position_rule == "rope_tv"
    config = load("smoke")
    assert (config.model.kind, config.data.dataset) == ("mixed_lm", "text_image")
    assert config.train.stages[0][0] == text_image.sequence_length(6)
    assert [r.name for r in sweep.expand(CONFIG, "smoke")] == [
        "encoding=mrope", "encoding=mrope,interleaved=True", "encoding=rope2d",
        "encoding=rope2d,position_rule=rope_tv", "encoding=rope", "encoding=none"]
    assert [r.name for r in sweep.expand(CONFIG, "smoke,encodings=mrope+none")] == [
        "encoding=mrope", "encoding=mrope,interleaved=True", "encoding=none"]
    # an encoding with no point of its own runs at its defaults (it was 0 runs and rc 0)
    assert [r.name for r in sweep.expand(CONFIG, "smoke,encodings=rope_mixed+rope")] == [
        "encoding=rope", "encoding=rope_mixed"]
    with pytest.raises(ConfigError, match="test sides larger"):
        load("smoke,test_grid_sizes=6")
    with pytest.raises(ConfigError, match="need 2 <= min_grid_size <= grid_size"):
        load("smoke,min_grid_size=7")
    with pytest.raises(ConfigError, match="position_rule='raster'"):
        load("smoke,position_rule=raster")
    # the alphabet by default: as many symbols as the task needs on the largest test grid
    assert load("smoke").data.num_symbols == 24 and load("smoke,task=cell").data.num_symbols == 24
    assert load("smoke,task=below").data.num_symbols == 24 + 144


def _mixed_lm(name, axes):
    cfg = dict(d_model=32, num_layers=1, num_heads=2, head_dim=16, mlp_dim=64, dtype="float32")
    return build_model(cfg, encoders.get(name), kind="mixed_lm", max_len=32,
                       rngs=nnx.Rngs(params=0), vocab_size=30, position_axes=axes)


def test_mixed_lm_reads_each_position_component_and_refuses_a_form_it_cannot():
    model = _mixed_lm("mrope", 3)
    tokens = jnp.arange(12, dtype=jnp.int32)[None] % 30
    segments = jnp.ones((1, 12), jnp.int32)
    positions = jnp.asarray(text_image.example_positions("mrope", 5, 2))[None]
    base = model(tokens, positions, segments)
    for component in range(3):  # moving the last patch in t, h or w changes what follows it
        moved = positions.at[0, 8, component].add(3)
        assert not np.allclose(model(tokens, moved, segments)[0, 8:], base[0, 8:], atol=1e-5)
    axial = _mixed_lm("rope2d", 2)(tokens, positions[..., 1:], segments)
    assert axial.shape == (1, 12, 30)
    for name, axes, have in [("rope", 3, r"int32\[B, L, 3\]"), ("mrope", 2, r"int32\[B, L, 2\]"),
                             ("rope2d", 0, r"int32\[B, L\]")]:
        with pytest.raises(ConfigError, match=f"{name}' cannot read this data's positions {have}"):
            _mixed_lm(name, axes)


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["mrope", "rope"])  # [B, L, 3] and [B, L] positions
def test_smoke_run_trains_and_is_scored_per_grid_side(tmp_path, data_dir, encoding):
    workdir = tmp_path / encoding
    trainer.train(_config(f"encoding={encoding}", data_dir), workdir, progress=False)
    result = evaluate(workdir)  # the data kind picks the task evaluation
    assert result["protocol"] == "task" and result["dataset"] == "text_image"
    assert result["train_len"] == 3 and result["task"] == "next_row"
    rows = {r["length"]: r for r in result["lengths"]}
    assert sorted(rows) == [2, 3, 4, 6]
    for side, row in rows.items():
        assert row["scored"] == row["examples"] * side * (side - 1)  # every patch past row 0
        assert row["patches"] == side * side and row["text"] == [side, 2 * side]
        assert 0.0 <= row["seq_acc"] <= 1.0 and np.isfinite(row["loss"])
    assert rows[2]["examples"] + rows[3]["examples"] == rows[6]["examples"] == 12
    assert rows[3]["splits"] == ["validation"] and rows[6]["splits"] == ["test_6"]
