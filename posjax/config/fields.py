"""Every field of the model, train and eval sections, defined once with its default and a
one-line description (`posjax list fields`; the data section's fields are
posjax.data.kinds'). Tuples, not lists: ConfigDict keeps their type."""

from __future__ import annotations

from posjax import data

Field = data.kinds.Field
MODEL_FIELDS = {
    "d_model": Field(256, "width of the residual stream"),
    "num_layers": Field(4, "Transformer blocks"),
    "num_heads": Field(4, "attention (query) heads"),
    "head_dim": Field(64, "width of each attention head"),
    "mlp": Field("gelu", "the MLP: gelu, gelu_exact, swiglu, geglu or swiglu_clamped (GPT-OSS)"),
    "mlp_dim": Field(1024, "hidden width of the MLP"),
    "norm": Field("layernorm", "the normalisation: layernorm, layernorm_no_bias, rmsnorm or "
                               "rmsnorm_no_scale"),
    "dropout": Field(0.0, "dropout rate while training"),
    "param_dtype": Field("float32", "dtype the parameters are stored in"),
    "dtype": Field("auto", "compute dtype; auto: bfloat16 on GPU and TPU, float32 on CPU"),
    "attention": Field("auto", "auto (cuDNN where it serves, else dense up to dense_max_len "
                               "and chunked above; flash_bias above it on a GPU for a bias "
                               "it carries), dense, chunked, fused, flash_bias or linear"),
    "dense_max_len": Field(1024, "auto attention: the longest sequence attended densely"),
    "block_size": Field(256, "chunked attention: keys per block"),
    "linear_feature": Field("elu", "linear attention: the feature map, elu (elu + 1) or cos"),
    "tie_embeddings": Field(False, "causal LM: the output projection is the token embedding"),
    "embed_scale": Field(False, "token embeddings times sqrt(d_model) (Vaswani et al.)"),
    "output": Field("pooled", "patch model's read-out: pooled or per_patch"),
    "pooling": Field("cls", "classifier's pooled representation: cls (the first token through "
                            "BERT's tanh pooler) or mean (over non-padding tokens)"),
    "absolute_last_layers": Field(0, "k > 0: a learned absolute table into the last k layers "
                                     "(DeBERTa's enhanced mask decoder)"),
    "share_position_params": Field(False, "one copy of the encoding's attention-site "
                                          "parameters for all layers"),
    "layer_pattern": Field("", 'per-layer encodings joined by "+", cycled '
                               '("rope+rope+rope+none"); "" = the encoding everywhere; '
                               '"gdn" = a Gated DeltaNet layer (no encoding); an entry may '
                               'set its encoding\'s hyperparameters, window, '
                               'attention_chunk, qk_norm and moe_experts, and repeat: '
                               '"rope(theta=1e4,window=1024)*5+rope(theta=1e6)"'),
    "window": Field(0, "W > 0: causal sliding-window attention, each query sees its W latest "
                       "keys (a layer_pattern entry's window= wins); 0 = full attention"),
    "attention_chunk": Field(0, "C > 0: chunked attention (Llama 4), each query sees only the "
                                "keys of its chunk of C tokens (a layer_pattern entry's "
                                "attention_chunk= wins); 0 = none"),
    "qkv_bias": Field(True, "a bias on the q, k, v projections"),
    "attn_out_bias": Field(True, "a bias on the attention output projection"),
    "head_bias": Field(True, "a bias on the causal LM's untied output projection"),
    "norm_eps": Field(1e-6, "epsilon of every normalisation layer"),
    "parallel_residual": Field(False, "attention and MLP both read the block's input (NeoX)"),
    "output_gate": Field("none", "a sigmoid gate on each head's output from the layer's input "
                                 "(Qiu et al. 2025): none, elementwise or headwise"),
    "sink_logit": Field(False, "a learned logit per head in the softmax's denominator "
                               "(GPT-OSS): dense, chunked, auto"),
    "attn_softcap": Field(0.0, "c > 0: every attention logit becomes c tanh(s / c) (Gemma 2: "
                               "50): dense, chunked, auto; 0 = none"),
    "final_softcap": Field(0.0, "c > 0: the model's output logits become c tanh(z / c) (Gemma "
                                "2: 30); 0 = none"),
    "kv_lora_rank": Field(0, "d_c > 0: multi-head latent attention (DeepSeek-V2): keys and "
                             "values from a latent of d_c dims, the keys' rotated dims (rope's "
                             "fraction) one projection shared by the heads; 0 = off"),
    "q_lora_rank": Field(0, "with kv_lora_rank: queries from a latent of this many dims "
                            "(DeepSeek-V2, V3: 1536); 0 = full rank"),
    "moe_experts": Field(0, "E > 0: every MLP is a mixture of E experts, model.mlp's gated MLP "
                            "each (Mixtral, Qwen3-MoE); 0 = one MLP"),
    "moe_balance": Field(0.01, "with moe_experts: the load-balancing loss's weight in the "
                               "training loss (Switch Transformer's 0.01; 0 = none)"),
    "moe_top_k": Field(2, "with moe_experts: the experts each token goes to"),
    "moe_norm_top_k": Field(True, "with moe_experts: the top-k router weights renormalised to "
                                  "sum to 1 (Mixtral; Qwen3-MoE's norm_topk_prob)"),
    "moe_router": Field("softmax", "with moe_experts: the router's scores, softmax over the "
                                   "experts or sigmoid of each (Llama 4)"),
    "moe_scale_input": Field(False, "with moe_experts: each expert reads its token times its "
                                    "router weight, its output unweighted (Llama 4)"),
    "moe_shared_dim": Field(0, "with moe_experts: F > 0 adds a shared expert F wide that "
                               "every token goes through (Llama 4); 0 = none"),
    "moe_shared_gate": Field(False, "with moe_shared_dim: the shared expert's output times a "
                                    "sigmoid gate per token (Qwen2-MoE)"),
    "moe_choice_bias": Field(False, "with moe_experts: a bias per expert on the scores the "
                                    "choice reads, not on the weights (DeepSeek-V3)"),
    "moe_groups": Field(1, "with moe_experts: groups of experts (DeepSeek-V3: 8); 1 = none"),
    "moe_top_groups": Field(1, "with moe_groups: the groups each token chooses among, by "
                               "their two best scores (DeepSeek-V3: 4)"),
    "moe_route_scale": Field(1.0, "with moe_experts: the routed experts' weights times this "
                                  "(DeepSeek-V3's routed_scaling_factor, 2.5)"),
    "qk_norm": Field(False, "RMSNorm of q and k per head over head_dim, before the rotation "
                            "(Qwen3, Gemma 3)"),
    "qk_norm_axes": Field("head", "what qk_norm normalises over: head (each head's head_dim, "
                                  "one scale for all heads), per_head (each head's head_dim, "
                                  "its own scale: Command R+) or all (the whole projection: "
                                  "OLMo 2, 3)"),
    "qk_norm_type": Field("rmsnorm", "the norm qk_norm applies, as model.norm's: rmsnorm, "
                                     "layernorm_no_bias (Command R+), layernorm or "
                                     "rmsnorm_no_scale (Llama 4)"),
    "post_norm": Field(False, "a norm on each sublayer's output too, before the residual add "
                              "(Gemma 2, 3)"),
    "pre_norm": Field(True, "a norm on each sublayer's input; false with post_norm: the "
                            "output norms alone (OLMo 2, EXAONE 4)"),
    "init": Field("posjax", "initialisation of embeddings and projections: posjax (N(0, 0.02) "
                            "embeddings, lecun-normal), gpt2, pytorch (nn.Linear, "
                            "nn.Embedding defaults) or xtransformers (kaiming-normal "
                            "embeddings, nn.Linear's defaults)"),
}
# Model fields that are None unless set: typed placeholders, so --config.model.KEY=V works.
MODEL_PLACEHOLDERS = {
    "grid_width": (int, "patch model: patches per row of the widest grid (raster index)"),
    "num_kv_heads": (int, "grouped-query attention: key/value heads (None: num_heads)"),
    "mlp_bias": (bool, "biases in the MLP (None: the MLP's own, gelu biased, swiglu not; a "
                       "mixture of experts': its router and experts, GPT-OSS)"),
    "moe_mlp_dim": (int, "with moe_experts: each expert's hidden width (None: mlp_dim)"),
}
TRAIN_FIELDS = {
    "learning_rate": Field(1e-3, "peak learning rate, reached after warmup_steps"),
    "schedule": Field("cosine", "after warm-up: cosine (decay to 0 at the last step) or "
                                "constant"),
    "schedule_restarts": Field((), "steps where the schedule starts again: warm-up, then "
                                   "its decay to the next restart or the end (DroPE's "
                                   "recalibration, drope_restart in configs/lm.py)"),
    "warmup_steps": Field(100, "linear warm-up steps (a config file's size sets "
                               "min(100, steps / 10); --config.train.warmup_steps wins)"),
    "optimizer": Field("adamw", "an optax optimizer by name (posjax.train.optim.OPTIMIZERS)"),
    "optimizer_args": Field('{"b1": 0.9, "b2": 0.98}', "the optimizer's keyword arguments "
                                                       "beyond the learning rate, as JSON"),
    "weight_decay": Field(0.01, "weight decay on matrices (decoupled where the optimizer "
                                "takes it, else added to the gradient)"),
    "grad_clip": Field(1.0, "clip gradients to this global norm"),
    "log_every_steps": Field(10, "metrics.jsonl and TensorBoard every this many steps"),
    "checkpoint_every_steps": Field(200, "a checkpoint every this many steps"),
    "checkpoint_every_minutes": Field(5.0, "also a checkpoint when this many minutes passed "
                                           "since the last (0: off; one process only)"),
    "eval_every_steps": Field(0, "held-out loss every this many steps (0: at stage ends)"),
    "eval_batches": Field(4, "batches of each held-out evaluation (0: none)"),
    "randomize_positions": Field(0, "M > 0: draw each segment's positions from [0, M)"),
    "pose": Field(0, "PoSE (Zhu et al. 2024): the target length the training positions "
                     "reach; 0 = off"),
    "pose_chunks": Field(2, "PoSE: chunks the training positions are cut into"),
    "seed": Field(0, "seed of the initialisation and the data order"),
    "stage_encodings": Field((), 'per stage, the encoding it trains with ("" or none given: '
                                 'config.encoding), e.g. ("rope", "") with encoding none: '
                                 "DroPE's RoPE, then NoPE; NAME(KEY=VALUE,...) sets its "
                                 "hyperparameters (rope(theta=500000)); same parameters only"),
    "reference": Field("", "what the stage schedule scales down (configs/mlm.py: RoFormer's "
                           "Table 4), printed with reference_stages when training starts"),
    "reference_stages": Field((), "the reference's stages (seq_len, batch, steps), printed "
                                  "beside the run's own when training starts"),
    "smoke": Field(False, "a smoke run (a config arg's smoke): it checks the set-up, not a "
                          "result; its plots and tables say so"),
    "init_from": Field("", "a trained run whose parameters start this one where names and "
                           "shapes match (fine-tuning an MLM run's encoder; new heads keep "
                           "their initialisation); '' = none", path=True),
    "distributed": Field(False, "join the run's processes as SLURM, a TPU pod, ... set them"),
    "mesh": Field((("data", -1), ("fsdp", 1)), '(axis, size) pairs, -1 = the devices left '
                                                'over; "fsdp" > 1 shards the state'),
    "sharding_rules": Field(((".*", "fsdp"),), '(regex over a state leaf\'s path, "fsdp" | '
                                               '"replicate"); the first match decides'),
}
EVAL_FIELDS = {
    "lengths": Field((), "evaluation lengths (a config file's default: 1x..16x the training "
                         "length)"),
    "protocol": Field("nonoverlapping", "windowing: nonoverlapping or sliding"),
    "stride": Field(0, "sliding windows: the stride (0: half the training length)"),
    "rope_scaling": Field("", "length extension at evaluation (posjax extrapolate "
                              "--rope_scaling)"),
    "max_tokens": Field(16384, "scored tokens per length"),
    "batch_size": Field(1, "windows per evaluation batch"),
    "learned_extension": Field("", "encoding that extends a learned table past its length "
                                   "('' for none)"),
    "group_factor": Field(4, "lengths share compiled row lengths train_len * group_factor**i "
                             "(1: one per length)"),
}
MODEL_DEFAULTS = {key: field.default for key, field in MODEL_FIELDS.items()}
TRAIN_DEFAULTS = {key: field.default for key, field in TRAIN_FIELDS.items()}
EVAL_DEFAULTS = {key: field.default for key, field in EVAL_FIELDS.items()}
# config.evals: named entries scored while a run trains (posjax.eval.during), each a
# registered evaluation's `type`, `every_steps` and its options. An entry a config arg adds
# (`add_evals`) starts from these options, light enough to run often.
EVALS_OPTIONS = {
    "text": dict(max_tokens=4096),
    **{task: dict(trials=4) for task in ("passkey", "needle", "mqar", "flipflop")},  # retrieval
}

# The sections whose fields a config file's arg may set by name (`fields=True` in parse_arg).
SECTION_FIELDS = {"model": MODEL_FIELDS, "train": TRAIN_FIELDS, "eval": EVAL_FIELDS}


def field_section(key: str) -> str | None:
    """The section (model, train or eval) that defines the field `key`, or None."""
    if key in MODEL_PLACEHOLDERS:
        return "model"
    return next((name for name, fields in SECTION_FIELDS.items() if key in fields), None)
