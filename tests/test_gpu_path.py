"""What posjax hands cuDNN on a GPU, checked on the CPU.

cuDNN cannot run here, so these tests trace the real training steps as they trace on a GPU
(the backend reported as "gpu", so `dtype=auto` is bfloat16 and `attention=auto` takes the
fused path with implementation="cudnn") with `jax.nn.dot_product_attention` replaced by a
recorder. Under `vmap` (seeds trained in one program) JAX's cuDNN batching rule reshapes a
batched mask or bias to [seeds * B, H, Lq, Lk]: every mask and bias posjax hands over must
therefore have the query's batch and head count, or be absent. Whole rows
(data.packing="stream") must come with no mask at all: `is_causal` alone.
"""

from __future__ import annotations

import functools

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax.config import load_config_module
from posjax.experiment import Experiment
from posjax.models.layers import ONE_HOT_MAX_ROWS, TableEmbed
from posjax.train import optim, steps
from posjax.train.steps import initial_state, step_options, train_step, train_steps
from posjax.train.trainer import stack_seeds

SEEDS = 3
# The main job's encodings (every site the fused path carries) and the learned biases.
ENCODINGS = ("none", "learned", "sinusoidal", "rope", "xpos", "alibi", "t5", "kerple_log",
             "fire")
BIASED = {"alibi", "t5", "kerple_log", "fire"}


@pytest.fixture
def on_gpu(monkeypatch):
    """The backend reads as "gpu"; returns the list the recorder fills, one dict per call."""
    calls: list[dict] = []
    real = jax.nn.dot_product_attention

    def recorder(query, key, value, bias=None, mask=None, *, scale=None, is_causal=False,
                 implementation=None, **kw):
        calls.append(dict(query=query.shape, key=key.shape, value=value.shape,
                          bias=None if bias is None else bias.shape,
                          bias_dtype=None if bias is None else bias.dtype,
                          mask=None if mask is None else mask.shape, is_causal=is_causal,
                          implementation=implementation, dtype=query.dtype))
        return real(query, key, value, bias=bias, mask=mask, scale=scale, is_causal=is_causal,
                    implementation="xla", **kw)

    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax.nn, "dot_product_attention", recorder)
    jax.clear_caches()  # a step traced before (by another test) would not call the recorder
    yield calls
    jax.clear_caches()  # nor keep this test's "gpu" traces for the next


def test_values_narrower_than_the_keys_are_handed_to_cudnn_padded_to_their_width(on_gpu):
    """JAX's call takes one width for q, k and v: latent attention's values (posjax.models.
    latent; DeepSeek-V2's 192-wide q and k, 128-wide values) are padded with zeros to the
    keys' width and the output cut back to the values'."""
    from posjax.attention import fused

    shape = (2, 16, 3, 12)
    q, k = (jax.random.normal(jax.random.key(i), shape, jnp.bfloat16) for i in (0, 1))
    v = jax.random.normal(jax.random.key(2), (*shape[:3], 8), jnp.bfloat16)
    out = fused.fused(q, k, v, q_seg=None, k_seg=None, causal=True, scale=12 ** -0.5)
    (call,) = on_gpu
    assert call["implementation"] == "cudnn"
    assert call["query"] == call["key"] == call["value"] == shape
    assert out.shape == v.shape
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) / 12 ** 0.5
    scores = jnp.where(jnp.tril(jnp.ones((16, 16), bool)), scores, -jnp.inf)
    want = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, -1), v.astype(jnp.float32))
    np.testing.assert_allclose(np.asarray(out, np.float32), want, atol=3e-2)


