"""The GPU-only paths, run where an NVIDIA GPU is present (scripts/gpu_check.sh runs them).

On the CPU tests/test_gpu_path.py checks what posjax hands cuDNN; here cuDNN runs it:
fused attention against dense with and without a bias, alone and under vmap, and with
values narrower than the keys (latent attention); one bfloat16
training step per encoder site; the main job's model with 3 vmapped seeds.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import encoders
from posjax.attention import multi_head_attention
from posjax.config import load_config_module
from posjax.encoders import Dims
from posjax.experiment import Experiment
from posjax.train import optim
from posjax.train.steps import initial_state, step_options, train_step, train_steps
from posjax.train.trainer import stack_seeds

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(jax.default_backend() != "gpu",
                       reason="needs an NVIDIA GPU (cuDNN); scripts/gpu_check.sh runs these"),
]

B, L, H, D = 2, 128, 4, 64
# bfloat16 keeps 8 bits of mantissa: outputs of unit scale agree to a few of its ulps.
BF16_ATOL = 3e-2


def _attend(impl, name, q, k, v, pos, seg, params):
    enc = encoders.get(name).for_model(True)
    return multi_head_attention(q, k, v, encoding=enc, params=params, q_pos=pos, k_pos=pos,
                                q_seg=seg, k_seg=seg, causal=True, impl=impl)


@pytest.mark.parametrize("whole", [False, True], ids=["packed", "whole_rows"])
@pytest.mark.parametrize("name", ["rope", "alibi", "t5"])
def test_cudnn_matches_dense_alone_and_under_vmap(name, whole):
    keys = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(key, (3, B, L, H, D), jnp.bfloat16) for key in keys)
    pos = jnp.tile(jnp.arange(L, dtype=jnp.int32), (B, 1))
    seg = None
    if not whole:  # two segments in the first row, padding at the end of the second
        seg = jnp.ones((B, L), jnp.int32).at[0, L // 2:].set(2).at[1, L - 9:].set(0)
        pos = pos.at[0, L // 2:].set(jnp.arange(L - L // 2))
    params = encoders.get(name).init(jax.random.key(1), Dims(H * D, H, D, max_len=L))

    def run(impl):
        one = lambda q, k, v: _attend(impl, name, q, k, v, pos, seg, params)
        return jax.jit(one)(q[0], k[0], v[0]), jax.jit(jax.vmap(one))(q, k, v)

    (fused_one, fused_many), (dense_one, dense_many) = run("fused"), run("dense")
    for got, want in ((fused_one, dense_one), (fused_many, dense_many)):
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                                   atol=BF16_ATOL)


def test_cudnn_matches_dense_with_values_narrower_than_the_keys():
    """Latent attention's shapes (posjax.models.latent): q and k 192 wide, the first 64
    rotated, values 128 wide (DeepSeek-V2's), handed to cuDNN padded to one width."""
    keys = jax.random.split(jax.random.key(0), 3)
    q, k = (jax.random.normal(key, (B, L, H, 192), jnp.bfloat16) for key in keys[:2])
    v = jax.random.normal(keys[2], (B, L, H, 128), jnp.bfloat16)
    pos = jnp.tile(jnp.arange(L, dtype=jnp.int32), (B, 1))
    enc = encoders.get("rope", fraction=1 / 3).for_model(True)

    def run(impl):
        return jax.jit(lambda q, k, v: multi_head_attention(
            q, k, v, encoding=enc, params={}, q_pos=pos, k_pos=pos, q_seg=None, k_seg=None,
            causal=True, impl=impl))(q, k, v)

    fused, dense = run("fused"), run("dense")
    assert fused.shape == (B, L, H, 128)
    np.testing.assert_allclose(np.asarray(fused, np.float32), np.asarray(dense, np.float32),
                               atol=BF16_ATOL)


def _trace_and_step(arg: str, seeds: int, steps: int = 2) -> dict:
    config = load_config_module("configs/lm.py").get_config(arg)
    experiment = Experiment.from_config(config)
    model = experiment.build()
    tx = optim.optimizer(config.train, experiment.total_steps)
    options = step_options(experiment, model.graphdef, tx)
    iterator = experiment.train_iterator(experiment.stages[0])
    if seeds == 1:
        state, rest, step = initial_state(model.params, tx, 0), model.rest, train_step
    else:
        state = stack_seeds([initial_state(model.params, tx, s) for s in range(seeds)])
        rest, step = stack_seeds([model.rest] * seeds), train_steps
    for _ in range(steps):
        batches = [next(iterator) for _ in range(seeds)]
        batch = batches[0] if seeds == 1 else jax.tree.map(lambda *x: np.stack(x), *batches)
        state, sums = step(state, rest, batch, **options)
    return jax.device_get(sums)


@pytest.mark.parametrize("name", ["sinusoidal", "rope", "t5", "shaw", "fox"])
def test_one_bfloat16_training_step_per_site(name):
    """input, query/key, logits, content-position and content-dependent sites."""
    sums = _trace_and_step(f"encoding={name},size=smoke,seq_len=64", 1)
    assert np.isfinite(sums["loss_sum"]) and sums["diverged_at"] == 2**31 - 1


@pytest.mark.parametrize("name", ["none", "rope", "alibi", "t5"])
def test_the_main_jobs_model_with_three_vmapped_seeds(name):
    sums = _trace_and_step(f"encoding={name},size=main", 3)
    assert np.isfinite(sums["loss_sum"]).all()
