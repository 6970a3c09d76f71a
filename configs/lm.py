"""Causal language model on the embedded corpus (the running Python's standard library source).

    posjax train --config=configs/lm.py:encoding=rope,theta=10000,seq_len=128 --workdir=DIR
    posjax sweep --config=configs/lm.py:study=main --workdir=SWEEPDIR

Arg keys (defaults below) plus any hyperparameter of the chosen encoding (theta=500 for rope).
`size` picks the model and budget: smoke (seconds, for tests; as deep as a layer_pattern),
main (the README's comparison, minutes on 2 CPU cores), base (the small model of the CPU
benchmarks), gpt2 (GPT-2 small's blocks, the GPU benchmark's model) or gpu (the main study
on one GPU).
`arch` picks the block: posjax's own (LayerNorm, GELU MLP, biased projections) or a Hugging
Face family's, the same blocks posjax.pretrained loads checkpoints into, trained from scratch:

    posjax train --config=configs/lm.py:arch=llama,encoding=rope,layout=half --workdir=DIR

Seven `arch`es are per-layer schedules (model.layer_pattern with per-layer settings): gemma2,
gemma3 and gemma4 (Gemma's blocks; gemma2's without QK-norm, its attention and output logits
soft-capped at 50 and 30), swan (SWAN-GPT, posjax's blocks) and cohere2 (Command R7B's
blocks; its global layers NoPE, as swan's) are local/global, smollm3 (Llama's blocks) is three
RoPE layers per NoPE layer, llama4 (Llama's blocks) the same with chunked attention on the
RoPE layers and a query temperature on the NoPE one. The local layers read model.window (and
llama4's model.attention_chunk), so `window=W` (`attention_chunk=C`) scales the window (the
chunk) to a short training length:

    posjax train --config=configs/lm.py:arch=gemma3,window=32 --workdir=DIR
    posjax train --config=configs/lm.py:arch=llama4,attention_chunk=32 --workdir=DIR
"""

from posjax import config as configlib
from posjax.errors import ConfigError

SIZES = {
    # d_model, num_layers, num_heads, head_dim, mlp_dim, batch_size, steps
    "smoke": configlib.SMOKE_SIZE,
    "main": dict(d_model=128, num_layers=2, num_heads=4, head_dim=32, mlp_dim=512,
                 batch_size=16, steps=600),
    "base": dict(d_model=256, num_layers=4, num_heads=4, head_dim=64, mlp_dim=1024,
                 batch_size=8, steps=3000),
    # GPT-2 small's blocks (124M with GPT-2's vocabulary; 85M with bytes): the GPU benchmark's
    # model (scripts/gpu_check.sh, at seq_len 1024).
    "gpt2": dict(d_model=768, num_layers=12, num_heads=12, head_dim=64, mlp_dim=3072,
                 batch_size=16, steps=3000),
    # The main study on one GPU (experiments/main_gpu): 10.8 M parameters, 400 steps of
    # 128 x 256 tokens (13.1 M tokens a run).
    "gpu": dict(d_model=384, num_layers=6, num_heads=6, head_dim=64, mlp_dim=1536,
                batch_size=128, steps=400),
}

# The model blocks of each `arch` (config.model keys); "llama", "qwen2", "qwen3" and "smollm3"
# share key/value heads between pairs of query heads (grouped-query attention, num_kv_heads =
# num_heads / 2).
ARCHS = {
    "posjax": {},
    "llama": dict(norm="rmsnorm", mlp="swiglu", norm_eps=1e-5, qkv_bias=False,
                  attn_out_bias=False, head_bias=False),
    "qwen2": dict(norm="rmsnorm", mlp="swiglu", norm_eps=1e-6, qkv_bias=True,
                  attn_out_bias=False, head_bias=False),
    # Qwen3: no biases, q and k RMS-normalised per head before the rotation
    "qwen3": dict(norm="rmsnorm", mlp="swiglu", norm_eps=1e-6, qkv_bias=False,
                  attn_out_bias=False, head_bias=False, qk_norm=True),
    "gpt_neox": dict(norm="layernorm", mlp="gelu_exact", norm_eps=1e-5, parallel_residual=True,
                     head_bias=False),
}
GROUPED_QUERY_ARCHS = ("llama", "qwen2", "qwen3", "smollm3", "llama4")

