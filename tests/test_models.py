"""Models: every valid (encoding, kind) pair trains; invalid pairs fail at construction;
relative vs absolute behaviour under a position shift; packing; dtypes; dropout; the pure
jit-over-split-state pattern the trainer uses.

Every test uses the same tiny shapes (B, L, dims below) and most run eagerly, so a primitive
is compiled once for the whole file rather than a whole model once per encoding.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import encoders
from posjax.attention import check_compatible
from posjax.errors import ConfigError
from posjax.models import KINDS, ModelConfig, abstract_model, build_model, layers
from posjax.models.layers import GeGLUMLP, SwiGLUMLP, gated, gelu, matrix_dot_general

B, L, V, CLASSES, PATCH_DIM, GRID = 2, 16, 64, 5, 12, 4
MAX_LEN = 32  # room to shift positions of a length-L batch inside learned tables
# float32 on every device: these tests compare numbers (dtype="auto" is bfloat16 on a GPU).
CFG = dict(d_model=32, num_layers=2, num_heads=2, head_dim=16, mlp_dim=64, grid_width=GRID,
           dtype="float32")


def _valid(name: str, kind: str) -> bool:
    """Whether build_model should accept (name, kind): 2-D encodings only in the patch
    model, and whatever check_compatible accepts for the kind's attention."""
    encoding = encoders.get(name)
    axes = encoding.position_axes
    if axes is not None and (kind != "patch2d" or axes != 2):
        return False
    try:
        check_compatible(encoding, "dense", kind == "causal_lm")
    except ConfigError:
        return False
    return True


# The built-in kinds (tests/test_extending.py registers a toy one in the same process).
BUILT_IN_KINDS = ("causal_lm", "mlm", "patch2d")
PAIRS = [(n, k) for n in encoders.names() for k in BUILT_IN_KINDS]
INVALID = [p for p in PAIRS if not _valid(*p)]
# The patch model hands a 1-D encoding its positions through two encoding-agnostic paths
# (axial input site, raster index at the attention sites) and otherwise runs the same
# bidirectional blocks as the MLM encoder, which the sweep trains with every encoding; one
# 1-D encoding per site type (input: learned, sinusoidal; bias: t5; value terms: shaw;
# rotation: rope) covers those paths.
PATCH_1D = ("learned", "sinusoidal", "t5", "shaw", "rope")
VALID = [
    (n, k)
    for n, k in PAIRS
    if _valid(n, k)
    and (k != "patch2d" or n in PATCH_1D or encoders.get(n).position_axes is not None)
]


def _build(name, kind, hparams=(), rngs=None, **overrides):
    return build_model(
        dict(CFG, **overrides),
        encoders.get(name, **dict(hparams)),
        kind=kind,
        vocab_size=V,
        num_classes=CLASSES,
        patch_dim=PATCH_DIM,
        max_len=MAX_LEN,
        rngs=rngs or nnx.Rngs(0),
    )


@functools.cache
def _model(name, kind, hparams=(), **overrides):
    """A shared model for tests that only read it (never pass it to an optimizer)."""
    return _build(name, kind, hparams, **overrides)


