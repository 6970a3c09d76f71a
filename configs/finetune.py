"""Fine-tuning a pretrained MLM encoder on long-text matching (RoFormer's Table 5 set-up):
the doc_match task (posjax.data.matching, CAIL2019-SCM's form cut from the stdlib corpus)
at one max length, scored by accuracy on its test split (posjax.eval.matching; `posjax plot`
draws the accuracies over seeds: posjax.results.finetune).

    posjax train --config=configs/mlm.py:encoding=rope --workdir=runs/mlm_rope
    posjax train --config=configs/finetune.py:pretrained=runs/mlm_rope,seq_len=64 \
        --workdir=runs/ft_rope_64_{seed} --seeds=0,1,2 --extrapolate
    posjax sweep --config=configs/finetune.py:pretrained=runs/mlm_rope,seeds=3 \
        --workdir=runs/ft_rope --vmap_seeds
    posjax plot runs/ft_rope      # accuracy per length over the seeds: finetune.{json,md,png}

`pretrained=RUN` copies RUN's encoding, model sizes and tokenizer (the classifier is RUN's
encoder plus a pooled head: model.pooling, `cls` by default as RoFormer and BERT fine-tune,
`mean` over the non-padding tokens as the alternative) and starts from RUN's parameters
(train.init_from); an encoding= or an encoding hyperparameter beside it is refused, and a
sweep's run folder, whose name has commas, goes in quotes
(`--config="configs/finetune.py:pretrained='runs/mlm/runs/encoding=rope,seed=0'"`). Without it
the same classifier trains from its own initialisation (the no-pretraining baseline; the
config's own encoding and size). The documents are sized by `long_len`, the longest length of
the study: each of A, B, C has (long_len - 3) / 2 characters, so a run at long_len reads them
whole and a run at long_len / 2 reads half of each (RoFormer's 1024 against 512). The
fine-tune has its own optimizer settings
(learning_rate, steps, batch_size; AdamW with warm-up and cosine decay).
"""

from pathlib import Path

from posjax import config as configlib
from posjax import encoders
from posjax.config import load_config
from posjax.config.args import split_values
from posjax.data.matching import MIN_DOC_CHARS
from posjax.errors import ConfigError, missing_folder, nearest_run_folder
from posjax.train.finetune import check_encoder_run

SIZES = {
    # d_model, num_layers, num_heads, head_dim, mlp_dim (without pretrained=: the model),
    # batch_size, steps, long_len (the documents' length), train / eval triplets
    "smoke": dict(configlib.SMOKE_SIZE, long_len=32, train_examples=64, eval_examples=16),
    # configs/mlm.py's default model at RoFormer's lengths / 8 (512 -> 64, 1024 -> 128)
    "cpu": dict(d_model=128, num_layers=2, num_heads=4, head_dim=32, mlp_dim=512,
                batch_size=16, steps=300, long_len=128, train_examples=4000,
                eval_examples=500),
    # configs/mlm.py size=gpu's model at RoFormer's lengths / 2 (512 -> 256, 1024 -> 512)
    "gpu": dict(d_model=512, num_layers=4, num_heads=8, head_dim=64, mlp_dim=2048,
                batch_size=32, steps=2000, long_len=512, train_examples=20_000,
                eval_examples=1000),
}

DEFAULTS = dict(
    # a trained MLM run (configs/mlm.py) to fine-tune; "" = from scratch
    pretrained=configlib.PathText(""),
    encoding="rope",  # without pretrained= only (a pretrained run brings its own)
    seq_len=0,  # the max length fine-tuned at (0: the size's long_len)
    long_len=0,  # the documents' length: (long_len - 3) / 2 characters each (0: the size's)
    pooling="cls",
    size="cpu",
    smoke=False,
    steps=0,  # 0: the size's
    batch_size=0,  # 0: the size's
    learning_rate=3e-4,
    max_depth=0.9,
    seed=0,
    # sweep only: the lengths compared, as fractions of long_len (seeds=N in the sweep's
    # arg runs each N times; --vmap_seeds trains them in one vmapped program)
    fractions=(0.5, 1.0),
)