def _trace(encoding: str, packing: str, seeds: int):
    """Lower (trace, not compile) the trainer's step of the main job's model on `seeds`
    seeds (train_steps when > 1), with the data laid out by `packing`."""
    config = load_config_module("configs/lm.py").get_config(
        f"encoding={encoding},size=smoke,seq_len=32,batch_size=4")
    config.data.packing = packing
    experiment = Experiment.from_config(config)
    model = experiment.build()
    tx = optim.optimizer(config.train, experiment.total_steps)
    states = [initial_state(model.params, tx, k) for k in range(seeds)]
    spec = experiment.batch_spec()
    lead = (seeds,) if seeds > 1 else ()
    batch = {k: jax.ShapeDtypeStruct(lead + a.shape, a.dtype) for k, a in spec.arrays.items()}
    step, state, rest = ((train_steps, stack_seeds(states), stack_seeds([model.rest] * seeds))
                         if seeds > 1 else (train_step, states[0], model.rest))
    step.lower(state, rest, batch, **step_options(experiment, model.graphdef, tx))
    return experiment


def _check_cudnn_call(call: dict, batch: int, heads: int, bias_batch: int | None = None) -> None:
    """A mask at [B, H, L, L] or none; a bias at [bias_batch, H, L, L] (default B) or none."""
    q_batch, length, q_heads = call["query"][:3]
    assert (q_batch, q_heads) == (batch, heads)
    assert call["implementation"] == "cudnn" and call["dtype"] == jnp.bfloat16
    full = (batch, heads, length, length)
    assert call["mask"] in (None, full), f"mask {call['mask']} is not {full} or None"
    expected = (batch if bias_batch is None else bias_batch, heads, length, length)
    assert call["bias"] in (None, expected), f"bias {call['bias']} is not {expected} or None"
    if call["bias"] is not None:
        assert call["bias_dtype"] == jnp.bfloat16


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_vmapped_seeds_hand_cudnn_full_masks_and_biases(on_gpu, encoding):
    """The main job's layout (packed documents: a segment mask is needed), seeds vmapped."""
    experiment = _trace(encoding, "documents", SEEDS)
    cfg = experiment.model_config
    assert len(on_gpu) >= cfg.num_layers
    for call in on_gpu:
        _check_cudnn_call(call, 4, cfg.num_heads)
        assert call["mask"] is not None and call["is_causal"]
        assert (call["bias"] is not None) == (encoding in BIASED)


@pytest.mark.parametrize("seeds", [1, SEEDS])
@pytest.mark.parametrize("encoding", ["rope", "t5", "alibi"])
def test_whole_rows_hand_cudnn_no_mask(on_gpu, encoding, seeds):
    """Rows cut from a stream: is_causal alone, no mask, in the lone and the vmapped step; the
    bias built once goes as [1, H, L, L] in a lone step (cuDNN sums its gradient over the
    batch) and at the full shape only where the seeds' vmap needs it."""
    experiment = _trace(encoding, "stream", seeds)
    assert experiment.whole_rows and on_gpu
    for call in on_gpu:
        _check_cudnn_call(call, 4, experiment.model_config.num_heads,
                          bias_batch=None if seeds > 1 else 1)
        assert call["mask"] is None and call["is_causal"]
        assert (call["bias"] is not None) == (encoding in BIASED)


@pytest.mark.parametrize("encoding", ["alibi", "t5"])
def test_lone_step_with_packed_rows_hands_a_full_mask(on_gpu, encoding):
    """Packed documents, one run: the segment mask at [B, H, L, L]; the bias of an encoding
    that reads only k_pos - q_pos is built once and goes as [1, H, L, L]."""
    experiment = _trace(encoding, "documents", 1)
    assert on_gpu
    for call in on_gpu:
        _check_cudnn_call(call, 4, experiment.model_config.num_heads, bias_batch=1)
        assert call["mask"] is not None and call["bias"] is not None