def _batch(kind: str) -> dict:
    """A fixed batch: the copy task (targets = inputs) for LMs, random labels for patches."""
    k_in, k_y = jax.random.split(jax.random.key(1))
    positions = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
    batch = {"segment_ids": jnp.ones((B, L), jnp.int32)}
    if kind == "patch2d":
        batch["inputs"] = jax.random.normal(k_in, (B, L, PATCH_DIM))
        batch["positions"] = jnp.stack([positions // GRID, positions % GRID], axis=-1)
        batch["targets"] = jax.random.randint(k_y, (B,), 0, CLASSES)
    else:
        batch["inputs"] = jax.random.randint(k_in, (B, L), 0, V)
        batch["positions"] = positions
        batch["targets"] = batch["inputs"]
    return batch


BATCHES = {kind: _batch(kind) for kind in BUILT_IN_KINDS}


def _logits(model, batch, **kw):
    return model(batch["inputs"], batch["positions"], batch["segment_ids"], **kw)


def _loss(model, batch):
    logits = _logits(model, batch)
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"]).mean()


def _encoding_params(state) -> dict:
    """{path: array} of the encoding's parameters in a model's (or grads') Param state."""
    return {
        path: v[...]
        for path, v in nnx.to_flat_state(state)
        if "enc_params" in path or "input_site" in path
    }


def test_pairs_cover_every_encoding_and_kind():
    # The names registered when PAIRS was built: a test module imported later may add its own.
    assert {n for n, _ in VALID} == {n for n, _ in PAIRS}
    assert {k for _, k in VALID} == set(BUILT_IN_KINDS) and set(BUILT_IN_KINDS) <= set(KINDS)
    assert ("alibi", "mlm") in INVALID and ("rope2d", "causal_lm") in INVALID


@pytest.mark.parametrize("name,kind", VALID)
def test_one_adamw_step_lowers_the_loss(name, kind):
    model = _build(name, kind)
    batch = BATCHES[kind]
    optimizer = nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)
    before, grads = nnx.value_and_grad(_loss)(model, batch)
    optimizer.update(model, grads)
    after = _loss(model, batch)
    assert np.isfinite(before) and after < before


@pytest.mark.parametrize("name,kind", INVALID)
def test_invalid_pairs_fail_at_construction(name, kind):
    with pytest.raises(ConfigError, match=f"'{name}'"):
        _build(name, kind)


@pytest.mark.parametrize(
    "name,kind,overrides,message",
    [
        ("alibi", "causal_lm", {"attention": "linear"}, "linear attention never forms"),
        ("t5", "mlm", {"attention": "linear"}, "linear attention never forms"),
        ("xpos", "mlm", {}, "only for causal attention"),
        ("fire", "patch2d", {}, "only for causal attention"),
        ("rope2d", "causal_lm", {}, "use kind='patch2d'"),
    ],
)
def test_incompatible_choices_name_the_problem(name, kind, overrides, message):
    with pytest.raises(ConfigError, match=message):
        _build(name, kind, **overrides)


def test_encoding_params_live_in_the_model_and_train():
    batch = BATCHES["causal_lm"]
    # Input site: one model-level copy, nothing per layer.
    learned = _build("learned", "causal_lm")
    enc = _encoding_params(nnx.state(learned, nnx.Param))
    assert [p[-1] for p in enc] == ["table"] and enc[next(iter(enc))].shape == (MAX_LEN, 32)
    # Attention sites: one copy per layer, drawn with different keys.
    t5 = _build("t5", "causal_lm")
    enc = _encoding_params(nnx.state(t5, nnx.Param))
    assert len(enc) == CFG["num_layers"]
    first, second = enc.values()
    assert not np.allclose(first, second)

    # Both copies get gradients; the model-level one also trains under nnx.jit + Optimizer.
    grads = _encoding_params(nnx.jit(nnx.grad(_loss))(t5, batch))
    assert all(np.abs(g).max() > 0 for g in grads.values())

    @nnx.jit
    def train_step(model, optimizer, batch):
        optimizer.update(model, nnx.grad(_loss)(model, batch))

    before = _encoding_params(nnx.state(learned, nnx.Param))
    train_step(learned, nnx.Optimizer(learned, optax.adamw(1e-2), wrt=nnx.Param), batch)
    after = _encoding_params(nnx.state(learned, nnx.Param))
    assert all(np.abs(after[p] - before[p]).max() > 0 for p in before)


def test_patch_model_encodes_rows_and_columns_with_their_own_tables():
    model = _model("learned", "patch2d")
    tables = _encoding_params(nnx.state(model, nnx.Param))
    assert [t.shape for t in tables.values()] == [(MAX_LEN, 16), (MAX_LEN, 16)]
    # (row, col) and (col, row) differ even for a parameter-free encoding.
    sin = _model("sinusoidal", "patch2d")
    batch = BATCHES["patch2d"]
    swapped = dict(batch, positions=batch["positions"][..., ::-1])
    assert np.abs(_logits(sin, batch) - _logits(sin, swapped)).max() > 1e-4


SHIFT_INVARIANT = [("t5", ()), ("alibi", ()), ("rope", ()), ("deberta", ())]
SHIFT_SENSITIVE = [
    ("learned", ()),
    ("sinusoidal", ()),
    ("tupe", ()),  # its untied term reads absolute positions
    ("deberta", (), 1),  # model.absolute_last_layers: the enhanced mask decoder's table
]


@settings(max_examples=5, deadline=None)
@given(shift=st.integers(1, MAX_LEN - L))
@pytest.mark.parametrize("name,hparams", SHIFT_INVARIANT)
def test_relative_encodings_ignore_a_position_shift(name, hparams, shift):
    model = _model(name, "causal_lm", hparams)
    batch = BATCHES["causal_lm"]
    shifted = dict(batch, positions=batch["positions"] + shift)
    np.testing.assert_allclose(_logits(model, batch), _logits(model, shifted), atol=1e-4)


@pytest.mark.parametrize("name,hparams,absolute_last_layers",
                         [(*case, 0)[:3] for case in SHIFT_SENSITIVE])
def test_absolute_encodings_see_a_position_shift(name, hparams, absolute_last_layers):
    model = _model(name, "causal_lm", hparams, absolute_last_layers=absolute_last_layers)
    batch = BATCHES["causal_lm"]
    shifted = dict(batch, positions=batch["positions"] + 5)
    assert np.abs(_logits(model, batch) - _logits(model, shifted)).max() > 1e-3


def _packed(batch, segments):
    """The batch with segment ids `segments` (a list of ids per token, 0 = padding) and
    positions restarting at 0 in every segment, as the packer emits them."""
    seg = np.asarray(segments, np.int32)
    starts = np.r_[True, seg[1:] != seg[:-1]]
    pos = np.arange(L) - np.maximum.accumulate(np.where(starts, np.arange(L), 0))
    return dict(
        batch,
        segment_ids=jnp.broadcast_to(jnp.asarray(seg), (B, L)),
        positions=jnp.broadcast_to(jnp.asarray(pos, jnp.int32), (B, L)),
    )


# Each site type (bias: t5, value terms: shaw, rotation: rope) in each kernel and direction.
@pytest.mark.parametrize(
    "kind,name,impl",
    [
        ("mlm", "t5", "dense"),
        ("mlm", "shaw", "chunked"),
        ("causal_lm", "shaw", "dense"),
        ("causal_lm", "t5", "chunked"),
        ("causal_lm", "rope", "linear"),
    ],
)
def test_packed_segments_do_not_leak(kind, name, impl):
    model = _model(name, kind, attention=impl, block_size=4)
    segments = [1] * 7 + [2] * 6 + [0] * 3
    batch = _packed(BATCHES[kind], segments)
    seg = np.asarray(segments)
    # Change one segment's tokens (and the padding): the other segment must not notice.
    # A causal model cannot look ahead anyway, so there segment 1 is the one changed.
    changed, kept = (2, 1) if kind == "mlm" else (1, 2)
    edit = jnp.asarray((seg == changed) | (seg == 0))
    other = dict(batch, inputs=jnp.where(edit, (batch["inputs"] + 7) % V, batch["inputs"]))
    # One compiled forward for both batches (eagerly, the chunked and linear kernels would
    # re-trace their scans on every call).
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda s, b: _logits(nnx.merge(graphdef, s), b))
    a, b = forward(state, batch), forward(state, other)
    np.testing.assert_allclose(a[:, seg == kept], b[:, seg == kept], atol=1e-5)
    assert np.abs(a[:, seg == changed] - b[:, seg == changed]).max() > 1e-4