# Local/global schedules (posjax.models.pattern). The local entries take model.window (the
# preset's window below; the arg window=W replaces it), the global ones set window=0.
# Gemma 3: 5 sliding layers at theta 10k (window 1024) per global layer at theta 1M; Gemma 4:
# window 512 and a global p-RoPE 0.25 at theta 1M (transformers' "proportional" rope: the
# highest quarter of the frequencies rotate at full-width spacing, the rest are zero; rope's
# `p`, not `fraction`); both with Gemma's blocks (RMSNorm before and after each sublayer,
# GeGLU, QK-norm, no biases, embeddings times sqrt(d_model) and tied). SWAN-GPT (arXiv
# 2504.08719): windowed RoPE layers and a global NoPE layer, here 3 : 1 with window 512 (not
# checked against the authors' code, which is not public; the paper's inference-time log
# scaling of the scores is not applied).
GEMMA_BLOCKS = dict(norm="rmsnorm", mlp="geglu", norm_eps=1e-6, qkv_bias=False,
                    attn_out_bias=False, head_bias=False, qk_norm=True, post_norm=True,
                    embed_scale=True, tie_embeddings=True)
ARCHS.update(
    # Gemma 2: a sliding layer (window 4096) then a global one, every layer at theta 1e4, no
    # QK-norm; attention logits capped at 50, the output's at 30 (c tanh(s / c))
    gemma2=dict(GEMMA_BLOCKS, qk_norm=False, attn_softcap=50.0, final_softcap=30.0,
                window=4096, layer_pattern="rope+rope(window=0)"),
    gemma3=dict(GEMMA_BLOCKS, window=1024,
                layer_pattern="rope(theta=1e4)*5+rope(theta=1e6,window=0)"),
    gemma4=dict(GEMMA_BLOCKS, window=512,
                layer_pattern="rope(theta=1e4)*5+rope(theta=1e6,p=0.25,window=0)"),
    swan=dict(window=512, layer_pattern="rope*3+none(window=0)"),
    # SmolLM3 (Hugging Face 2025): Llama's blocks, tied embeddings, NoPE every 4th layer
    smollm3=dict(ARCHS["llama"], norm_eps=1e-6, tie_embeddings=True, layer_pattern="rope*3+none"),
    # Llama 4's iRoPE (Meta 2025; transformers' modeling_llama4): Llama's blocks, 3 RoPE layers
    # in chunks of 8192 tokens, their q and k divided by their RMS (no scale), per NoPE layer
    # that sees every key and scales its queries by 1 + 0.1 log(floor((m + 1) / 8192) + 1);
    # theta=5e5 is its base. Less its mixture of experts (the llama4_text family's:
    # moe_experts=16,moe_top_k=1,moe_router=sigmoid,moe_scale_input=true,moe_shared_dim=F).
    llama4=dict(ARCHS["llama"], attention_chunk=8192, qk_norm=True,
                qk_norm_type="rmsnorm_no_scale",
                layer_pattern="rope*3+rope(p=0,temperature_floor=8192,attention_chunk=0,"
                              "qk_norm=false)"),
    # Command R7B / Command A (Cohere, 2024-25): one bias-free LayerNorm before attention and
    # the MLP in parallel, SwiGLU, tied embeddings; 3 sliding RoPE layers per full NoPE layer
    cohere2=dict(norm="layernorm_no_bias", mlp="swiglu", norm_eps=1e-5, qkv_bias=False,
                 attn_out_bias=False, head_bias=False, parallel_residual=True,
                 tie_embeddings=True, window=512, layer_pattern="rope*3+none(window=0)"),
)
# A schedule's period in layers: the size's num_layers is rounded up to a multiple of it, so
# every preset has its global layers (main's 2 layers become 6 for gemma3, 4 for swan).
SCHEDULE_PERIODS = {"gemma2": 2, "gemma3": 6, "gemma4": 6, "swan": 4, "smollm3": 4, "cohere2": 4,
                    "llama4": 4}

