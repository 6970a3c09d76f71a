"""The step's per-token metrics: correctness is argmax's, for every input (ties, infinities,
NaN, targets outside the classes), and its loss is optax's cross-entropy."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax.train.steps import argmax_is, token_losses

# Few distinct values, so that ties between classes are common.
LOGIT = st.sampled_from([-np.inf, -2.0, -0.5, 0.0, 0.5, 3.0, np.inf, np.nan])


@settings(max_examples=200, deadline=None)
@given(classes=st.integers(1, 7), data=st.data())
def test_correctness_is_argmax_for_every_input(classes, data):
    rows = data.draw(st.integers(1, 5))
    logits = np.array(data.draw(st.lists(LOGIT, min_size=rows * classes,
                                         max_size=rows * classes)), np.float32)
    logits = logits.reshape(rows, classes)
    targets = np.array(data.draw(st.lists(st.integers(-2, classes + 1), min_size=rows,
                                          max_size=rows)), np.int32)
    want = np.asarray(jnp.argmax(logits, axis=-1) == targets)
    np.testing.assert_array_equal(np.asarray(argmax_is(logits, targets)), want)


def test_token_losses_on_a_batch_of_rows():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5, 11)).astype(np.float32)
    targets = rng.integers(0, 11, size=(2, 3, 5)).astype(np.int32)
    loss, correct = token_losses(jnp.asarray(logits, jnp.bfloat16), targets)
    assert loss.dtype == jnp.float32 and correct.shape == targets.shape
    as_computed = jnp.asarray(logits, jnp.bfloat16).astype(jnp.float32)
    np.testing.assert_allclose(
        loss, optax.softmax_cross_entropy_with_integer_labels(as_computed, targets), rtol=1e-6)
    np.testing.assert_array_equal(correct, jnp.argmax(as_computed, -1) == targets)