def test_pooled_output_ignores_padding_patches():
    for name in ("learned", "rope2d"):
        model = _model(name, "patch2d")
        batch = _packed(BATCHES["patch2d"], [1] * 12 + [0] * 4)
        batch["positions"] = BATCHES["patch2d"]["positions"]
        noise = dict(batch, inputs=batch["inputs"].at[:, 12:].set(9.0))
        assert _logits(model, batch).shape == (B, CLASSES)
        np.testing.assert_allclose(_logits(model, batch), _logits(model, noise), atol=1e-5)


def test_per_patch_output_has_one_prediction_per_patch():
    model = _model("t5", "patch2d", output="per_patch")
    assert _logits(model, BATCHES["patch2d"]).shape == (B, L, CLASSES)


def test_bfloat16_compute_gives_finite_float32_logits():
    batch = BATCHES["causal_lm"]
    # bfloat16 activations over the float32 model's weights: close to its logits.
    mixed = _logits(_model("t5", "causal_lm", dtype="bfloat16"), batch)
    assert mixed.dtype == jnp.float32
    np.testing.assert_allclose(mixed, _logits(_model("t5", "causal_lm"), batch), atol=0.1)
    # bfloat16 weights too, except the encoding's (positions stay exact).
    model = _model("t5", "causal_lm", dtype="bfloat16", param_dtype="bfloat16")
    logits = _logits(model, batch)
    assert logits.dtype == jnp.float32 and np.isfinite(logits).all()
    params = nnx.state(model, nnx.Param)
    enc = _encoding_params(params)
    dtypes = {v[...].dtype for path, v in nnx.to_flat_state(params) if path not in enc}
    assert dtypes == {jnp.dtype(jnp.bfloat16)}
    assert {v.dtype for v in enc.values()} == {jnp.dtype(jnp.float32)}


def test_jit_over_split_state_matches_eager_and_trains():
    """The trainer's pattern: a pure jitted step over nnx.split state, dropout keyed per step."""
    model = _build("t5", "causal_lm", rngs=nnx.Rngs(params=0, dropout=1), dropout=0.1)
    batch = BATCHES["causal_lm"]
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda s, t, p, g: nnx.merge(graphdef, s)(t, p, g))
    np.testing.assert_allclose(
        forward(state, batch["inputs"], batch["positions"], batch["segment_ids"]),
        _logits(model, batch),
        atol=1e-5,
    )

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    tx = optax.adamw(1e-2)

    def loss_fn(params, rest, batch, key):
        m = nnx.merge(graphdef, params, rest)
        logits = _logits(m, batch, deterministic=False, rngs=nnx.Rngs(dropout=key))
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"]).mean()

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(params, opt_state, rest, batch, key):
        loss, grads = jax.value_and_grad(loss_fn)(params, rest, batch, key)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    opt_state = tx.init(params)
    losses = []
    for i in range(3):
        params, opt_state, loss = step(params, opt_state, rest, batch, jax.random.key(i))
        losses.append(float(loss))
    assert losses[-1] < losses[0]
    nnx.update(model, params)
    assert np.isfinite(_logits(model, batch)).all()


def test_dropout_only_when_not_deterministic():
    model = _build("rope", "mlm", rngs=nnx.Rngs(params=0, dropout=1), dropout=0.3)
    batch = BATCHES["mlm"]
    clean = _logits(model, batch)
    np.testing.assert_array_equal(clean, _logits(model, batch, deterministic=True))
    first = _logits(model, batch, deterministic=False)
    second = _logits(model, batch, deterministic=False)  # the model's stream moved on
    assert np.abs(first - clean).max() > 1e-3 and np.abs(first - second).max() > 1e-3
    keyed = [_logits(model, batch, deterministic=False, rngs=nnx.Rngs(dropout=7)) for _ in range(2)]
    np.testing.assert_array_equal(*keyed)
    with pytest.raises(ConfigError, match="'dropout' rng stream"):
        _build("rope", "mlm", rngs=nnx.Rngs(params=0), dropout=0.3)


def test_rmsnorm_swiglu_and_tied_embeddings():
    model = _model("rope", "causal_lm", norm="rmsnorm", mlp="swiglu", tie_embeddings=True)
    assert model.head is None
    assert _logits(model, BATCHES["causal_lm"]).shape == (B, L, V)