def test_stream_rows_are_whole_and_cut_from_the_concatenated_documents(small_data):
    """data.packing="stream": every row one segment at positions 0..L-1, no padding, the
    targets the next token of the stream (the last token of a row has no target)."""
    config = load_config_module("configs/lm.py").get_config("size=smoke,seq_len=16,batch_size=3")
    config.data.update(small_data, packing="stream")
    experiment = Experiment.from_config(config)
    batch = next(experiment.train_iterator(experiment.stages[0]))
    assert batch["inputs"].shape == (3, 16)
    np.testing.assert_array_equal(batch["segment_ids"], 1)
    np.testing.assert_array_equal(batch["positions"], np.broadcast_to(np.arange(16), (3, 16)))
    np.testing.assert_array_equal(batch["targets"][:, :-1], batch["inputs"][:, 1:])
    np.testing.assert_array_equal(batch["weights"][:, -1], 0)
    assert batch["weights"][:, :-1].all()


@pytest.mark.parametrize("encoding,packing,train,shared", [
    ("t5", "documents", {}, True), ("alibi", "stream", {}, True),
    ("kerple_log", "documents", {}, True), ("none", "documents", {}, True),
    ("fire", "documents", {}, False), ("rope", "documents", {}, False),
    ("t5", "documents", {"randomize_positions": 64}, False),
    ("t5", "documents", {"pose": 64}, False)])
def test_one_row_of_positions_where_the_config_allows_it(encoding, packing, train, shared):
    """Experiment.shared_positions: an encoding that reads only k_pos - q_pos, on packed
    documents or a stream, and no transform drawing each row its own positions."""
    config = load_config_module("configs/lm.py").get_config(
        f"encoding={encoding},size=smoke,seq_len=32,batch_size=4")
    config.data.packing = packing
    config.train.update(train)
    experiment = Experiment.from_config(config)
    assert experiment.shared_positions == shared
    assert step_options(experiment, None, None)["shared_positions"] == shared


@pytest.mark.parametrize("encoding", ["t5", "kerple_log"])
def test_train_step_on_one_row_of_positions_is_the_per_row_step(small_data, encoding,
                                                                  monkeypatch):
    """On packed documents (positions restarting in every segment), the step that hands the
    model one row of positions computes the same loss, gradients and new parameters, and
    builds the bias without the batch axis (here on the CPU too, where the platform gate
    otherwise keeps each row's own)."""
    monkeypatch.setattr(steps, "SHARED_POSITIONS_PLATFORMS", frozenset({jax.default_backend()}))
    jax.clear_caches()  # a step traced before the patch would keep each row's positions
    config = load_config_module("configs/lm.py").get_config(
        f"encoding={encoding},size=smoke,seq_len=64,batch_size=4")
    config.data.update(small_data, packing="documents")
    experiment = Experiment.from_config(config)
    assert experiment.shared_positions
    model = experiment.build()
    tx = optim.optimizer(config.train, experiment.total_steps)
    batch = dict(next(experiment.train_iterator(experiment.stages[0])))
    # Packed as three documents and padding, positions restarting in each.
    cuts = np.cumsum([0, 20, 30, 10])
    batch["segment_ids"] = np.zeros((4, 64), np.int32)
    batch["positions"] = np.zeros((4, 64), np.int32)
    for segment, (start, stop) in enumerate(zip(cuts[:-1], cuts[1:], strict=True), 1):
        batch["segment_ids"][:, start:stop] = segment
        batch["positions"][:, start:stop] = np.arange(stop - start)
    batch["weights"] = batch["weights"] * (batch["segment_ids"] > 0)
    options = step_options(experiment, model.graphdef, tx)
    results = {}
    for shared in (True, False):
        step = functools.partial(train_step, **{**options, "shared_positions": shared})
        state = initial_state(jax.tree.map(jnp.copy, model.params), tx, 0)  # donated
        avals = _intermediate_avals(jax.make_jaxpr(step)(state, model.rest, batch).jaxpr)
        results[shared] = step(state, model.rest, batch), avals
    (new_shared, sums_shared), avals_shared = results[True]
    (new_rows, sums_rows), avals_rows = results[False]
    # Not the key projection's bias: its gradient is zero in exact arithmetic (it adds one
    # constant to all of a query's scores, which the softmax cancels), so its first AdamW
    # update is lr times the sign of rounding noise, which any two ways of computing the
    # same step may round otherwise (XLA:CPU's older fusion emitters do here).
    # The encoding's own gradient (AdamW's moments of enc_params) sums dS times the bias's
    # derivative over every pair, and dS sums to zero along each query's row, so that sum is
    # a small remainder of cancelling terms: the two steps add them in other orders, which on
    # one H200 put KERPLE's `a` 0.36 % apart (experiments/bench/nvidia-h200/call8_end).
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path((new_shared, sums_shared))[0],
                            jax.tree.leaves((new_rows, sums_rows)), strict=True):
        name = jax.tree_util.keystr(path)
        if "['key']['bias']" not in name:
            rtol = 2e-2 if "opt_state" in name and "enc_params" in name else 2e-5
            np.testing.assert_allclose(a, b, rtol=rtol, atol=2e-6, err_msg=name)
    # What only one of the steps computes: per-example [4, ..., 64, 64, ...] pair terms in
    # the per-row step, and nothing with the batch axis in the other. By shape and dtype: on
    # a GPU both steps hold the document mask as bool [4, 1, 64, 64] and, folded into
    # cuDNN's bias, bfloat16 [4, H, 64, 64]: by shape alone these hid KERPLE's per-row
    # float32 distances and bias (H200, call 9 in experiments/bench/nvidia-h200).
    assert {s for s, _ in avals_rows - avals_shared if s[:1] == (4,) and s.count(64) >= 2}
    assert not {s for s, _ in avals_shared - avals_rows if s[:1] == (4,)}


