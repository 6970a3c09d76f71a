"""posjax.pretrained: tiny Hugging Face checkpoints of each family give transformers' logits.

The fixtures (tests/fixtures/pretrained/<family>/, made by scripts/make_pretrained_fixtures.py
with transformers and torch, which these tests never import) are random float16 checkpoints
with a tokenizer; each case of a family's cases.json patches config.json (a rope_scaling block,
a residual switch) and holds transformers' float32 logits for a fixed batch.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

from posjax import pretrained
from posjax.config.files import load_config_module
from posjax.errors import ConfigError
from posjax.models import ModelConfig, transformer
from posjax.pretrained import families, files, loader, mxfp4
from posjax.pretrained.families import layer_fields

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "pretrained"
FAMILIES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
CASES = [(family, case) for family in FAMILIES
         for case in json.loads((FIXTURES / family / "cases.json").read_text())["cases"]]


def copy(tmp_path: Path, family: str, **overrides) -> Path:
    """A copy of the family's snapshot whose config.json has `overrides` (None removes)."""
    directory = tmp_path / family
    shutil.copytree(FIXTURES / family, directory)
    config = json.loads((directory / "config.json").read_text())
    config = {k: v for k, v in {**config, **overrides}.items() if v is not None}
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_every_family_and_a_sharded_snapshot_are_covered():
    assert set(FAMILIES) == set(pretrained.FAMILIES)
    assert (FIXTURES / "llama" / "model.safetensors.index.json").is_file()
    size = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    assert size < 3_400_000  # twenty-three families' snapshots and logits: ~3.04 MB


@pytest.mark.parametrize("family,case", CASES,
                         ids=[f"{f}-{c['case']}-{c['tokens'][:-4]}" for f, c in CASES])
def test_logits_equal_transformers(tmp_path, family, case):
    model = pretrained.load(copy(tmp_path, family, **case["config"]))
    tokens = np.load(FIXTURES / family / case["tokens"])
    logits = model.logits(tokens)
    assert logits.dtype == np.float32
    np.testing.assert_allclose(logits, np.load(FIXTURES / family / case["logits"]), rtol=0,
                               atol=1e-4)


@pytest.mark.parametrize("family,case", [c for c in CASES if c[1]["case"] != "default"
                                         and c[1]["tokens"] == "tokens.npy"
                                         and c[1]["case"] != "dynamic"],
                         ids=lambda p: p if isinstance(p, str) else p["case"])
def test_each_case_changes_the_logits_it_is_checked_on(family, case):
    # A case equal to the default would check nothing about its rope_scaling or switch.
    default = np.load(FIXTURES / family / "default.tokens.npy")
    assert np.abs(np.load(FIXTURES / family / case["logits"]) - default).max() > 0.1


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_dynamic_scaling_changes_inputs_longer_than_training_only(tmp_path, family):
    long = np.load(FIXTURES / family / "long.npy")
    plain = pretrained.load(copy(tmp_path, family)).logits(long)
    expected = np.load(FIXTURES / family / "dynamic.long.npy")
    assert np.abs(plain - expected).max() > 0.1
    short = np.load(FIXTURES / family / "dynamic.tokens.npy")
    np.testing.assert_array_equal(short, np.load(FIXTURES / family / "default.tokens.npy"))


def test_the_loaded_model_carries_its_tokenizer_config_and_encoding(tmp_path):
    model = pretrained.load(FIXTURES / "qwen2")
    ids = model.tokenizer.encode("rotary position").ids
    assert ids and max(ids) < model.config["vocab_size"]
    assert model.tokenizer.decode(ids) == "rotary position"
    assert model.model_config.tie_embeddings and model.model.head is None
    assert model.model_config.num_kv_heads == 1 and model.model_config.qkv_bias
    assert model.encoding.layout == "half" and model.encoding.theta == 1e6
    assert model.train_len == 32 and model.windows == (0, 0)
    neox = pretrained.load(FIXTURES / "gpt_neox")
    assert neox.encoding.fraction == 0.5 and neox.model_config.parallel_residual
    yarn = pretrained.load(copy(tmp_path, "llama", rope_scaling={"rope_type": "yarn",
                                                                  "factor": 4.0}))
    assert dict(yarn.encoding.scaling)["original_max_position_embeddings"] == 32


def test_a_loaded_snapshot_prints_as_a_short_summary(tmp_path):
    assert repr(pretrained.load(FIXTURES / "gpt_neox")) == (
        "Pretrained(gpt_neox: 23,296 parameters (float32), 2 layers, d_model 32, 2 heads of 16, "
        "gelu_exact MLP 64; trained at 32 tokens; rope theta=10000, rotating 0.5 of each head, "
        "rope_scaling none; tokenizer of 96 tokens, vocab_size 96)")
    yarn = pretrained.load(copy(tmp_path, "mistral", rope_scaling={"rope_type": "yarn",
                                                                    "factor": 4.0}))
    assert str(yarn) == (
        "Pretrained(mistral: 24,736 parameters (float32), 2 layers, d_model 32, 2 query / 1 "
        "key-value heads of 16, swiglu MLP 64; trained at 32 tokens, sliding window 64; rope "
        'theta=10000, rope_scaling {"rope_type": "yarn", "factor": 4.0, '
        '"original_max_position_embeddings": 32}; tokenizer of 96 tokens, vocab_size 96)')


def test_bfloat16_weights_are_read_and_bfloat16_compute_stays_close(tmp_path):
    directory = copy(tmp_path, "qwen2")
    path = directory / "model.safetensors"
    tensors = safetensors.numpy.load_file(path)
    stored = {k: v.astype(ml_dtypes.bfloat16) for k, v in tensors.items()}
    safetensors.numpy.save_file(stored, path)
    model = pretrained.load(directory)
    np.testing.assert_array_equal(
        np.asarray(model.model.embed.embedding[...]),
        stored["model.embed_tokens.weight"].astype(np.float32))
    tokens = np.load(FIXTURES / "qwen2" / "tokens.npy")
    low = pretrained.load(directory, dtype="bfloat16").logits(tokens)
    assert low.dtype == np.float32
    np.testing.assert_allclose(low, model.logits(tokens), atol=0.25)