def test_grouped_query_attention_is_multi_head_attention_with_shared_key_value_heads():
    # One key/value head serving both query heads = two heads holding the same k and v weights.
    grouped = _build("rope", "causal_lm", num_kv_heads=1)
    full = _build("rope", "causal_lm")
    assert grouped.backbone.layers[0].attn.key.kernel.shape == (CFG["d_model"], 1, 16)
    grouped_values = {path: var[...] for path, var in nnx.to_flat_state(nnx.state(grouped))}
    for path, var in nnx.to_flat_state(nnx.state(full)):
        shared = path[-2] in ("key", "value") and "attn" in path
        value = grouped_values[path]
        var.set_value(jnp.repeat(value, CFG["num_heads"], axis=-2) if shared else value)
    batch = BATCHES["causal_lm"]
    np.testing.assert_allclose(_logits(grouped, batch), _logits(full, batch), atol=1e-5)


def test_parallel_residual_feeds_the_block_input_to_both_branches():
    model = _build("rope", "causal_lm", parallel_residual=True)
    block, batch = model.backbone.layers[0], BATCHES["causal_lm"]
    x = jax.random.normal(jax.random.key(3), (B, L, CFG["d_model"]))
    attended = block.attn(block.attn_norm(x), batch["positions"], batch["segment_ids"])
    expected = x + attended + block.mlp(block.mlp_norm(x))
    np.testing.assert_allclose(block(x, batch["positions"], batch["segment_ids"]), expected,
                               atol=1e-5)


def test_bias_switches_remove_exactly_their_parameters():
    def biases(model):
        return {"/".join(map(str, path)) for path, _ in
                nnx.to_flat_state(nnx.state(model, nnx.Param)) if path[-1] == "bias"}

    every = biases(_build("rope", "causal_lm"))
    none = biases(_build("rope", "causal_lm", qkv_bias=False, attn_out_bias=False,
                         mlp_bias=False, head_bias=False))
    assert {b.split("/")[-2] for b in every - none} == {"query", "key", "value", "out", "up",
                                                        "down", "head"}
    assert all("norm" in b for b in none)
    swiglu = biases(_build("rope", "causal_lm", mlp="swiglu", mlp_bias=True))
    assert {b.split("/")[-2] for b in swiglu if "/mlp/" in b} == {"gate", "up", "down"}


@pytest.mark.parametrize("parallel", [False, True])
def test_post_norms_norm_each_sublayers_output_before_it_joins(parallel):
    """model.post_norm (Gemma 2, 3) adds a norm after attention and after the MLP, each
    before the residual add: with their scales zero a layer passes its input through."""
    model = _build("rope", "causal_lm", norm="rmsnorm", post_norm=True,
                   parallel_residual=parallel)
    layer = model.backbone.layers[0]
    x = jax.random.normal(jax.random.key(1), (B, L, CFG["d_model"]))
    positions = jnp.broadcast_to(jnp.arange(L), (B, L))
    assert np.abs(layer(x, positions, None) - x).max() > 0.1
    for norm in (layer.attn_post_norm, layer.mlp_post_norm):
        norm.scale[...] = jnp.zeros_like(norm.scale[...])
    np.testing.assert_array_equal(layer(x, positions, None), x)
    plain = nnx.state(_build("rope", "causal_lm", norm="rmsnorm"), nnx.Param)
    added = {path for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))} - {
        path for path, _ in nnx.to_flat_state(plain)}
    assert {path[3:] for path in added} == {("attn_post_norm", "scale"),
                                            ("mlp_post_norm", "scale")}


def test_norm_eps_and_exact_gelu():
    model = _build("rope", "causal_lm", norm="rmsnorm", norm_eps=1e-5, mlp="gelu_exact")
    assert model.backbone.final_norm.epsilon == 1e-5
    assert model.backbone.layers[0].attn_norm.epsilon == 1e-5
    mlp, x = model.backbone.layers[0].mlp, jax.random.normal(jax.random.key(4), (1, 3, 32))
    exact = mlp.down(jax.nn.gelu(mlp.up(x), approximate=False))
    np.testing.assert_allclose(mlp(x), exact, atol=1e-6)


@pytest.mark.parametrize("kind", ["causal_lm", "mlm"])
def test_embed_scale_multiplies_token_embeddings_by_sqrt_d_model(kind):
    # Same init (same rngs), so the scaled model equals the plain one whose embedding table
    # is multiplied by sqrt(d_model), except where the table is also the tied output head.
    batch = BATCHES[kind]
    plain, scaled = _build("sinusoidal", kind), _build("sinusoidal", kind, embed_scale=True)
    h_scaled = scaled.hidden(batch["inputs"], batch["positions"], batch["segment_ids"],
                             deterministic=True, rngs=None)
    plain.embed.embedding[...] = plain.embed.embedding[...] * np.sqrt(CFG["d_model"])
    h_plain = plain.hidden(batch["inputs"], batch["positions"], batch["segment_ids"],
                           deterministic=True, rngs=None)
    np.testing.assert_allclose(np.asarray(h_scaled), np.asarray(h_plain), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "overrides,kwargs,message",
    [
        ({"dropuot": 0.1}, {}, "did you mean 'dropout'"),
        ({"norm": "batchnorm"}, {}, "unknown model.norm"),
        ({"mlp": "relu"}, {}, "unknown model.mlp"),
        ({"attention": "flash"}, {}, "unknown attention implementation"),
        ({"d_model": 30, "num_heads": 4, "head_dim": None}, {}, "not divisible by num_heads"),
        ({}, {"kind": "seq2seq"}, "unknown model.kind"),
        ({}, {"vocab_size": None}, "needs build_model"),
        ({"grid_width": None}, {"kind": "patch2d", "name": "t5"}, "set model.grid_width"),
        ({"output": "cls"}, {"kind": "patch2d"}, "unknown model.output"),
        ({"absolute_last_layers": 3}, {"name": "deberta"}, "use 0..2"),
        ({"num_kv_heads": 3}, {}, "num_kv_heads=3 does not divide num_heads=2"),
        ({"norm_eps": 0.0}, {}, "norm_eps=0.0 must be > 0"),
    ],
)
def test_bad_config_is_a_one_line_error(overrides, kwargs, message):
    args = dict(name="rope", kind="causal_lm", vocab_size=V, hparams=()) | kwargs
    with pytest.raises(ConfigError, match=message) as err:
        build_model(
            dict(CFG, **overrides),
            encoders.get(args["name"], **dict(args["hparams"])),
            kind=args["kind"],
            vocab_size=args["vocab_size"],
            num_classes=CLASSES,
            patch_dim=PATCH_DIM,
            max_len=MAX_LEN,
            rngs=nnx.Rngs(0),
        )
    assert "\n" not in str(err.value)


