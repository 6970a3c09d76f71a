"""M-RoPE (Qwen2-VL) and MRoPE-Interleave (Qwen3-VL): golden rotations and the mixed text +
image position rule from Hugging Face transformers, text reducing to RoPE, and relative 3-D
positions."""

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import encoders
from posjax.encoders import Dims
from posjax.encoders.rotary_multimodal import default_section, mrope_positions, pair_axes
from posjax.errors import ConfigError

GOLDEN = json.loads((Path(__file__).parent / "golden" / "mrope.json").read_text())
HEAD_DIM = 16


def _merged_parts():
    """The golden's parts with each image grid after the vision encoder's merge."""
    merge = GOLDEN["merge"]
    return [p if isinstance(p, int) else (p[0], p[1] // merge, p[2] // merge)
            for p in GOLDEN["parts"]]


@pytest.mark.parametrize("model", ["qwen2", "qwen3"])
def test_mixed_text_and_image_positions_are_hugging_faces_get_rope_index(model):
    np.testing.assert_array_equal(mrope_positions(_merged_parts()), GOLDEN["positions"][model])


@pytest.mark.parametrize("model, interleaved", [("qwen2", False), ("qwen3", True)])
def test_rotations_are_hugging_faces_at_mixed_positions(model, interleaved):
    case = GOLDEN[model]
    enc = encoders.get("mrope", section="+".join(map(str, case["section"])),
                       interleaved=interleaved)
    enc.check(Dims(32, 2, HEAD_DIM, 64))
    positions = jnp.asarray(GOLDEN["positions"][model], jnp.int32)[None]
    q, k = enc.rotate({}, jnp.asarray(case["q"]), jnp.asarray(case["k"]), positions, positions)
    np.testing.assert_allclose(np.asarray(q), case["q_out"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(k), case["k_out"], rtol=1e-5, atol=1e-5)


def test_default_sections_are_qwens_scaled_to_the_head():
    assert default_section(64, False) == (16, 24, 24)
    assert default_section(64, True) == (24, 20, 20)
    assert default_section(8, False) == tuple(GOLDEN["qwen2"]["section"])
    assert default_section(8, True) == tuple(GOLDEN["qwen3"]["section"])
    np.testing.assert_array_equal(pair_axes((4, 2, 2), True), [0, 1, 2, 0, 1, 2, 0, 0])
    np.testing.assert_array_equal(pair_axes((2, 3, 3), False), [0, 0, 1, 1, 1, 2, 2, 2])


def _qk(length, seed=0):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.normal(size=(1, length, 2, HEAD_DIM)), jnp.float32)
            for _ in range(2)]


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=6, max_size=6), st.booleans())
def test_text_positions_give_rope_with_the_same_frequencies(positions, interleaved):
    q, k = _qk(6)
    pos = jnp.asarray([positions], jnp.int32)
    ours = encoders.get("mrope", interleaved=interleaved).rotate({}, q, k, pos, pos)
    as_3d = encoders.get("mrope", interleaved=interleaved).rotate(
        {}, q, k, jnp.stack([pos] * 3, -1), jnp.stack([pos] * 3, -1))
    rope = encoders.get("rope", layout="half").rotate({}, q, k, pos, pos)
    for a, b, c in zip(ours, as_3d, rope, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@settings(max_examples=20, deadline=None)
@given(st.tuples(*[st.integers(-300, 300)] * 3), st.booleans())
def test_scores_depend_only_on_the_difference_of_3d_positions(shift, interleaved):
    q, k = _qk(len(GOLDEN["positions"]["qwen2"]), seed=1)
    pos = jnp.asarray(GOLDEN["positions"]["qwen2"], jnp.int32)[None] + 400
    enc = encoders.get("mrope", interleaved=interleaved)

    def scores(p):
        rq, rk = enc.rotate({}, q, k, p, p)
        return np.asarray(jnp.einsum("bqhd,bkhd->bhqk", rq, rk))

    moved = pos + jnp.asarray(shift, jnp.int32)
    np.testing.assert_allclose(scores(moved), scores(pos), rtol=1e-3, atol=1e-3)


def test_bad_sections_and_positions_are_one_line_errors():
    with pytest.raises(ConfigError, match="summing to head_dim / 2 = 8, e.g. 2\\+3\\+3"):
        encoders.get("mrope", section="4+4+4").check(Dims(32, 2, HEAD_DIM, 64))
    with pytest.raises(ConfigError, match="joined by '\\+'"):
        encoders.get("mrope", section="16,24,24")
    q, k = _qk(4)
    bad = jnp.zeros((1, 4, 2), jnp.int32)
    with pytest.raises(ConfigError, match="got shape \\(1, 4, 2\\)"):
        encoders.get("mrope").rotate({}, q, k, bad, bad)


def test_a_sequence_of_text_alone_and_an_image_alone():
    np.testing.assert_array_equal(mrope_positions([3]), [[0, 0, 0], [1, 1, 1], [2, 2, 2]])
    grid = mrope_positions([(2, 1, 2), 1])
    np.testing.assert_array_equal(grid, [[0, 0, 0], [0, 0, 1], [1, 0, 0], [1, 0, 1],
                                         [2, 2, 2]])
    assert mrope_positions([]).shape == (0, 3)