@pytest.mark.parametrize("dtype,exact", [("float32", True), ("bfloat16", False)])
def test_a_float32_model_multiplies_in_full_float32_on_every_platform(monkeypatch, dtype, exact):
    # CPUs compute float32 products exactly anyway; GPUs would round them to TF32 by default.
    lowered = []
    forward = loader._forward

    def record(graphdef, state, tokens):
        lowered.append(forward.lower(graphdef, state, tokens).as_text())
        return forward(graphdef, state, tokens)

    monkeypatch.setattr(loader, "_forward", record)
    pretrained.load(FIXTURES / "gpt_neox", dtype=dtype).logits(np.zeros((1, 4), np.int32))
    dots = [line for line in lowered[0].splitlines() if "dot_general" in line]
    assert dots and all("precision = [HIGHEST, HIGHEST]" in line for line in dots) == exact


def _remove(directory: Path, name: str) -> Path:
    (directory / name).unlink()
    return directory


def _write(directory: Path, name: str, text: str) -> Path:
    (directory / name).write_text(text)
    return directory


def _extra_tensor(directory: Path) -> Path:
    path = directory / "model.safetensors"
    tensors = safetensors.numpy.load_file(path)
    tensors["model.layers.0.self_attn.q_norm.weight"] = np.ones(16, np.float16)
    safetensors.numpy.save_file(tensors, path)
    return directory


def _drop_tensor(directory: Path) -> Path:
    path = directory / "model.safetensors"
    tensors = safetensors.numpy.load_file(path)
    del tensors["model.norm.weight"]
    safetensors.numpy.save_file(tensors, path)
    return directory