def test_model_config_reads_a_config_dict():
    cfg = ModelConfig.from_config(ml_collections.ConfigDict(dict(CFG, mlp="swiglu")))
    assert cfg.mlp == "swiglu" and cfg.resolved_head_dim == 16 and cfg.resolved_mlp_dim == 64
    assert ModelConfig(d_model=64, num_heads=4).resolved_head_dim == 16


@pytest.mark.parametrize("name", ["tupe", "t5"])
def test_shared_position_params_are_one_copy_that_trains(name):
    # T5's and TUPE's code compute the position term once for every layer.
    own, shared = _build(name, "causal_lm"), _build(name, "causal_lm", share_position_params=True)
    count = lambda m: sum(x.size for x in jax.tree.leaves(nnx.state(m, nnx.Param)))  # noqa: E731
    one_copy = sum(x.size for x in jax.tree.leaves(shared.backbone.layers[0].attn.enc_params))
    assert one_copy > 0 and count(own) - count(shared) == (CFG["num_layers"] - 1) * one_copy
    first, second = (layer.attn.enc_params for layer in shared.backbone.layers)
    assert all(a is b for a, b in zip(jax.tree.leaves(first, is_leaf=lambda v: isinstance(
        v, nnx.Variable)), jax.tree.leaves(second, is_leaf=lambda v: isinstance(v, nnx.Variable)),
        strict=True))
    batch = BATCHES["causal_lm"]
    optimizer = nnx.Optimizer(shared, optax.adamw(1e-2), wrt=nnx.Param)
    before, grads = nnx.value_and_grad(_loss)(shared, batch)
    optimizer.update(shared, grads)
    assert np.isfinite(before) and _loss(shared, batch) < before


@pytest.mark.parametrize("name,overrides", [("rope", {}), ("t5", {"share_position_params": True}),
                                            ("learned", {"dropout": 0.1})])
def test_abstract_model_is_eval_shapes_model_with_plain_variables(name, overrides):
    """abstract_model builds through array refs (jax-ml/jax#40041) and hands back what
    nnx.eval_shape would: the same graph (shared tables one copy), shapes and plain variables."""
    make = functools.partial(_build, name, "causal_lm", **overrides)
    ours, theirs = (nnx.split(m) for m in (abstract_model(make), nnx.eval_shape(make)))
    assert ours[0] == theirs[0]
    assert jax.tree.map(lambda a: (a.shape, a.dtype), ours[1]) == jax.tree.map(
        lambda a: (a.shape, a.dtype), theirs[1])
    variables = jax.tree.leaves(ours[1], is_leaf=lambda v: isinstance(v, nnx.Variable))
    assert variables and not any(v.ref for v in variables)


def test_long_evaluation_rows_run_the_mlp_over_token_blocks(monkeypatch):
    """Past EVAL_MLP_BLOCK tokens (16 here) evaluation maps the MLP over blocks of tokens
    in turn (the last one padded): the same logits as one pass, to float rounding."""
    from posjax.models import layers

    fn = lambda h: jnp.tanh(h @ jnp.ones((3, 5)))
    x = jax.random.normal(jax.random.key(0), (2, 37, 3))
    np.testing.assert_allclose(layers.token_blocks(fn, x, 8), fn(x), rtol=1e-6, atol=1e-6)

    model = _model("rope", "causal_lm")
    batch = BATCHES["causal_lm"]
    long = {k: jnp.concatenate([v, v, v], axis=1) for k, v in batch.items()}
    whole = _logits(model, long)
    monkeypatch.setattr(layers, "EVAL_MLP_BLOCK", L)
    blocked = _logits(model, long)
    np.testing.assert_allclose(blocked, whole, rtol=1e-5, atol=1e-5)


# --- the encoder contract, checked where a model is built -----------------------------------


@dataclasses.dataclass(frozen=True)
class _FlatBias(encoders.Encoding):
    """A bias without its head axis: [Lq, Lk] (broadcast silently over heads before)."""

    name = "flat_bias"
    layout: str = "qk"

    def bias(self, params, q_pos, k_pos, num_heads):
        distance = -jnp.abs(k_pos[None, :] - q_pos[:, None]).astype(jnp.float32)
        if self.layout == "qkh":
            return jnp.repeat(distance[:, :, None], num_heads, axis=-1)
        return distance