# The arg's own keys. Any model, train or eval field is an arg key too, by its name, with
# the default and description `posjax list fields` prints (attention=chunked, seed=1,
# layer_pattern=rope+none, pose=1024, qk_norm=true, ...): configlib.set_fields sets them
# last, so what the user typed wins over the size.
FIELDS_AS_ARGS = True
DEFAULTS = dict(
    arch="posjax",
    encoding="rope",
    seq_len=128,
    size="main",
    smoke=False,
    steps=0,  # 0: the size's budget
    batch_size=0,  # 0: the size's batch
    dataset="stdlib_text",
    packing="documents",  # or "stream": rows cut from the concatenated text, no mask
    eval_max_factor=16,
    evals="",  # scored while training: TYPE@EVERY joined by "+" ("text@100+passkey@200")
    drope=0.0,  # F > 0: DroPE, RoPE, then NoPE (the run's encoding) for the last F of the steps
    drope_restart=False,  # DroPE: the recalibration has its own warm-up and decay, not the tail
    study="main",
)


def get_config(arg: str = ""):
    a = configlib.parse_arg(arg, DEFAULTS, fields=FIELDS_AS_ARGS)
    _check_one_run_of_study(arg, a)
    size, dims, batch, steps = configlib.size_budget(a, SIZES, arg)
    stages, encoding = ((a.seq_len, batch, steps),), a.encoding
    if a.drope:  # RoPE's stage, then the recalibration without positions at the same length
        if "encoding" in configlib.arg_keys(arg) and a.encoding != "none":
            raise ConfigError(f"drope={a.drope} trains RoPE, then no positions, and takes no "
                              f"encoding=: drop encoding={a.encoding}, from the arg or the "
                              "config file that passed it on")
        recalibration = max(round(a.drope * steps), 1)
        if not 0 < a.drope < 1 or recalibration >= steps:
            raise ConfigError(f"drope={a.drope}: give the share of the run's {steps} steps "
                              "trained without positions, between 0 and 1 (e.g. drope=0.1)")
        stages = ((a.seq_len, batch, steps - recalibration), (a.seq_len, batch, recalibration))
        encoding = "none"
    elif a.drope_restart:
        raise ConfigError("drope_restart=True restarts DroPE's recalibration: give drope=F "
                          "(the share of steps without positions) too")
    config = configlib.base_config(
        encoding=encoding,
        encoding_overrides=a,
        kind="causal_lm",
        dataset=a.dataset,
        stages=stages,
        smoke=size == "smoke",
        data_overrides=a,  # the dataset's own fields: dataset=local_text,text_glob=...
    )
    configlib.apply_size(config, dims, steps)
    if a.arch not in ARCHS:
        raise configlib.unknown("arch", a.arch, ARCHS)
    config.model.update(ARCHS[a.arch])
    if a.arch in SCHEDULE_PERIODS:
        period = SCHEDULE_PERIODS[a.arch]
        config.model.num_layers = -(-config.model.num_layers // period) * period
    config.train.learning_rate = 2e-3  # this file's studies (learning_rate=V sets another)
    config.data.packing = a.packing
    config.eval.lengths = configlib.doubling_lengths(a.seq_len, a.eval_max_factor,
                                                     "eval_max_factor")
    config.eval.learned_extension = "hierarchical"  # a learned table read past its length
    if a.drope:  # the RoPE stage keeps the rope hyperparameters the arg gives (theta=...)
        config.train.stage_encodings = (configlib.encoding_entry("rope", arg, a), "")
        if a.drope_restart:
            config.train.schedule_restarts = (stages[0][2],)
    if size == "smoke":
        config.eval.max_tokens = 4 * a.seq_len * a.eval_max_factor
        config.train.eval_batches = 1
    configlib.set_fields(config, arg, a, DEFAULTS, smoke=size == "smoke")
    configlib.add_evals(config, a.evals)  # at the eval lengths the arg leaves (lengths=...)
    if a.arch in GROUPED_QUERY_ARCHS and "num_kv_heads" not in configlib.arg_keys(arg):
        # of the heads the arg asks for (num_heads=8: 4), not the size's
        config.model.num_kv_heads = max(config.model.num_heads // 2, 1)
    return config


# The ALiBi-paper style comparison (the README's main job) and the full study.
MAIN_ENCODINGS = ("none", "learned", "sinusoidal", "rope", "alibi", "t5", "xpos")
ALL_ENCODINGS = MAIN_ENCODINGS + ("kerple_log", "fire", "shaw", "xl", "deberta")
THETAS = (100.0, 1000.0, 10000.0, 100000.0, 1000000.0)
EMBED_SCALE_ENCODINGS = ("sinusoidal", "learned", "rope", "alibi")
# The 2024-2026 encodings beside the baselines (experiments/encodings_2024).
CONTENT_ENCODINGS = ("fox", "cope", "path")
BASELINES_2024 = ("none", "rope", "alibi")
# The 2025-2026 encodings beside the same baselines (experiments/encodings_2025).
ENCODINGS_2025 = ("stickbreaking", "ssmax", "vo_rope", "qkvo_rope")
# What the models of 2025-26 put around and instead of positions (experiments/models_2026),
# beside NoPE and RoPE: each point's arg keys. The budget's 2 layers make the Gated DeltaNet
# hybrid and the local/global schedules 1:1 (Qwen3-Next's is 3:1, Gemma 3's 5:1), with a
# local window of 32 of the 128 trained tokens; DroPE recalibrates for the last 60 of 600.
# RNoPE and Llama 4's iRoPE (1:1 here, 3:1 there) differ only in the NoPE layer's query
# temperature, whose floor is the training length here (8192 in Llama 4).
MODELS_2026 = (
    dict(encoding="none"), dict(encoding="rope"),
    dict(encoding="rope", output_gate="headwise"),
    dict(encoding="rope", output_gate="elementwise"),
    dict(encoding="rope", sink_logit=True), dict(encoding="rope", qk_norm=True),
    dict(encoding="pope"), dict(encoding="rope_pp"), dict(encoding="fope"),
    dict(encoding="none", layer_pattern="gdn+none"),
    dict(encoding="none", drope=0.1),
    dict(encoding="none", drope=0.1, drope_restart=True),
    dict(encoding="rope", layer_pattern="rope(window=32)+none"),
    dict(encoding="rope", layer_pattern="rope(theta=1e4,window=32)+rope(theta=1e6)"),
    dict(encoding="rope", layer_pattern="rope+none"),
    dict(encoding="rope", layer_pattern="rope+rope(p=0,temperature_floor=128)"),
)

# DeepSeek-V2's multi-head latent attention with decoupled RoPE (experiments/mla) in the
# models_2026 budget: RoPE; RoPE on 16 of 48 head dims with full-rank keys, the control; and
# latent attention with those 16 rotated dims from one key projection shared by the heads and
# the other 32 (the baseline's head width, and the values') from a latent of 128 per token
# (DeepSeek-V2-Lite's ratios: R = Dn / 2, d_c = 4 Dn, full-rank queries); RoPE on all 48 dims
# tells the rotated share from the head width.
MLA = (
    dict(encoding="rope"),
    dict(encoding="rope", head_dim=48),
    dict(encoding="rope", head_dim=48, fraction=0.34),
    dict(encoding="rope", head_dim=48, fraction=0.34, kv_lora_rank=128),
)

STUDIES = {
    "main": lambda add: [add(encoding=e) for e in MAIN_ENCODINGS],
    "extrapolation": lambda add: [add(encoding=e) for e in ALL_ENCODINGS],
    # Content-dependent positions (FoX, CoPE, PaTH), p-RoPE and a RoPE/NoPE schedule (the main
    # model has 2 layers: the second one NoPE) beside their baselines.
    "encodings_2024": lambda add: [
        *[add(encoding=e) for e in BASELINES_2024 + CONTENT_ENCODINGS],
        add(encoding="rope", p=0.75),
        add(encoding="rope", layer_pattern="rope+none"),
    ],
    # Stick-breaking, SSMax, VO-RoPE (alone and with RoPE), DAPE on its KERPLE bias with
    # KERPLE as the control, and PoSE (RoPE trained at 128 with positions reaching 1024).
    "encodings_2025": lambda add: [
        *[add(encoding=e) for e in BASELINES_2024 + ENCODINGS_2025],
        add(encoding="kerple_log"),
        add(encoding="dape"),
        add(encoding="rope", pose=1024),
    ],
    "models_2026": lambda add: [add(**keys) for keys in MODELS_2026],
    "mla": lambda add: [add(**keys) for keys in MLA],
    "theta": lambda add: [add(encoding="rope", theta=t) for t in THETAS],
    "smoke": lambda add: [add(encoding=e) for e in ("rope", "alibi")],
    # Token embeddings at init std 0.02 against unit-amplitude sinusoids, and scaled by
    # sqrt(d_model) as in Vaswani et al.; other encodings as controls.
    "embed_scale": lambda add: [add(encoding=e, embed_scale=s)
                                for e in EMBED_SCALE_ENCODINGS for s in (False, True)],
    # RoFormer eq. 29: linear attention with RoPE in the numerator (elu + 1), the 1 + cos
    # variant, and softmax attention with RoPE as the reference.
    "linear": lambda add: [
        add(encoding="rope"),
        add(encoding="rope", attention="linear", linear_feature="elu"),
        add(encoding="rope", attention="linear", linear_feature="cos"),
        add(encoding="none", attention="linear", linear_feature="elu"),
    ],
}


def _study(name: str):
    """STUDIES[name], or the one-line refusal naming the studies there are."""
    if name not in STUDIES:
        raise configlib.unknown("study", name, STUDIES)
    return STUDIES[name]


def _check_one_run_of_study(arg: str, a) -> None:
    """`study=S` in one run's arg must come with the keys of one of S's runs, as a sweep's
    per-run args do; alone (`posjax train --config=configs/lm.py:study=theta`) it would train
    the default run as if it were the study."""
    given = configlib.arg_keys(arg)
    if "study" not in given:
        return
    runs = []
    _study(a.study)(lambda **keys: runs.append(keys))
    texts = [",".join(f"{k}={v}" for k, v in keys.items()) for keys in runs]
    for keys, text in zip(runs, texts, strict=True):
        if keys.keys() <= given:
            # typed as the arg's values are, so theta=1e2 is the run's theta=100.0
            run = configlib.parse_arg(text, DEFAULTS, fields=FIELDS_AS_ARGS)
            if all(a[key] == run[key] for key in keys):
                return
    raise ConfigError(
        f"study={a.study} is a sweep of {len(runs)} runs (posjax sweep --config=configs/lm.py:"
        f"study={a.study} trains them) and this arg names none of them: drop study= to train "
        f"the arg's own run, or give one run's keys ({texts[0]})")


def sweep(add, arg: str = ""):
    """One run per encoding (or per theta, ...): `study=` one of STUDIES. An arg that names its
    `encoding=` and no study is one point, its own (with its seeds: `encoding=rope,theta=500,
    seeds=3`), not the default study's encodings."""
    a = configlib.parse_arg(arg, DEFAULTS, fields=FIELDS_AS_ARGS)
    given = configlib.arg_keys(arg)
    if "encoding" in given and "study" not in given:
        add(encoding=a.encoding)
        return
    _study(a.study)(add)
