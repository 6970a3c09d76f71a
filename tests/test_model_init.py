"""model.init, the initialisation conventions (posjax.models.initialisers), and T5's table
conventions in a model: the default gives the parameters posjax gave before the option
existed (tests/golden/init_posjax.json), each convention's weights have its statistics, an
encoding's parameters do not depend on the convention, and x-transformers' T5 (one shared
table, N(0, 1), bias times sqrt(head_dim)) is what its settings build."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import config as configlib
from posjax import encoders
from posjax.errors import ConfigError
from posjax.models import abstract_model, build_model, initialisers
from posjax.models.initialisers import INITS

GOLDEN = Path(__file__).parent / "golden" / "init_posjax.json"
LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
TINY = dict(d_model=32, num_layers=2, num_heads=2, head_dim=16, mlp_dim=64, grid_width=4,
            dtype="float32")
# The golden file's models: (encoding, kind, model fields) by the name its keys start with.
GOLDEN_MODELS = {
    "causal_lm/gdn+t5/swiglu": ("t5", "causal_lm", {"layer_pattern": "gdn+t5", "mlp": "swiglu"}),
    "mlm/deberta/absolute": ("deberta", "mlm", {"absolute_last_layers": 1}),
}
# Big enough for a weight's std to be estimated within a few percent.
WIDE = dict(d_model=128, num_layers=3, num_heads=4, head_dim=32, mlp_dim=512, dtype="float32")
VOCAB = 512


def _build(cfg, name="t5", kind="causal_lm", hparams=None, vocab=64, seed=0):
    return build_model(cfg, encoders.get(name, **(hparams or {})), kind=kind, vocab_size=vocab,
                       num_classes=5, patch_dim=12, max_len=32, rngs=nnx.Rngs(seed))


def _leaves(model) -> dict[str, np.ndarray]:
    """Every nnx.Param of `model` by its path, as float64."""
    return {"/".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path):
            np.asarray(leaf, np.float64)
            for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(model, nnx.Param))}


def test_the_default_gives_the_parameters_posjax_gave_before_model_init_existed():
    golden = json.loads(GOLDEN.read_text())["params"]
    got = {}
    for case, (name, kind, fields) in GOLDEN_MODELS.items():
        model = _build(dict(TINY, **fields), name, kind)
        got.update({f"{case}:{path}": [x.sum(), (x * x).sum()]
                    for path, x in _leaves(model).items()})
    assert sorted(got) == sorted(golden)
    for key, want in golden.items():
        np.testing.assert_allclose(got[key], want, rtol=1e-6, atol=1e-9, err_msg=key)


def _std(x) -> float:
    return float(np.std(np.asarray(x, np.float64)))


@pytest.fixture(scope="module")
def wide_models():
    return {name: _build(dict(WIDE, init=name), vocab=VOCAB) for name in INITS}


def _check_std(x, want, name):
    assert _std(x) == pytest.approx(want, rel=0.05), name


def test_posjax_convention_statistics(wide_models):
    m = wide_models["posjax"]
    attn, mlp = m.backbone.layers[0].attn, m.backbone.layers[0].mlp
    _check_std(m.embed.embedding[...], 0.02, "embedding")
    _check_std(attn.query.kernel[...], 1 / math.sqrt(128), "query")  # lecun normal
    _check_std(attn.out.kernel[...], 1 / math.sqrt(128), "attention out: fan_in H * Dh")
    _check_std(mlp.down.kernel[...], 1 / math.sqrt(512), "mlp down")
    assert not np.any(np.asarray(attn.query.bias[...]))


def test_gpt2_convention_statistics(wide_models):
    m = wide_models["gpt2"]
    residual = 0.02 / math.sqrt(2 * WIDE["num_layers"])
    for layer in m.backbone.layers:
        _check_std(layer.attn.query.kernel[...], 0.02, "query")
        _check_std(layer.mlp.up.kernel[...], 0.02, "mlp up")
        _check_std(layer.attn.out.kernel[...], residual, "attention out (c_proj)")
        _check_std(layer.mlp.down.kernel[...], residual, "mlp down (c_proj)")
        assert not np.any(np.asarray(layer.mlp.down.bias[...]))
    _check_std(m.embed.embedding[...], 0.02, "embedding")
    _check_std(m.head.kernel[...], 0.02, "untied head")


def test_pytorch_convention_statistics(wide_models):
    m = wide_models["pytorch"]
    _check_std(m.embed.embedding[...], 1.0, "nn.Embedding N(0, 1)")
    layer = m.backbone.layers[0]
    for name, w, b, fan_in in (("query", layer.attn.query.kernel, layer.attn.query.bias, 128),
                               ("out", layer.attn.out.kernel, layer.attn.out.bias, 128),
                               ("mlp down", layer.mlp.down.kernel, layer.mlp.down.bias, 512),
                               ("head", m.head.kernel, m.head.bias, 128)):
        bound = 1 / math.sqrt(fan_in)  # kaiming_uniform(a=sqrt(5)) and nn.Linear's bias
        _check_std(w[...], bound / math.sqrt(3), name)
        assert np.abs(np.asarray(w[...])).max() <= bound, name
        assert np.abs(np.asarray(b[...])).max() <= bound and _std(b[...]) > 0.3 * bound, name


def test_x_transformers_convention_statistics(wide_models):
    """TransformerWrapper's TokenEmbedding.init_: kaiming_normal_ on the [V, D] table, std
    sqrt(2 / D) (x_transformers 2.31, x_transformers.py); its linear layers as PyTorch's."""
    m, torch_default = wide_models["xtransformers"], wide_models["pytorch"]
    _check_std(m.embed.embedding[...], math.sqrt(2 / WIDE["d_model"]), "kaiming_normal_")
    layer, other = m.backbone.layers[0], torch_default.backbone.layers[0]
    for w, v in ((layer.attn.query.kernel, other.attn.query.kernel),
                 (layer.mlp.down.kernel, other.mlp.down.kernel)):
        assert _std(w[...]) == pytest.approx(_std(v[...]), rel=0.05)