@dataclasses.dataclass(frozen=True)
class _IntBias(encoders.Encoding):
    name = "int_bias"
    dtype: str = "int32"

    def bias(self, params, q_pos, k_pos, num_heads):
        return jnp.zeros((num_heads, q_pos.shape[0], k_pos.shape[0]), self.dtype)


@pytest.mark.parametrize(("encoding", "got"), [
    (_FlatBias(), "shape [4, 5]"), (_FlatBias(layout="qkh"), "shape [4, 5, 2]")])
def test_a_bias_of_the_wrong_shape_is_refused_when_the_model_is_built(encoding, got):
    with pytest.raises(ConfigError) as e:
        build_model(ModelConfig(**CFG), encoding, kind="causal_lm", max_len=MAX_LEN,
                    rngs=nnx.Rngs(0), vocab_size=V)
    line = str(e.value)
    assert "\n" not in line and line.startswith(
        f"encoding 'flat_bias': bias returned {got}, expected [H, Lq, Lk] with H=2 heads, "
        "Lq=4, Lk=5 = [2, 4, 5]")


def test_an_integer_bias_is_refused_when_the_model_is_built():
    with pytest.raises(ConfigError, match="encoding 'int_bias': bias returned dtype int32"):
        build_model(ModelConfig(**CFG), _IntBias(), kind="causal_lm", max_len=MAX_LEN,
                    rngs=nnx.Rngs(0), vocab_size=V)


def test_a_bfloat16_bias_is_refused_as_the_contract_says_biases_are_float32():
    """Accepted silently where base.py's contract says float32 and the docs said only "not a
    float" is refused."""
    with pytest.raises(ConfigError) as e:
        build_model(ModelConfig(**CFG), _IntBias(dtype="bfloat16"), kind="causal_lm",
                    max_len=MAX_LEN, rngs=nnx.Rngs(0), vocab_size=V)
    assert str(e.value) == (
        "encoding 'int_bias': bias returned dtype bfloat16, expected float32 (bfloat16 keeps 8 "
        "significant bits: distances from 1024 to 2048 round to multiples of 8); see the "
        "encoder contract in posjax/encoders/base.py")


@dataclasses.dataclass(frozen=True)
class _FixedTable(encoders.Encoding):
    """A bias read from an 8 x 8 table: right at the build's few positions, [H, 8, 8] past."""

    name = "fixed_table"

    def bias(self, params, q_pos, k_pos, num_heads):
        table = -jnp.abs(jnp.arange(8)[None, :] - jnp.arange(8)[:, None]).astype(jnp.float32)
        return jnp.broadcast_to(table, (num_heads, 8, 8))[:, :len(q_pos), :len(k_pos)]


@pytest.mark.parametrize("impl", ["dense", "chunked", "fused"])
def test_a_bias_wrong_only_past_the_builds_lengths_is_refused_where_it_is_called(impl):
    """A bias of a fixed-size table passed the build's check on 4 x 5 positions, then ended
    evaluation at a longer length in a traceback (`add got incompatible shapes for
    broadcasting: (512, 512), (128, 128)`) naming neither the encoding nor the site."""
    block = 12  # the chunked kernel's blocks: longer than the table
    model = build_model(ModelConfig(**CFG, attention=impl, block_size=block), _FixedTable(),
                        kind="causal_lm", max_len=MAX_LEN, rngs=nnx.Rngs(0), vocab_size=V)
    with pytest.raises(ConfigError) as e:
        _logits(model, BATCHES["causal_lm"])
    lq = block if impl == "chunked" else L
    assert str(e.value) == (
        f"encoding 'fixed_table': bias returned shape [2, 8, 8], expected [H, Lq, Lk] at this "
        f"call's lengths, H=2 heads, Lq={lq}, Lk={lq} = [2, {lq}, {lq}]; see the encoder "
        "contract in posjax/encoders/base.py")


@dataclasses.dataclass(frozen=True)
class _BrokenSite(encoders.Encoding):
    """One site that breaks the contract, chosen by `site`: a term of the wrong shape (or,
    for rotate, of another dtype than q and k; for bias, an integer one)."""

    name = "broken"
    site: str = "rotate"

    def __post_init__(self):
        for name in ("embed", "bias", "rotate", "rel_score", "content_score", "mix_logits",
                     "rotate_value"):
            if name != self.site:
                object.__setattr__(self, name, None)
        if self.site == "rotate_value":
            object.__setattr__(self, "unrotate_output", lambda params, out, q_pos, k_pos: out)
        if self.site in ("rotate_none", "rotate_q"):
            object.__setattr__(self, "rotate", getattr(self, self.site))
        if self.site == "content_score":
            object.__setattr__(self, "content_prepare",
                               lambda params, x, q, k, segment_ids: (q, k))

    def embed(self, params, x, positions):
        return x[..., :-1]

    def bias(self, params, q_pos, k_pos, num_heads):
        return jnp.zeros((num_heads, len(q_pos), len(k_pos)), jnp.int32)

    def rotate(self, params, q, k, q_pos, k_pos):
        return q.astype(jnp.float16), k.astype(jnp.float16)

    def rotate_none(self, params, q, k, q_pos, k_pos):  # a rotate that forgot its return
        return None

    def rotate_q(self, params, q, k, q_pos, k_pos):  # a rotate that returned q alone
        return q

    def rel_score(self, params, q, k, q_pos, k_pos, head):
        return (q @ k.T)[..., None]

    def content_score(self, params, logits, ok, q_side, k_side, carry):
        return logits[..., None], carry

    def mix_logits(self, params, logits, bias):
        return logits.sum(0)

    def rotate_value(self, params, v, k_pos):
        return v[..., :-1]