def get_config(arg: str = ""):
    a = configlib.parse_arg(arg, DEFAULTS)
    size, dims, batch, steps = configlib.size_budget(a, SIZES, arg)
    long_len = a.long_len or dims["long_len"]
    if (long_len - 3) // 2 < MIN_DOC_CHARS:  # it said data.doc_chars=0, a field not given
        raise ConfigError(f"long_len={long_len} cuts documents of {(long_len - 3) // 2} "
                          f"characters, fewer than the {MIN_DOC_CHARS} a triplet needs: "
                          f"give long_len >= {2 * MIN_DOC_CHARS + 3}")
    seq_len = a.seq_len or long_len
    if seq_len > long_len:  # the rest of each row would be padding, under the longer name
        raise ConfigError(f"seq_len={seq_len} reads past the documents, sized for "
                          f"long_len={long_len} (a run at long_len reads them whole): give "
                          f"seq_len <= {long_len}, or long_len={seq_len}")
    if "fractions" in configlib.arg_keys(arg):
        _fine_tune_lengths(a.fractions, long_len)
        if "seq_len" not in configlib.arg_keys(arg):  # a sweep's run has its own
            raise ConfigError(f"fractions={'+'.join(map(str, a.fractions))} names the runs of "
                              "posjax sweep, one per length; one run trains one: give "
                              "seq_len=N, or drop fractions=")
    config = configlib.base_config(encoding=a.encoding, encoding_overrides=dict(a),
                                   kind="classifier", dataset="doc_match",
                                   stages=((seq_len, batch, steps),),
                                   smoke=size == "smoke")
    configlib.apply_size(config, dims, steps)
    if a.pretrained:
        pretrained = load_config(_pretrained_run(a.pretrained, arg), flag="pretrained")
        check_encoder_run(f"pretrained={a.pretrained}", pretrained.model.kind,
                          pretrained.train.get("init_from", ""))
        _check_no_encoding_args(arg, a.pretrained, pretrained.encoding.name)
        config.encoding = pretrained.encoding
        config.model.update({**pretrained.model.to_dict(), "kind": "classifier"})
        for key in ("tokenizer", "sentencepiece_model", "sentencepiece_vocab_size",
                    "sentencepiece_model_type", "sentencepiece_train_chars", "data_dir"):
            config.data[key] = pretrained.data[key]
        config.train.init_from = str(a.pretrained)
    config.model.pooling = a.pooling
    config.data.update(doc_chars=(long_len - 3) // 2, max_depth=a.max_depth,
                       num_train_examples=dims["train_examples"],
                       num_eval_examples=dims["eval_examples"])
    config.train.learning_rate = a.learning_rate
    config.train.seed = a.seed
    config.train.eval_batches = 2 if size == "smoke" else 8
    config.eval.batch_size = 4 if size == "smoke" else 16
    config.eval.lengths = (seq_len,)
    return config


def _pretrained_run(path: str, arg: str) -> str:
    """`path`, where it is a folder; else a one-line ConfigError: where a sweep's run folder
    (its name has commas) was cut at a comma, the quoted form of the folder the arg's next
    pairs complete (else of the nearest such folder); otherwise naming pretrained=."""
    if Path(path).is_dir():
        return path
    pairs = split_values(arg)
    rest = pairs[pairs.index(f"pretrained={path}") + 1:] if f"pretrained={path}" in pairs else []
    cut = [",".join([path, *rest[:n]]) for n in range(1, len(rest) + 1)]
    nearest = next((c for c in cut if Path(c).is_dir()), None) or nearest_run_folder(path)
    if nearest and "," in Path(nearest).name:
        raise ConfigError(
            f"pretrained={path} does not exist (did you mean {nearest}?): a run folder with "
            f"commas in its name goes in quotes, "
            f"--config=\"configs/finetune.py:pretrained='{nearest}'\"")
    raise missing_folder(path, "pretrained= names the masked-LM run whose encoding, sizes and "
                         "tokenizer this config copies, a resumed fine-tune's too: give its "
                         "folder, put it back, or pretrain it first (posjax train "
                         f"--config=configs/mlm.py:encoding=rope --workdir={path})")


def _check_no_encoding_args(arg: str, run: str, name: str) -> None:
    """pretrained= brings the run's encoding and its settings: a one-line ConfigError where
    the arg also names an encoding or one of its hyperparameters (they would be ignored)."""
    given = configlib.arg_keys(arg)
    keys = sorted(given & {"encoding", *(k for n in encoders.names()
                                         for k in encoders.hparams(n))})
    if keys:
        raise ConfigError(
            f"pretrained={run} fine-tunes that run's encoding ({name}) with its settings: "
            f"drop {', '.join(f'{k}=' for k in keys)} from the arg")


def sweep(add, arg: str = ""):
    """The fine-tune at each length of `fractions` x long_len."""
    a = configlib.parse_arg(arg, DEFAULTS)
    long_len = a.long_len or SIZES["smoke" if a.smoke else a.size]["long_len"]
    for seq_len in _fine_tune_lengths(a.fractions, long_len):
        add(seq_len=seq_len)


def _fine_tune_lengths(fractions, long_len: int) -> list[int]:
    """The fine-tune lengths of `fractions` of long_len (at least 8 tokens each); a one-line
    ConfigError for a fraction outside (0, 1] or two that give one length."""
    shown = "+".join(map(str, fractions))
    if not all(0 < fraction <= 1 for fraction in fractions):
        raise ConfigError(f"fractions={shown}: each is a share of long_len={long_len}, in "
                          "(0, 1]: long_len is the longest fine-tune (the documents are cut "
                          "to fit it)")
    lengths = [max(int(round(fraction * long_len)), 8) for fraction in fractions]
    if len(set(lengths)) < len(lengths):
        raise ConfigError(f"fractions={shown} give the lengths {lengths} of long_len="
                          f"{long_len}, one of them twice: give fractions that differ")
    return lengths
