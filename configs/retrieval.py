"""Retrieval trained from scratch: a causal LM trained on passkey, needle, mqar or flipflop
trials (posjax.data.retrieval) of up to seq_len tokens, optionally mixed with the stdlib
corpus, and scored per (length, depth) cell up to 16x (posjax.eval.retrieval).

    posjax train --config=configs/retrieval.py:encoding=rope,task=passkey --workdir=DIR
    posjax extrapolate --workdir=DIR             # its task -> retrieval_passkey.json / .png
    posjax extrapolate --workdir=DIR --rope_scaling=yarn   # a length extension, no training
    posjax sweep --config=configs/retrieval.py:task=flipflop,seeds=3 --workdir=SWEEPDIR
    posjax plot SWEEPDIR                         # one heatmap per run, accuracy against length

Arg keys (defaults below) plus any hyperparameter of the chosen encoding and any model, train
or eval field (`layer_pattern=gdn+none` trains a hybrid on the task). Trials are drawn
at lengths train_min..seq_len tokens with the key at a uniform depth (a needle trial holds
about 213 tokens at least, above the default train_min of seq_len / 2 = 128:
`task=needle,train_min=224`); only the answer's
tokens are scored in training (and every token of the corpus documents mixed in at the
share text_mix). Any trained causal LM, e.g. one of configs/lm.py, is scored on the same
tasks without training on them: `posjax extrapolate --workdir=RUN --eval=passkey`.
"""

from posjax import config as configlib
from posjax.data import retrieval

SIZES = {
    # d_model, num_layers, num_heads, head_dim, mlp_dim, batch_size (rows), steps
    "smoke": configlib.SMOKE_SIZE,
    "main": dict(d_model=128, num_layers=4, num_heads=4, head_dim=32, mlp_dim=512,
                 batch_size=32, steps=3000),
    # experiments/retrieval's budget: 2 layers of width 64, 600 steps, in which most
    # encodings learn passkey at 256 bytes (its README says which do not)
    "study": dict(d_model=64, num_layers=2, num_heads=4, head_dim=16, mlp_dim=256,
                  batch_size=16, steps=600),
}

# Any model, train or eval field is an arg key too (layer_pattern=gdn+none, qk_norm=true, ...:
# `posjax list fields`), set last so that what the user typed wins over the size.
FIELDS_AS_ARGS = True
DEFAULTS = dict(
    encoding="rope",
    task="passkey",
    seq_len=256,  # the longest trial trained on, in tokens (bytes)
    train_min=0,  # 0: seq_len // 2
    passkey_intro=False,  # the paper's task line costs about 150 of the seq_len bytes
    text_mix=0.0,  # share of training documents from the stdlib corpus
    size="main",
    smoke=False,
    steps=0,  # 0: the size's budget
    batch_size=0,  # 0: the size's batch
    learning_rate=1e-3,
    pose=0,  # PoSE: the target length the training positions reach (0: off)
    pose_chunks=2,
    rope_scaling="",  # the evaluation's length extension (config.eval.rope_scaling)
    max_factor=16,  # evaluated at seq_len * 1, 2, 4, ..., max_factor
    seed=0,
    # sweep only: the encodings compared
    encodings=("none", "learned", "sinusoidal", "rope", "alibi", "t5", "xpos", "fire"),
)


def get_config(arg: str = ""):
    a = configlib.parse_arg(arg, DEFAULTS, fields=FIELDS_AS_ARGS)
    configlib.check_sweep_encodings(a, arg)
    size, dims, batch, steps = configlib.size_budget(a, SIZES, arg)
    retrieval.PROBES.lookup(a.task)
    config = configlib.base_config(
        encoding=a.encoding, encoding_overrides=dict(a), kind="causal_lm",
        dataset="retrieval", stages=((a.seq_len, batch, steps),), smoke=size == "smoke")
    configlib.apply_size(config, dims, steps)
    config.data.update(task=a.task, train_lengths=(a.train_min or a.seq_len // 2, a.seq_len),
                       passkey_intro=a.passkey_intro, text_mix=a.text_mix)
    config.train.learning_rate = a.learning_rate
    config.train.pose = a.pose
    config.train.pose_chunks = a.pose_chunks
    config.train.seed = a.seed
    config.eval.rope_scaling = a.rope_scaling
    # a learned table is scored past its rows with Su's hierarchical extension
    config.eval.learned_extension = "hierarchical"
    config.eval.lengths = configlib.doubling_lengths(a.seq_len, a.max_factor, "max_factor")
    configlib.set_fields(config, arg, a, DEFAULTS, smoke=size == "smoke")
    return config


def sweep(add, arg: str = ""):
    """Each encoding of `encodings` on the arg's task (`seeds=N` in the arg: N seeds each)."""
    a = configlib.parse_arg(arg, DEFAULTS, fields=FIELDS_AS_ARGS)
    for encoding in a.encodings:
        add(encoding=encoding)