@pytest.mark.parametrize(("site", "message"), [
    ("embed", "embed returned shape [1, 4, 31], expected x's shape [B, L, D] = [1, 4, 32]"),
    ("rotate", "rotate returned dtypes ['float16', 'float16'], expected (q, k) of the dtypes "
               "of q and k = ['float32', 'float32']"),
    ("rel_score", "rel_score returned shape [4, 5, 1], expected [Lq, Lk] for one head with "
                  "Lq=4, Lk=5 = [4, 5]"),
    ("content_score", "content_score returned shape [4, 5, 1], expected [lq, lk] for one "
                      "head's block with lq=4, lk=5 = [4, 5]"),
    ("mix_logits", "mix_logits returned shape [4, 5], expected [H, Lq, Lk] with H=2 heads, "
                   "Lq=4, Lk=5 = [2, 4, 5]"),
    ("rotate_value", "rotate_value returned shape [1, 5, 2, 15], expected v's shape "
                     "[B, Lk, H, Dv] = [1, 5, 2, 16]"),
    ("bias", "bias returned dtype int32, expected a float dtype such as float32"),
    ("rotate_none", "rotate returned a NoneType, expected (q, k), two arrays of the shapes of q "
                    "and k = [[1, 4, 2, 16], [1, 4, 2, 16]]"),
    ("rotate_q", "rotate returned one array of shape [1, 4, 2, 16], expected (q, k), two "
                 "arrays of the shapes of q and k = [[1, 4, 2, 16], [1, 4, 2, 16]]"),
])
def test_every_site_of_the_wrong_shape_is_refused_when_the_model_is_built(site, message):
    """Rotations, content-position, content-dependent, cross-head and value terms too, not
    only the bias: one line naming the encoding, the site, what it returned and the shape
    expected, where a 56-line traceback from inside a kernel named neither."""
    with pytest.raises(ConfigError) as e:
        build_model(ModelConfig(**CFG), _BrokenSite(site=site), kind="causal_lm",
                    max_len=MAX_LEN, rngs=nnx.Rngs(0), vocab_size=V)
    line = str(e.value)
    assert "\n" not in line and line == (
        f"encoding 'broken': {message}; see the encoder contract in posjax/encoders/base.py")


@dataclasses.dataclass(frozen=True)
class _RotateWithoutKPos(encoders.Encoding):
    """A rotate written for one positions array, where the kernels pass q_pos and k_pos."""

    name = "one_positions"

    def rotate(self, params, q, k, positions):
        return q, k


def test_a_site_that_cannot_take_the_kernels_arguments_is_refused_when_the_model_is_built():
    """A rotate of the wrong signature ended in a traceback, `rotate() takes 5 positional
    arguments but 6 were given`, naming neither the encoding nor the contract's call."""
    with pytest.raises(ConfigError) as e:
        build_model(ModelConfig(**CFG), _RotateWithoutKPos(), kind="causal_lm",
                    max_len=MAX_LEN, rngs=nnx.Rngs(0), vocab_size=V)
    assert str(e.value) == (
        "encoding 'one_positions': rotate cannot be called as rotate(params, q, k, q_pos, "
        "k_pos) (too many positional arguments); see the encoder contract in "
        "posjax/encoders/base.py")


@settings(max_examples=25, deadline=None)
@given(free=st.lists(st.integers(1, 4), min_size=1, max_size=3),
       contracted=st.lists(st.integers(1, 4), min_size=1, max_size=2),
       out=st.lists(st.integers(1, 4), min_size=1, max_size=2), seed=st.integers(0, 2**16))