BROKEN = [
    ("no directory", lambda t: t / "absent", "absent does not exist: get one with "
     "`hf download NAME --local-dir DIR`"),
    ("a file", lambda t: copy(t, "llama") / "config.json", "config.json is a file: give the "
     "snapshot's directory (its config.json, tokenizer.json and weights)"),
    ("no config", lambda t: _remove(copy(t, "llama"), "config.json"), "has no config.json"),
    ("no tokenizer", lambda t: _remove(copy(t, "llama"), "tokenizer.json"),
     "has no tokenizer.json"),
    ("no weights", lambda t: _remove(copy(t, "qwen2"), "model.safetensors"),
     "has no *.safetensors weights"),
    ("no shard", lambda t: _remove(copy(t, "llama"), "model-00002-of-00002.safetensors"),
     "lacks model-00002-of-00002.safetensors, a weight shard model.safetensors.index.json"),
    ("model_type", lambda t: copy(t, "llama", model_type="mamba"),
     "model_type 'mamba', which posjax cannot load; supported: cohere, cohere2, "
     "deepseek_v3, exaone4, gemma2, gemma3_text, glm4, glm4_moe, gpt_neox, gpt_oss, llama, "
     "llama4_text, "
     "ministral3, "
     "mistral, mixtral, olmo2, olmo3, phi3, qwen2, qwen2_moe, qwen3, qwen3_moe, smollm3"),
    ("multimodal", lambda t: copy(t, "llama", model_type="llava",
                                  text_config={"model_type": "llama"}),
     "model_type 'llava', a multimodal model whose text model is 'llama': posjax loads "
     "text-only llama snapshots"),
    ("hidden_act", lambda t: copy(t, "llama", hidden_act="relu"),
     "hidden_act='relu', which posjax's llama model does not compute"),
    ("unknown scaling", lambda t: copy(t, "llama", rope_scaling={"rope_type": "ntk_by_parts",
                                                                 "factor": 4.0}),
     "unknown rope_scaling type 'ntk_by_parts'"),
    ("scaling key", lambda t: copy(t, "llama", rope_scaling={"rope_type": "linear",
                                                             "factor": 4.0, "beta_fast": 2}),
     "does not read 'beta_fast'"),
    # the fixture's numbers came out as if the key were absent
    ("partial rotary", lambda t: copy(t, "llama", partial_rotary_factor=0.5),
     "config.json's partial_rotary_factor=0.5: posjax's llama model rotates the whole head"),
    # transformers' Llama fails on it (the rotary tables are narrower than the heads)
    ("partial rotary in the block", lambda t: copy(t, "llama", rope_scaling={
        "rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}),
     "config.json's rope block's partial_rotary_factor=0.5: posjax's llama model rotates"),
    ("odd rotary", lambda t: copy(t, "gpt_neox", rotary_pct=0.3125),
     "rotates 5 of 16 dims, an odd count"),
    ("unread tensor", lambda t: _extra_tensor(copy(t, "qwen2")),
     "tensor 'model.layers.0.self_attn.q_norm.weight' is not read by posjax's qwen2 model"),
    ("missing tensor", lambda t: _drop_tensor(copy(t, "qwen2")),
     "no tensor 'model.norm.weight', which a qwen2 model needs"),
    ("shapes", lambda t: copy(t, "llama", intermediate_size=48),
     "mlp/down/kernel has shape (64, 32), config.json implies (48, 32)"),
    ("bad json", lambda t: _write(copy(t, "llama"), "config.json", "{"),
     "config.json is not valid JSON (Expecting property name enclosed in double quotes: "
     "line 1), as a download cut short leaves it: download it again"),
    ("bad tokenizer", lambda t: _write(copy(t, "llama"), "tokenizer.json", "{}"),
     "tokenizer.json is not a tokenizers file ("),
    ("tied and an lm_head", lambda t: copy(t, "llama", tie_word_embeddings=True),
     "tensor 'lm_head.weight' is not read by posjax's llama model: config.json's "
     "tie_word_embeddings=true makes the embedding the output layer: set it false if this "
     "tensor is the output layer of its own"),
    ("bad tokenizer's fix", lambda t: _write(copy(t, "llama"), "tokenizer.json", "{}"),
     "), as a download cut short leaves it: download it again"),
    ("missing key", lambda t: copy(t, "llama", hidden_size=None), "no 'hidden_size'"),
]


@pytest.mark.parametrize("make,message", [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_a_broken_snapshot_is_one_line_naming_the_problem(tmp_path, make, message):
    directory = make(tmp_path)
    with pytest.raises(ConfigError) as err:
        pretrained.load(directory)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_sliding_windows_reach_the_model_layer_by_layer(tmp_path):
    """Inputs past config.json's sliding_window were refused: the loader did not map it onto
    the model (the logits past it are checked against transformers' in the cases above)."""
    mistral = pretrained.load(copy(tmp_path, "mistral", sliding_window=16))
    assert mistral.windows == (16, 16) and mistral.model_config.window == 16
    assert ", sliding window 16;" in repr(mistral)
    qwen = pretrained.load(copy(tmp_path, "qwen2", use_sliding_window=True, sliding_window=8,
                                max_window_layers=1, layer_types=None))
    assert qwen.windows == (0, 8)
    assert qwen.model_config.layer_pattern == "rope+rope(window=8)"
    assert ", sliding window 8 on 1 of 2 layers;" in repr(qwen)
    # transformers' Qwen2: no window without use_sliding_window, whatever layer_types says
    assert pretrained.load(copy(tmp_path / "b", "qwen2", sliding_window=8, layer_types=[
        "sliding_attention"] * 2)).windows == (0, 0)
    assert layer_fields((0,) * 14 + (4096,) * 14) == {
        "layer_pattern": "rope*14+rope(window=4096)*14"}
    assert layer_fields((0, 0)) == {"window": 0} and layer_fields(()) == {}
    assert layer_fields((0,) * 4, (True, True, True, False)) == {"layer_pattern": "rope*3+none"}
    assert layer_fields((0, 8), (True, False)) == {"layer_pattern": "rope+none(window=8)"}


def test_what_config_json_leaves_out_is_transformers_default(tmp_path):
    """A config.json without sliding_window ran full attention where transformers'
    MistralConfig and Qwen2Config slide 4096 tokens (Qwen2: where use_sliding_window is
    true); GPT-NeoX without rotary_pct rotated whole heads where GPTNeoXConfig rotates a
    quarter (its logits: the gpt_neox rotary_pct_absent case)."""
    assert pretrained.load(copy(tmp_path, "mistral", sliding_window=None)).windows == (4096,) * 2
    qwen = copy(tmp_path / "q", "qwen2", use_sliding_window=True, sliding_window=None,
                max_window_layers=0, layer_types=None)
    assert pretrained.load(qwen).windows == (4096,) * 2
    null = copy(tmp_path / "n", "mistral")
    _write(null, "config.json", json.dumps({**json.loads((null / "config.json").read_text()),
                                            "sliding_window": None}))
    assert pretrained.load(null).windows == (0, 0)
    neox = pretrained.load(copy(tmp_path / "x", "gpt_neox", rotary_pct=None))
    assert neox.encoding.fraction == 0.25


def test_qwen3_normalises_q_and_k_per_head_with_the_checkpoints_scales(tmp_path):
    """Qwen3's q_norm and k_norm scales are read per layer (their logits: the qwen3 cases);
    set to ones, the logits move, so the checkpoint's scales are what the model computes
    with. A config.json without head_dim takes transformers' Qwen3 default, 128, not
    hidden_size / heads."""
    qwen = pretrained.load(FIXTURES / "qwen3")
    assert qwen.model_config.qk_norm and qwen.model_config.head_dim == 24
    tokens = np.load(FIXTURES / "qwen3" / "tokens.npy")
    scales = [layer.attn.q_norm.scale for layer in qwen.model.backbone.layers]
    assert all(np.abs(np.asarray(s[...]) - 1).max() > 0.05 for s in scales)
    for scale in scales:
        scale[...] = jnp.ones_like(scale[...])
    assert np.abs(qwen.logits(tokens) - np.load(FIXTURES / "qwen3" / "default.tokens.npy")
                  ).max() > 0.01
    with pytest.raises(ConfigError, match="has shape"):  # 128-wide heads, 24-wide weights
        pretrained.load(copy(tmp_path, "qwen3", head_dim=None))


LM = load_config_module(str(FIXTURES.parents[2] / "configs" / "lm.py"))


@pytest.mark.parametrize("arch,family,case", [
    ("llama", "llama", {}), ("qwen2", "qwen2", {}), ("qwen3", "qwen3", {}),
    ("gpt_neox", "gpt_neox", {}), ("smollm3", "smollm3", {}), ("gemma3", "gemma3_text", {}),
    ("cohere2", "cohere2", {}), ("llama4", "llama4_text", {}),
    # the fixture's caps, low enough to bind on its weights, removed: Gemma 2's own
    ("gemma2", "gemma2", {"attn_logit_softcapping": None, "final_logit_softcapping": None})])
def test_configs_arch_trains_the_blocks_its_family_loads(tmp_path, arch, family, case):
    """configs/lm.py:arch=NAME is the family's blocks trained from scratch: every block key it
    sets is what the loader builds from the family's fixture (norm_eps aside, which a
    config.json gives; the layers' schedule, windows and chunks: the tests of each family's)."""
    loaded = pretrained.load(copy(tmp_path, family, **case)).model_config
    for key, value in LM.ARCHS[arch].items():
        if key not in ("norm_eps", "layer_pattern", "window", "attention_chunk"):
            assert getattr(loaded, key) == value, key


def test_smollm3s_nope_layers_are_read_as_transformers_reads_them(tmp_path):
    """no_rope_layers (1: RoPE, 0: NoPE), else a NoPE layer every no_rope_layer_interval-th
    (default 4: configs/lm.py's arch=smollm3 schedule); their logits: the smollm3 cases."""
    smol = pretrained.load(FIXTURES / "smollm3")
    assert smol.rotary == (True, False) and smol.model_config.layer_pattern == "rope+none"
    assert ", NoPE on 1 of 2 layers;" in repr(smol)
    family = pretrained.FAMILIES["smollm3"]
    default = family.rotary({"num_hidden_layers": 8})
    assert layer_fields((0,) * 8, default) == {  # one period: the pattern cycles
        "layer_pattern": LM.ARCHS["smollm3"]["layer_pattern"]}
    with pytest.raises(ConfigError, match=r"^config.json's no_rope_layers=\[1\] is not a list "
                       r"of 0 and 1 for each of its 2 layers"):
        pretrained.load(copy(tmp_path, "smollm3", no_rope_layers=[1]))


def test_gemma3_rotates_local_and_global_layers_at_their_own_bases(tmp_path):
    """Gemma 3's local layers rotate at rope_local_base_freq, unscaled, its global ones at
    rope_theta with rope_scaling (the logits of both layouts: the gemma3_text cases); scores
    are scaled by query_pre_attn_scalar, not head_dim; a block it does not build is refused."""
    gemma = pretrained.load(copy(tmp_path, "gemma3_text", rope_scaling={
        "rope_type": "linear", "factor": 8.0}))
    assert gemma.windows == (8, 0) and gemma.model_config.post_norm
    assert gemma.model_config.layer_pattern == "rope(theta=10000.0,scaling=None,window=8)+rope"
    assert (gemma.encoding.theta, dict(gemma.encoding.scaling)["factor"]) == (1e6, 8.0)
    assert "; rope theta=1000000 (10000 on 1 of 2 layers), rope_scaling {" in repr(gemma)
    tokens = np.load(FIXTURES / "gemma3_text" / "tokens.npy")
    plain = pretrained.load(copy(tmp_path / "q", "gemma3_text", query_pre_attn_scalar=16))
    assert np.abs(plain.logits(tokens) - np.load(FIXTURES / "gemma3_text" / "default.tokens.npy")
                  ).max() > 0.01
    for key, value, message in (
            ("rope_parameters", {"sliding_attention": {"rope_type": "linear", "factor": 2.0}},
             "^config.json's sliding_attention rope block"),
            ("attn_logit_softcapping", 50.0, "^config.json has attn_logit_softcapping=50.0"),
            ("final_logit_softcapping", -1.0, "^config.json's final_logit_softcapping=-1.0 is "
             "not a positive number"),
            ("query_pre_attn_scalar", -1,
             "^config.json's query_pre_attn_scalar=-1 is not a positive number"),
            ("layer_types", ["full_attention"], r"^config.json's layer_types=\['full_attention'\] "
             "is not one of full_attention or sliding_attention for each of its 2 layers")):
        with pytest.raises(ConfigError, match=message) as err:
            pretrained.load(copy(tmp_path / key, "gemma3_text", **{key: value}))
        assert "\n" not in str(err.value)


def test_gemma2_caps_its_logits_and_alternates_sliding_and_global_layers(tmp_path):
    """Gemma 2's caps become model.attn_softcap and final_softcap (transformers' 50 and 30
    where config.json names none, no cap where it says null; the logits: the gemma2 cases);
    without layer_types a sliding layer comes first, then every other one (Gemma2Config), as
    configs/lm.py:arch=gemma2 builds them; a damaged cap is refused in one line."""
    gemma = pretrained.load(FIXTURES / "gemma2")
    config = gemma.model_config
    assert (config.attn_softcap, config.final_softcap, config.qk_norm) == (2.0, 5.0, False)
    assert gemma.windows == (8, 0) and config.post_norm and config.embed_scale
    family = pretrained.FAMILIES["gemma2"]
    assert family.windows({**family.defaults, "num_hidden_layers": 4}) == (4096, 0, 4096, 0)
    arch = ModelConfig(**dict(LM.ARCHS["gemma2"], num_layers=4))
    assert transformer.layer_windows(arch) == (4096, 0, 4096, 0)
    defaults = pretrained.load(copy(tmp_path / "d", "gemma2", attn_logit_softcapping=None,
                                    final_logit_softcapping=None)).model_config
    assert (defaults.attn_softcap, defaults.final_softcap) == (50.0, 30.0)
    directory = copy(tmp_path / "n", "gemma2")
    config_json = json.loads((directory / "config.json").read_text())
    config_json.update(attn_logit_softcapping=None, final_logit_softcapping=None)
    (directory / "config.json").write_text(json.dumps(config_json))
    uncapped = pretrained.load(directory)
    assert (uncapped.model_config.attn_softcap, uncapped.model_config.final_softcap) == (0, 0)
    tokens = np.load(FIXTURES / "gemma2" / "tokens.npy")
    assert np.abs(uncapped.logits(tokens)).max() > 5.0  # the fixture's cap binds
    with pytest.raises(ConfigError, match="^config.json's attn_logit_softcapping='50' is not "
                       "a positive number"):
        pretrained.load(copy(tmp_path / "b", "gemma2", attn_logit_softcapping="50"))


def test_mixtures_of_experts_read_their_experts_and_their_dense_layers(tmp_path):
    """Mixtral puts experts on every layer, Qwen3-MoE on every decoder_sparse_step-th layer
    not in mlp_only_layers, the others dense (the logits: the qwen3_moe and mixtral cases,
    qwen3_moe's first layer dense); the hub's Qwen3-MoE configs name num_experts,
    transformers 5's saves num_local_experts."""
    moe = pretrained.load(FIXTURES / "qwen3_moe").model_config
    assert (moe.moe_experts, moe.moe_top_k, moe.moe_mlp_dim, moe.moe_norm_top_k) == (4, 2, 16,
                                                                                     True)
    assert moe.layer_pattern == "rope(moe_experts=0)+rope" and moe.mlp_dim == 64
    assert pretrained.load(FIXTURES / "mixtral").model_config.moe_norm_top_k
    qwen2 = pretrained.load(FIXTURES / "qwen2_moe").model_config  # a gated shared expert
    assert (qwen2.moe_shared_dim, qwen2.moe_shared_gate, qwen2.layer_pattern) == (
        24, True, "rope+rope(moe_experts=0)")
    config = json.loads((FIXTURES / "qwen3_moe" / "config.json").read_text())
    config["num_experts"] = config.pop("num_local_experts")
    assert pretrained.FAMILIES["qwen3_moe"].model(config)["moe_experts"] == 4
    assert _layer_pattern("qwen3_moe", {**config, "num_hidden_layers": 6, "decoder_sparse_step": 1,
                                        "mlp_only_layers": [0, 4]}) == (
        "rope(moe_experts=0)+rope*3+rope(moe_experts=0)+rope")
    with pytest.raises(ConfigError, match=re.escape(
            "config.json's mlp_only_layers=[2] is not a list of layer indices below 2")):
        pretrained.load(copy(tmp_path, "qwen3_moe", mlp_only_layers=[2]))


def test_gpt_oss_reads_its_sinks_and_biased_experts_stored_in_bfloat16_or_mxfp4(tmp_path):
    """GPT-OSS's sinks become model.sink_logit's, its experts' interleaved gate_up columns the
    gate and up projections (the logits: the gpt_oss cases). The hub's snapshots store the
    experts in MXFP4: posjax's dequantization is transformers' (convert_moe_packed_tensors,
    mxfp4.npz), and a snapshot holding NAME_blocks and NAME_scales loads as the one holding
    their dequantized NAME."""
    model = pretrained.load(FIXTURES / "gpt_oss")
    cfg = model.model_config
    assert (cfg.sink_logit, cfg.mlp, cfg.mlp_bias, cfg.moe_experts) == (True, "swiglu_clamped",
                                                                        True, 4)
    assert model.windows == (8, 0) and dict(model.encoding.scaling)["truncate"] is False
    tensors = safetensors.numpy.load_file(FIXTURES / "gpt_oss" / "model.safetensors")
    gate_up = tensors["model.layers.0.mlp.experts.gate_up_proj"].astype(np.float32)
    np.testing.assert_array_equal(np.asarray(model.model.backbone.layers[0].mlp.up[...]),
                                  gate_up[..., 1::2])
    np.testing.assert_array_equal(np.asarray(model.model.backbone.layers[0].attn.sink[...]),
                                  tensors["model.layers.0.self_attn.sinks"].astype(np.float32))
    packed = np.load(FIXTURES / "gpt_oss" / "mxfp4.npz")
    np.testing.assert_array_equal(mxfp4.dequantize(packed["blocks"], packed["scales"]),
                                  packed["dequantized"])
    name = "model.layers.0.mlp.experts.gate_up_proj"
    rest = {k: v for k, v in tensors.items() if k != name}
    snapshots = {}
    for kind, stored in (("mxfp4", {f"{name}_blocks": packed["blocks"],
                                    f"{name}_scales": packed["scales"]}),
                         ("float32", {name: packed["dequantized"]})):
        snapshots[kind] = copy(tmp_path / kind, "gpt_oss")
        safetensors.numpy.save_file({**rest, **stored}, snapshots[kind] / "model.safetensors")
    tokens = np.load(FIXTURES / "gpt_oss" / "tokens.npy")
    quantized = pretrained.load(snapshots["mxfp4"])
    np.testing.assert_array_equal(quantized.logits(tokens),
                                  pretrained.load(snapshots["float32"]).logits(tokens))
    assert np.abs(quantized.logits(tokens) - model.logits(tokens)).max() > 0.1
    with pytest.raises(ConfigError, match="do not pair .*: the snapshot is damaged"):
        mxfp4.dequantize(packed["blocks"], packed["scales"][..., :0])


def test_interleaved_rotary_pairs_are_moved_to_posjaxs_halves_of_the_rotated_share():
    """Cohere's and GLM-4's pairs (2i, 2i + 1) of the first R dims become (i, i + R/2); the
    dims past R stay where they are (the logits: the cohere and glm4 cases)."""
    head = np.arange(8.0)
    np.testing.assert_array_equal(families._pairs_as_halves(head), [0, 2, 4, 6, 1, 3, 5, 7])
    np.testing.assert_array_equal(families._pairs_as_halves(head, 4), [0, 2, 1, 3, 4, 5, 6, 7])
    glm = pretrained.load(FIXTURES / "glm4")
    assert glm.encoding.fraction == 0.5 and glm.model_config.post_norm
    assert glm.encoding.rot_dim(glm.model_config.resolved_head_dim) == 8


def test_ministral3s_query_temperature_steps_at_its_original_length(tmp_path):
    """Ministral 3's llama_4_scaling_beta: q at position m times 1 + beta log(1 + floor(m /
    F)), F the rope block's original_max_position_embeddings (offset 0, where Llama 4's is
    m + 1; the logits: the ministral3 cases, whose 20 tokens cross F = 8 twice); a beta with
    no such length is refused."""
    model = pretrained.load(FIXTURES / "ministral3")
    enc = model.encoding
    assert (enc.temperature_floor, enc.temperature_scale, enc.temperature_offset) == (8, 0.1, 0)
    config = json.loads((FIXTURES / "ministral3" / "config.json").read_text())
    block = {"rope_type": "default", "rope_theta": 1e6, "llama_4_scaling_beta": 0.1}
    with pytest.raises(ConfigError, match="^config.json's rope block has llama_4_scaling_beta="
                       "0.1 and original_max_position_embeddings=None"):
        families._ministral3_rope({**config, "rope_parameters": block})


def test_cohere2_rotates_its_sliding_layers_only_and_scales_its_logits(tmp_path):
    """Command R7B's layers: the sliding ones rotate (their interleaved pairs as posjax's
    halves), the full-attention ones are NoPE, one LayerNorm without bias feeds both branches
    (the logits: the cohere and cohere2 cases); logit_scale multiplies the logits; what it
    does not build is refused in one line."""
    model = pretrained.load(FIXTURES / "cohere2")
    cfg = model.model_config
    assert model.windows == (8, 0) and model.rotary == (True, False)
    assert cfg.layer_pattern == "rope(window=8)+none" and cfg.parallel_residual
    assert cfg.norm == "layernorm_no_bias" and model.encoding.theta == 50000.0
    assert pretrained.FAMILIES["cohere2"].windows({"num_hidden_layers": 8, "sliding_window": 4096}
                                                  ) == (4096, 4096, 4096, 0) * 2
    tokens = np.load(FIXTURES / "cohere2" / "tokens.npy")
    doubled = pretrained.load(copy(tmp_path / "scale", "cohere2", logit_scale=0.5))
    np.testing.assert_allclose(doubled.logits(tokens), 2 * model.logits(tokens), rtol=1e-6,
                               atol=1e-6)
    for family, key, value, message in (
            ("cohere2", "layer_types", ["full_attention"] * 2, "^config.json's sliding_window=8 "
             "with its layer_types leaves no sliding layer, and transformers' cohere2 rotates "
             "only those"),
            ("cohere2", "logit_scale", -1, "^config.json's logit_scale=-1 is not a positive"),
            ("cohere2", "layer_types", ["full_attention"], r"^config.json's layer_types="),
            ("cohere", "use_qk_norm", False, "^the checkpoint's tensor "
             "'model.layers.0.self_attn.k_norm.weight' is not read by posjax's")):
        with pytest.raises(ConfigError, match=message) as err:
            pretrained.load(copy(tmp_path / f"{family}_{key}_{value}", family, **{key: value}))
        assert "\n" not in str(err.value)
    default = pretrained.load(copy(tmp_path / "default", "cohere2", sliding_window=None))
    assert default.windows == (4096, 0)  # Cohere2Config's window where config.json names none
    null = {"num_hidden_layers": 2, "sliding_window": None, "model_type": "cohere2"}
    with pytest.raises(ConfigError, match="^config.json's sliding_window=None with its "
                       "layer_types leaves no sliding layer"):
        pretrained.FAMILIES["cohere2"].rotary(null)


def test_command_r_plus_layer_norms_q_and_k_per_head_with_its_pairs_as_posjaxs():
    """use_qk_norm: q and k LayerNorm'd without bias over each head, each head its own scale
    (the logits: the cohere cases), the scales' dims moved as q's and k's rotary pairs."""
    model = pretrained.load(FIXTURES / "cohere")
    cfg = model.model_config
    assert (cfg.qk_norm, cfg.qk_norm_axes, cfg.qk_norm_type) == (True, "per_head",
                                                                 "layernorm_no_bias")
    tensors = safetensors.numpy.load_file(FIXTURES / "cohere" / "model.safetensors")
    scale = model.model.backbone.layers[0].attn.q_norm.scale[...]
    hub = tensors["model.layers.0.self_attn.q_norm.weight"].astype(np.float32)  # [2, 16]
    np.testing.assert_array_equal(np.asarray(scale).reshape(2, 16),
                                  families._pairs_as_halves(hub))


def test_exaone4_norms_outputs_only_and_rotates_its_sliding_layers_alone(tmp_path):
    """EXAONE 4.0: no norm on a sublayer's input, one on its output (model.pre_norm false,
    post_norm); with a window its full-attention layers are NoPE, without one every layer
    rotates (the logits: the exaone4 cases); EXAONE's string pattern needs layer_types."""
    model = pretrained.load(FIXTURES / "exaone4")
    cfg = model.model_config
    assert (cfg.pre_norm, cfg.post_norm, cfg.qk_norm) == (False, True, True)
    assert not hasattr(model.model.backbone.layers[0], "attn_norm")
    assert model.rotary == (True, False) and cfg.layer_pattern == "rope(window=8)+none"
    family = pretrained.FAMILIES["exaone4"]  # sliding_window null: full and rotating
    null = {"num_hidden_layers": 4, "sliding_window": None}
    assert family.windows(null) == (0,) * 4 and family.rotary(null) == ()
    assert family.defaults["sliding_window"] == 4096  # where config.json names none
    assert family.windows({"num_hidden_layers": 4, "sliding_window": 8}) == (8, 8, 8, 0)
    with pytest.raises(ConfigError, match="^config.json's sliding_window_pattern='LLLG' with no "
                       "layer_types: transformers' exaone4 reads a whole number there"):
        pretrained.load(copy(tmp_path / "lllg", "exaone4", layer_types=None,
                             sliding_window_pattern="LLLG"))
    with pytest.raises(ConfigError, match="^model.pre_norm=false with post_norm=false "
                       "normalises no sublayer"):
        ModelConfig(pre_norm=False)


def test_olmo_normalises_q_and_k_over_the_whole_projection_and_scales_full_layers_alone(
        tmp_path):
    """OLMo 2 and 3: q_norm and k_norm span all heads (model.qk_norm_axes all), output norms
    only; OLMo 3's sliding layers rotate at the same base, unscaled, its full ones with the
    scaling block (the logits: the olmo2 and olmo3 cases)."""
    olmo2 = pretrained.load(FIXTURES / "olmo2")
    cfg = olmo2.model_config
    assert (cfg.qk_norm_axes, cfg.pre_norm, cfg.post_norm) == ("all", False, True)
    assert olmo2.model.backbone.layers[0].attn.q_norm.scale.shape == (2 * 16,)
    assert olmo2.model.backbone.layers[0].attn.k_norm.scale.shape == (1 * 16,)
    olmo3 = pretrained.load(copy(tmp_path, "olmo3", rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}))
    assert olmo3.windows == (8, 0) and dict(olmo3.encoding.scaling)["factor"] == 4.0
    assert olmo3.model_config.layer_pattern == (
        "rope(theta=500000.0,scaling=None,window=8)+rope")
    with pytest.raises(ConfigError, match="^model.qk_norm_axes='all' says how qk_norm "
                       "normalises, and qk_norm is false"):
        ModelConfig(qk_norm_axes="all")


def _loads_wrapped(tmp_path, family: str, model_type: str) -> None:
    """The family's fixture as a multimodal snapshot (model_type `model_type`): its
    text_config names only what differs from the family's defaults, its text model's tensors
    sit under language_model. (transformers 5.24's save of Gemma3ForConditionalGeneration
    and Llama4ForConditionalGeneration) beside a vision tower's, which posjax leaves unread;
    it scores as transformers scored the text model alone."""
    defaults = pretrained.FAMILIES[family].defaults
    config = json.loads((FIXTURES / family / "config.json").read_text())
    sparse = {k: v for k, v in config.items() if defaults.get(k, KeyError) != v}
    directory = tmp_path / f"{model_type}-mm"
    directory.mkdir()
    shutil.copy(FIXTURES / family / "tokenizer.json", directory)
    tensors = safetensors.numpy.load_file(FIXTURES / family / "model.safetensors")
    safetensors.numpy.save_file({
        **{f"language_model.{name}": value for name, value in tensors.items()},
        "vision_tower.embeddings.patch_embedding.weight": np.ones((4, 3, 2, 2), np.float16),
        "multi_modal_projector.mm_input_projection_weight": np.ones((4, 32), np.float16)},
        directory / "model.safetensors")
    _write(directory, "config.json", json.dumps({
        "model_type": model_type, "text_config": sparse, "vision_config": {"hidden_size": 4}}))
    loaded = pretrained.load(directory)
    assert set(files.read_weights(directory, "language_model.")) == {
        f"language_model.{name}" for name in tensors}  # the vision tower is never read
    np.testing.assert_allclose(loaded.logits(np.load(FIXTURES / family / "tokens.npy")),
                               np.load(FIXTURES / family / "default.tokens.npy"), rtol=0,
                               atol=1e-4)


def test_a_multimodal_gemma3_snapshot_loads_its_text_model(tmp_path):
    """Gemma 3 4B-27B are multimodal snapshots (model_type gemma3, `_loads_wrapped`)."""
    family = pretrained.FAMILIES["gemma3_text"]
    config = json.loads((FIXTURES / "gemma3_text" / "config.json").read_text())
    sparse = {k: v for k, v in config.items() if family.defaults.get(k, KeyError) != v}
    assert {"rms_norm_eps", "tie_word_embeddings", "hidden_activation"}.isdisjoint(sparse)
    _loads_wrapped(tmp_path, "gemma3_text", "gemma3")
    # what a 4B's text_config leaves out is Gemma3TextConfig's default
    _, _, full, prefix = loader.family_of({"model_type": "gemma3", "text_config": {
        "model_type": "gemma3_text", "hidden_size": 2560, "num_hidden_layers": 34}})
    fields = family.model(full)
    assert prefix == "language_model." and (fields["d_model"], fields["num_layers"]) == (2560, 34)
    assert (fields["num_heads"], fields["num_kv_heads"], fields["head_dim"]) == (8, 4, 256)
    assert family.windows(full) == ((4096,) * 5 + (0,)) * 5 + (4096,) * 4


def _layer_pattern(family: str, config: dict) -> str:
    """The layer_pattern the family's loader gives config.json's layers (its defaults filled)."""
    family = pretrained.FAMILIES[family]
    config = {**family.defaults, **config}
    return layer_fields(family.windows(config), family.rotary(config), family.ropes(config),
                        family.settings(config))["layer_pattern"]


def test_llama4_reads_its_irope_schedule_and_its_experts_among_dense_layers(tmp_path):
    """Llama 4's layers as Llama4TextConfig lays them out (their logits: the llama4_text
    cases): chunked RoPE layers, their q and k divided by their RMS; full-attention NoPE
    layers, their queries' temperature a RoPE that turns nothing (p=0); dense layers among
    the experts. Scout's and Maverick's schedules from the defaults; the multimodal snapshots
    (model_type llama4) load their text model."""
    llama4 = pretrained.load(FIXTURES / "llama4_text")
    assert llama4.model_config.layer_pattern == (
        "rope(attention_chunk=8,moe_experts=0)"
        "+rope(p=0.0,temperature_floor=4,temperature_scale=0.1,qk_norm=false)")
    assert ("swiglu experts, top 1 of 4, 16 wide, a shared one 16 wide, on 1 of 2 layers, the "
            "others swiglu MLP 64; trained at 32 tokens, chunks of 8 on 1 of 2 layers, NoPE on 1 "
            "of 2 layers;") in repr(llama4)
    nope = "rope(p=0.0,temperature_floor=8192,temperature_scale=0.1"
    assert _layer_pattern("llama4_text", {}) == (  # Scout: experts on every layer
        f"rope(attention_chunk=8192)*3+{nope},qk_norm=false)")
    maverick = {"interleave_moe_layer_step": 2, "use_qk_norm": False, "attention_chunk_size": 4}
    assert _layer_pattern("llama4_text", maverick) == (
        "rope(attention_chunk=4,moe_experts=0)+rope(attention_chunk=4)"
        f"+rope(attention_chunk=4,moe_experts=0)+{nope})")
    assert _layer_pattern("llama4_text", {"attn_temperature_tuning": False, "num_hidden_layers": 4,
                                          "moe_layers": [0, 1, 2]}) == (
        "rope(attention_chunk=8192)*3+none(qk_norm=false,moe_experts=0)")
    with pytest.raises(ConfigError, match=r"^config.json's moe_layers=\[7\] is not a list of "
                       "layer indices below 2"):
        pretrained.load(copy(tmp_path, "llama4_text", moe_layers=[7]))
    _loads_wrapped(tmp_path, "llama4_text", "llama4")


def test_deepseek_v3_reads_latent_attention_and_routed_groups_and_skips_its_mtp_layer(
        tmp_path):
    """DeepSeek-V3's latent attention and experts as posjax's (their logits: the deepseek_v3
    cases, YaRN's DeepSeek block among them); its first layers dense; the hub's snapshots
    hold a multi-token-prediction layer past num_hidden_layers, which is left unread; an FP8
    snapshot and values narrower than the keys' latent part are refused in one line."""
    deepseek = pretrained.load(FIXTURES / "deepseek_v3")
    cfg = deepseek.model_config
    assert cfg.layer_pattern == "rope(moe_experts=0)+rope"
    assert (cfg.kv_lora_rank, cfg.q_lora_rank, cfg.resolved_head_dim) == (16, 24, 24)
    assert deepseek.encoding.rot_dim(24) == 8 and deepseek.encoding.attention_factor_dims == "all"
    assert (cfg.moe_groups, cfg.moe_top_groups, cfg.moe_route_scale) == (4, 2, 2.5)
    directory = copy(tmp_path, "deepseek_v3")
    tensors = safetensors.numpy.load_file(directory / "model.safetensors")
    safetensors.numpy.save_file({**tensors, "model.layers.2.eh_proj.weight": np.ones(
        (32, 64), np.float16)}, directory / "model.safetensors")
    np.testing.assert_allclose(  # num_nextn_predict_layers=1: layer 2 is the MTP layer
        pretrained.load(directory).logits(np.load(FIXTURES / "deepseek_v3" / "tokens.npy")),
        np.load(FIXTURES / "deepseek_v3" / "default.tokens.npy"), rtol=0, atol=1e-4)
    config = json.loads((directory / "config.json").read_text())
    _write(directory, "config.json", json.dumps({**config, "num_nextn_predict_layers": 0}))
    with pytest.raises(ConfigError, match="tensor 'model.layers.2.eh_proj.weight' is not read"):
        pretrained.load(directory)
    with pytest.raises(ConfigError, match="^config.json's quantization_config stores the "
                       "weights in FP8"):
        pretrained.load(copy(tmp_path / "fp8", "deepseek_v3",
                             quantization_config={"quant_method": "fp8"}))
    with pytest.raises(ConfigError, match="^config.json has v_head_dim=8 and qk_nope_head_dim"):
        pretrained.load(copy(tmp_path / "narrow", "deepseek_v3", v_head_dim=8))
    settings = pretrained.FAMILIES["deepseek_v3"].settings
    assert settings({"num_hidden_layers": 3, "first_k_dense_replace": 0}) == ("",) * 3
    with pytest.raises(ConfigError, match="first_k_dense_replace=-1 is not a whole number"):
        settings({"num_hidden_layers": 3, "first_k_dense_replace": -1})
    glm = pretrained.load(FIXTURES / "glm4_moe")  # GLM-4.5: DeepSeek-V3's experts, GQA
    assert glm.model_config.layer_pattern == "rope(moe_experts=0)+rope"
    assert (glm.encoding.fraction, glm.model_config.qk_norm, glm.model_config.moe_groups) == (
        0.5, True, 2)


def test_phi3_rotates_its_partial_share_and_splits_its_fused_projections(tmp_path):
    """Phi-3's partial_rotary_factor (Phi-4-mini's 0.75) rotates the first share of each head
    (its logits: the phi3 cases); without it the whole head rotates and the logits move. Its
    fused qkv_proj holds fewer key/value rows than query rows (grouped-query heads)."""
    phi = pretrained.load(FIXTURES / "phi3")
    assert phi.encoding.fraction == 0.5 and phi.model_config.resolved_kv_heads == 1
    assert "rotating 0.5 of each head" in repr(phi)
    tokens = np.load(FIXTURES / "phi3" / "tokens.npy")
    whole = pretrained.load(copy(tmp_path, "phi3", partial_rotary_factor=None))
    assert whole.encoding.fraction == 1.0
    assert np.abs(whole.logits(tokens) - np.load(FIXTURES / "phi3" / "default.tokens.npy")
                  ).max() > 0.01


@pytest.mark.parametrize("family", ["mistral", "qwen2"])
def test_biases_the_family_fixes_ignore_config_json(tmp_path, family):
    """attention_bias and mlp_bias are Llama's switches: transformers' Mistral and Qwen2 fix
    their biases (Qwen2: on q, k and v only) and never read them, where posjax refused the
    snapshot for a missing bias tensor."""
    model = pretrained.load(copy(tmp_path, family, attention_bias=True, mlp_bias=True))
    tokens = np.load(FIXTURES / family / "tokens.npy")
    np.testing.assert_allclose(model.logits(tokens),
                               np.load(FIXTURES / family / "default.tokens.npy"), rtol=0,
                               atol=1e-4)


@pytest.mark.parametrize("tokens,message", [
    (np.zeros((2, 3, 1), np.int32),
     "logits takes integer token ids [batch, length], got int32[2, 3, 1]"),
    (np.zeros((2, 3), np.float32),
     "logits takes integer token ids [batch, length], got float32[2, 3]"),
    (np.full((1, 3), 96), "token ids must lie in [0, 96) (config.json's vocab_size), got 96..96"),
])
def test_bad_token_ids_are_one_line(tokens, message):
    with pytest.raises(ConfigError) as err:
        pretrained.load(FIXTURES / "llama").logits(tokens)
    assert str(err.value) == message


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(("key", "value"), [("num_attention_heads", "two"),
                                            ("hidden_size", 0), ("num_hidden_layers", 1.5)])
def test_a_size_in_config_json_that_is_no_whole_number_is_one_line(tmp_path, family, key,
                                                                    value):
    """"num_attention_heads": "two" ended in a TypeError traceback."""
    with pytest.raises(ConfigError, match=f"^config.json's {key}={value!r} is not a positive "
                       "whole number: the snapshot's config.json is damaged"):
        pretrained.load(copy(tmp_path, family, **{key: value}))