def test_norms_and_the_encodings_parameters_do_not_depend_on_the_convention(wide_models):
    """Only the network around the encoding changes: the same seed gives the same T5 table
    and unit norms under every convention."""
    tables = [np.asarray(m.backbone.layers[1].attn.enc_params["table"][...])
              for m in wide_models.values()]
    for table in tables[1:]:
        np.testing.assert_array_equal(table, tables[0])
    for m in wide_models.values():
        np.testing.assert_array_equal(np.asarray(m.backbone.final_norm.scale[...]), 1.0)
        np.testing.assert_array_equal(np.asarray(m.backbone.layers[0].attn_norm.bias[...]), 0.0)


def test_an_unknown_convention_is_a_one_line_error_naming_the_valid_ones():
    with pytest.raises(ConfigError,
                       match="unknown model.init 'gpt3'.*gpt2, posjax, pytorch, xtransformers"):
        _build(dict(TINY, init="gpt3"))


def _draws(make) -> int:
    """How many random draws (random_bits operations, nested jaxprs included) building
    `make()` traces."""
    return str(jax.make_jaxpr(lambda: jax.tree.leaves(nnx.state(make())))()).count(
        "random_bits")


@pytest.mark.parametrize("init", sorted(INITS))
def test_an_abstract_build_draws_nothing_and_has_each_conventions_shapes(init):
    """abstract_model builds inside initialisers.shapes_only: every convention's weights
    start as zeros, so the build's trace draws nothing (RoPE has no parameters of its own),
    and the graph, shapes and dtypes are a real build's; outside it the convention draws."""
    make = functools.partial(_build, dict(TINY, init=init), "rope")
    with initialisers.shapes_only():
        assert _draws(make) == 0
        zeros = initialisers.convention(init).kernel(True, 2)(jax.random.key(0), (3, 4))
        np.testing.assert_array_equal(zeros, np.zeros((3, 4)))
    assert initialisers.convention(init) is INITS[init] and _draws(make) > 0
    (graph, state), (real_graph, real_state) = nnx.split(abstract_model(make)), nnx.split(make())
    shapes = lambda tree: jax.tree.map(lambda a: (a.shape, a.dtype), tree)  # noqa: E731
    assert graph == real_graph and shapes(state) == shapes(real_state)


def test_model_init_and_t5s_conventions_are_config_args():
    config = configlib.load_config_module(LM).get_config(
        "smoke,encoding=t5,init=gpt2,scale=5.656854249492381,init_std=1.0,"
        "share_position_params=true")
    assert config.model.init == "gpt2" and config.model.share_position_params
    assert config.encoding.scale == pytest.approx(math.sqrt(32)) and config.encoding.init_std == 1
    assert configlib.load_config_module(LM).get_config("smoke").model.init == "posjax"


def test_x_transformers_t5_is_one_table_for_all_layers_at_unit_std_scaled_by_sqrt_dh():
    head_dim = WIDE["head_dim"]
    xt = dict(scale=math.sqrt(head_dim), init_std=1.0)
    model = _build(dict(WIDE, num_heads=8, share_position_params=True), hparams=xt)
    tables = [layer.attn.enc_params["table"] for layer in model.backbone.layers]
    assert all(t is tables[0] for t in tables)  # one nnx.Param, so one set of updates
    table = np.asarray(tables[0][...])
    assert table.shape == (32, 8) and _std(table) == pytest.approx(1.0, rel=0.15)
    count = sum(x.size for x in _leaves(model).values())
    own = sum(x.size for x in _leaves(_build(dict(WIDE, num_heads=8), hparams=xt)).values())
    assert own - count == (WIDE["num_layers"] - 1) * table.size
    enc = model.backbone.layers[0].attn.encoding
    pos = jnp.arange(6)
    unscaled = dataclasses.replace(enc, scale=1.0).bias({"table": table}, pos, pos, 8)
    np.testing.assert_array_equal(np.asarray(enc.bias({"table": table}, pos, pos, 8)),
                                  math.sqrt(head_dim) * np.asarray(unscaled))