def _intermediate_avals(jaxpr) -> set[tuple[tuple[int, ...], str]]:
    """The (shape, dtype) of every value a jaxpr (and the jaxprs inside it) computes."""
    avals = set()
    for eqn in jaxpr.eqns:
        avals.update((tuple(v.aval.shape), str(v.aval.dtype)) for v in eqn.outvars
                     if hasattr(v.aval, "shape"))
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            avals |= _intermediate_avals(sub)
    return avals


@pytest.mark.parametrize("rows", [260, ONE_HOT_MAX_ROWS + 1])
def test_small_tables_are_read_by_a_one_hot_product_on_an_accelerator(monkeypatch, rows):
    """TableEmbed with the backend reading "gpu": nnx.Embed's values and gradient, and for a
    table of at most ONE_HOT_MAX_ROWS rows (a byte vocabulary) no gather, so no scatter-add
    in the gradient; a larger table keeps the gather."""
    tokens = jax.random.randint(jax.random.key(1), (3, 7), 0, rows)
    weights = jax.random.normal(jax.random.key(2), (3, 7, 8))

    def value_and_grad(module):
        def loss(table):
            return jnp.sum(jnp.sin(_with_table(module, table)(tokens)) * weights)
        return jax.value_and_grad(loss)(module.embedding[...])

    reference = value_and_grad(nnx.Embed(rows, 8, rngs=nnx.Rngs(0)))
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    embed = TableEmbed(rows, 8, rngs=nnx.Rngs(0))
    result = value_and_grad(embed)
    for a, b in zip(result, reference, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    grad_jaxpr = jax.make_jaxpr(lambda t: value_and_grad(_with_table(embed, t)))(
        embed.embedding[...])
    # Read as text, as test_encoders_relative reads T5's: the printed jaxpr holds the inner ones.
    gathers = "gather" in str(grad_jaxpr) or "scatter" in str(grad_jaxpr)
    assert gathers == (rows > ONE_HOT_MAX_ROWS)


def _with_table(module, table):
    """The module with its embedding replaced by `table` (a traced value)."""
    module = nnx.clone(module)
    module.embedding = nnx.Param(table)
    return module
