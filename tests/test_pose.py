"""PoSE (Zhu et al. 2024): training positions cut into chunks with random skips that reach a
target length; the rule's invariants for all inputs, its distribution, and the config path."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import config as configlib
from posjax.encoders.positions import pose_positions
from posjax.errors import ConfigError
from posjax.experiment import Experiment
from posjax.train.steps import step_options, train_positions

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")

ROW = 24  # one compiled shape: segments fill the row's start, padding the rest


def _segments(lengths):
    seg = np.concatenate([np.full(n, i + 1) for i, n in enumerate(lengths)])
    seg = np.pad(seg, (0, ROW - len(seg)))
    pos = np.concatenate([np.arange(n) for n in lengths] + [np.arange(ROW - len(seg[seg > 0]))])
    return jnp.asarray(seg[None], jnp.int32), jnp.asarray(pos[None], jnp.int32)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=3), st.integers(1, 4),
       st.integers(ROW, 200), st.integers(0, 2**31 - 1))
def test_each_segment_keeps_order_starts_at_zero_and_ends_within_the_target(
        lengths, chunks, target, seed):
    seg, pos = _segments(lengths)
    out = np.asarray(pose_positions(jax.random.key(seed), pos, target, chunks, seg))[0]
    seg = np.asarray(seg)[0]
    for s in range(1, len(lengths) + 1):
        p = out[seg == s]
        assert p[0] == 0 and p[-1] <= target - 1
        steps = np.diff(p)
        assert (steps >= 1).all()  # increasing: a skip only ever adds
        assert (steps > 1).sum() <= chunks - 1  # within a chunk, the ordinary distances


def test_one_chunk_or_a_target_equal_to_the_length_keeps_the_positions():
    pos = jnp.broadcast_to(jnp.arange(16, dtype=jnp.int32), (3, 16))
    for target, chunks in ((100, 1), (16, 3)):
        out = pose_positions(jax.random.key(0), pos, target, chunks)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(pos))


def test_two_chunks_draw_the_skip_uniformly_up_to_the_target():
    """N = 2 as in the authors' code: the last position is k - 1 + u, u uniform in
    [0, L_t - k], and the cut is uniform in [1, k - 1]."""
    k, target, rows = 16, 64, 4000
    pos = jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), (rows, k))
    out = np.asarray(pose_positions(jax.random.key(1), pos, target, 2))
    skip = out[:, -1] - (k - 1)
    assert skip.min() == 0 and skip.max() == target - k
    assert abs(skip.mean() - (target - k) / 2) < 1.0
    cut = np.argmax(np.diff(out, axis=1) > 1, axis=1) + 1  # first token after the skip
    jumped = skip > 0
    assert cut[jumped].min() == 1 and cut[jumped].max() == k - 1
    assert abs(cut[jumped].mean() - k / 2) < 0.3


def test_the_same_key_draws_the_same_positions_and_each_step_its_own():
    pos = jnp.broadcast_to(jnp.arange(32, dtype=jnp.int32), (4, 32))
    a, b = (np.asarray(pose_positions(jax.random.key(s), pos, 1024)) for s in (0, 0))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, np.asarray(pose_positions(jax.random.key(1), pos, 1024)))


def test_train_positions_applies_pose_to_each_packed_segment():
    seg, pos = _segments([10, 6])
    batch = {"positions": pos, "segment_ids": seg}
    out = np.asarray(train_positions(jax.random.key(3), batch, 0, (96, 2)))[0]
    expected = np.asarray(pose_positions(jax.random.key(3), pos, 96, 2, seg))[0]
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(np.asarray(train_positions(jax.random.key(3), batch, 0,
                                                             (0, 2))), np.asarray(pos))


def _config(arg):
    return configlib.load_config_module(LM).get_config(arg)


def test_bad_settings_are_one_line_errors():
    pos = jnp.zeros((1, 32), jnp.int32)
    with pytest.raises(ConfigError, match="target length 16 < sequence length 32"):
        pose_positions(jax.random.key(0), pos, 16)
    with pytest.raises(ConfigError, match="chunks=0"):
        pose_positions(jax.random.key(0), pos, 64, 0)
    with pytest.raises(ConfigError, match="set one of them to 0"):
        Experiment.from_config(_config("smoke,seq_len=32,pose=128,"
                                                "randomize_positions=128"))
    with pytest.raises(ConfigError, match="train.pose=16"):
        Experiment.from_config(_config("smoke,seq_len=32,pose=16"))


def test_the_encoding_is_built_for_the_target_length():
    experiment = Experiment.from_config(_config("smoke,seq_len=32,pose=256"))
    assert experiment.dims.max_len == 256  # learned tables cover what PoSE reaches
    assert step_options(experiment, None, None)["pose"] == (256, 2)