def test_matrix_dot_general_is_the_projections_dot_general_with_its_gradients(
        free, contracted, out, seed):
    """The projections' product as one matrix product: the value and both gradients of
    nnx.LinearGeneral's lax.dot_general, for any free, contracted and output axes."""
    rng = np.random.default_rng(seed)
    lhs = jnp.asarray(rng.standard_normal((*free, *contracted)), jnp.float32)
    rhs = jnp.asarray(rng.standard_normal((*contracted, *out)), jnp.float32)
    n = len(contracted)
    numbers = ((tuple(range(len(free), len(free) + n)), tuple(range(n))), ((), ()))

    def loss(dot, lhs, rhs):
        return jnp.sum(jnp.sin(dot(lhs, rhs, numbers)))

    mine, plain = (jax.jit(jax.value_and_grad(functools.partial(loss, dot), argnums=(0, 1)))(
        lhs, rhs)
                   for dot in (matrix_dot_general, jax.lax.dot_general))
    for a, b in zip(jax.tree.leaves(mine), jax.tree.leaves(plain), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_matrix_dot_general_hands_batch_axes_to_lax_unchanged():
    lhs, rhs = jnp.ones((3, 5, 4)), jnp.ones((3, 4, 2))
    numbers = (((2,), (1,)), ((0,), (0,)))
    np.testing.assert_array_equal(matrix_dot_general(lhs, rhs, numbers),
                                  jax.lax.dot_general(lhs, rhs, numbers))


def test_every_projection_multiplies_as_one_matrix_product(monkeypatch):
    """The model's projections run as 2-D products: no dot in the lowered forward pass reads
    a [B, L, D], [B, L, H, Dh] or [B, L, mlp_dim] operand. The token table is read by a gather
    here on every backend: on an accelerator TableEmbed reads it by a one-hot product, a
    [B, L, V] dot that is no projection (tests/test_gpu_path.py tests it)."""
    monkeypatch.setattr(layers, "ONE_HOT_PLATFORMS", frozenset())
    model = build_model(ModelConfig(**CFG), encoders.get("rope"), kind="causal_lm",
                        max_len=MAX_LEN, vocab_size=V, rngs=nnx.Rngs(0))
    linears = [m for _, m in model.iter_modules() if isinstance(m, nnx.LinearGeneral)]
    assert linears and all(m.dot_general is matrix_dot_general for m in linears)
    graphdef, state = nnx.split(model)
    tokens = jnp.zeros((B, L), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(L), (B, L))
    text = jax.jit(lambda state: nnx.merge(graphdef, state)(
        tokens, positions, jnp.ones((B, L), jnp.int32))).lower(state).as_text()
    layouts = [f"tensor<{B}x{L}x{d}xf32>" for d in (CFG["d_model"], CFG["mlp_dim"],
                                                     f"{CFG['num_heads']}x{CFG['head_dim']}")]
    projections = [line for line in text.splitlines()  # attention's own dots have batch axes
                   if "dot_general" in line and "batching_dims" not in line
                   and any(f"({layout}," in line for layout in layouts)]
    assert projections == []


@functools.partial(jax.jit, static_argnums=(0, 1))
def _gelu_loss_and_grad(recomputed: bool, approximate: bool, x):
    """(sum(gelu(x) cos x), its gradient) with the MLP's gelu or jax.nn.gelu."""
    def loss(x):
        y = gelu(x, approximate) if recomputed else jax.nn.gelu(x, approximate=approximate)
        return jnp.sum(y * jnp.cos(x))

    return jax.value_and_grad(loss)(x)


@settings(deadline=None)  # one compile per way and flag: the examples share one shape
@given(values=st.lists(st.floats(-12, 12, width=32), min_size=16, max_size=16),
       approximate=st.booleans())
def test_the_mlps_gelu_is_jaxs_gelu_with_its_gradient(values, approximate):
    """The MLP's gelu, recomputed in the backward pass: jax.nn.gelu's value and gradient, up
    to float32 rounding (XLA may fuse the recomputation otherwise)."""
    x = jnp.asarray(values, jnp.float32)
    mine, plain = (_gelu_loss_and_grad(recomputed, approximate, x) for recomputed in (True, False))
    for a, b in zip(mine, plain, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_the_mlps_gelu_keeps_only_its_input_for_the_backward_pass(capsys):
    """What the backward pass of an MLP layer's activation keeps: the [.., mlp_dim] input
    alone, where jax.nn.gelu keeps four arrays of its shape."""
    from jax.ad_checkpoint import print_saved_residuals

    x = jnp.ones((4, 8), jnp.float32)
    for approximate in (True, False):
        print_saved_residuals(lambda x, a=approximate: jnp.sum(gelu(x, a)), x)
        kept = [line for line in capsys.readouterr().out.splitlines() if "[4,8]" in line]
        assert len(kept) == 1 and "from the argument x" in kept[0]
    print_saved_residuals(lambda x: jnp.sum(jax.nn.gelu(x, approximate=True)), x)
    assert sum("[4,8]" in line for line in capsys.readouterr().out.splitlines()) > 1


GLU_ACTIVATIONS = {"swiglu": SwiGLUMLP.activation, "geglu": GeGLUMLP.activation}


@pytest.mark.parametrize("mlp", GLU_ACTIVATIONS)
def test_a_glu_keeps_only_its_gate_and_up_for_the_backward_pass(mlp, capsys):
    """SwiGLU's and GeGLU's product keeps its two [.., mlp_dim] inputs alone, where autodiff
    keeps the activation's output and intermediates too; its value and gradient are the
    plain product's up to float32 rounding."""
    from jax.ad_checkpoint import print_saved_residuals

    activation = GLU_ACTIVATIONS[mlp]
    gate, up = jax.random.normal(jax.random.key(0), (2, 4, 8), jnp.float32) * 4
    print_saved_residuals(lambda g, u: jnp.sum(gated(g, u, activation)), gate, up)
    kept = [line for line in capsys.readouterr().out.splitlines() if "[4,8]" in line]
    assert len(kept) == 2 and all("from the argument" in line for line in kept), kept
    print_saved_residuals(lambda g, u: jnp.sum(activation(g) * u), gate, up)
    assert sum("[4,8]" in line for line in capsys.readouterr().out.splitlines()) > 2

    def loss(product, g, u):
        return jnp.sum(product(g, u) * jnp.cos(g + u))

    mine, plain = (jax.value_and_grad(functools.partial(loss, product), argnums=(0, 1))(
        gate, up) for product in (lambda g, u: gated(g, u, activation),
                                  lambda g, u: activation(g) * u))
    for a, b in zip(jax.tree.leaves(mine), jax.tree.leaves(plain), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
