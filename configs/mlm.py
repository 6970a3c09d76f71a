"""RoFormer-style masked language model (bidirectional encoder, MLM head tied to the embedding)
with RoFormer's six-stage length schedule, scaled to this machine.

    posjax train --config=configs/mlm.py:encoding=rope --workdir=DIR
    posjax train --config=configs/mlm.py:encoding=rope,schedule=single --workdir=DIR2

RoFormer (Table 4) trained (maxlen, batch, steps) = (512, 256, 200k), (1536, 256, 12.5k),
(256, 256, 120k), (128, 512, 80k), (1536, 256, 10k), (512, 512, 30k). `len_div`, `batch_div`
and `step_div` divide lengths, batches and steps and keep the length ratios; every stage then
runs at least `min_steps` steps (a stage of 5-25 steps measures batch noise, not the length);
`schedule=single` trains at one length (the first stage's) for the same number of tokens
(equal compute up to attention's length-dependent share); `smoke` runs the six stages at toy
size. Training prints the run's stages beside the paper's.
"""

from posjax import config as configlib
from posjax.errors import ConfigError

ROFORMER_STAGES = (
    (512, 256, 200_000),
    (1536, 256, 12_500),
    (256, 256, 120_000),
    (128, 512, 80_000),
    (1536, 256, 10_000),
    (512, 512, 30_000),
)

# What the stages reproduce, printed beside the run's own when training starts.
REFERENCE = "RoFormer (Su et al. 2021), Table 4"
# The smoke size's divisors: all six stages at toy size, one step each (lengths 8..96,
# batches 2 and 4); len_div=, ... and `schedule` apply to them too.
SMOKE_DIVISORS = dict(len_div=16, batch_div=128, step_div=1_000_000)

# The model and the schedule's divisors of each `size`: the CPU's, and one GPU's (BERT-small's
# width and depth, lengths / 2: 64..768, so configs/finetune.py size=gpu's 256 against 512 is
# RoFormer's 512 against 1024 / 2; planned to take minutes on one H100 or H200, not measured).
SIZES = {
    "cpu": dict(d_model=128, num_layers=2, num_heads=4, head_dim=32, mlp_dim=512,
                len_div=8, batch_div=32, step_div=500),
    "gpu": dict(d_model=512, num_layers=4, num_heads=8, head_dim=64, mlp_dim=2048,
                len_div=2, batch_div=8, step_div=80),
}

DEFAULTS = dict(
    encoding="rope",
    schedule="roformer",
    size="cpu",
    len_div=0,  # 0: the size's (every divisor)
    batch_div=0,
    step_div=0,
    min_steps=100,
    smoke=False,
    learning_rate=1e-3,
    attention="auto",
    dataset="stdlib_text",
    mask_rate=0.15,
    seed=0,
)


# The shortest stage's length and the smallest batch a divisor may leave (`check_divisors`).
SMALLEST = dict(len_div=("length", "tokens", 8), batch_div=("batch", "rows", 1))


def check_divisors(len_div: int, batch_div: int) -> None:
    """A one-line ConfigError for a divisor that leaves a stage below SMALLEST: it would
    train there at the floor, and the stages would lose RoFormer's ratios."""
    for (key, (what, unit, floor)), divisor, column in zip(
            SMALLEST.items(), (len_div, batch_div), (0, 1), strict=True):
        least = min(stage[column] for stage in ROFORMER_STAGES)
        if least // divisor < floor:
            raise ConfigError(f"config arg {key}={divisor} leaves RoFormer's stage of {least} "
                              f"{unit} with fewer than {floor}, and the stages would lose their "
                              f"{what} ratios: give {key} <= {least // floor}")


def scaled_stages(len_div: int, batch_div: int, step_div: int, min_steps: int = 1):
    """RoFormer's stages with lengths / len_div, batches / batch_div, steps / step_div, each
    at least min_steps steps (the divisors as `check_divisors` allows)."""
    check_divisors(len_div, batch_div)
    return tuple((n // len_div, b // batch_div, max(round(s / step_div), min_steps, 1))
                 for n, b, s in ROFORMER_STAGES)


def single_length(stages):
    """One stage at the first stage's length with the same total number of tokens."""
    seq_len, batch, _ = stages[0]
    tokens = sum(n * b * s for n, b, s in stages)
    return ((seq_len, batch, max(round(tokens / (seq_len * batch)), 1)),)


SCHEDULES = {"roformer": lambda stages: stages, "single": single_length}


def get_config(arg: str = ""):
    a = configlib.parse_arg(arg, DEFAULTS)
    if a.schedule not in SCHEDULES:
        raise configlib.unknown("schedule", a.schedule, SCHEDULES)
    configlib.check_size(a.size, SIZES)
    configlib.check_one_size(a, arg)
    size = SIZES[a.size]
    for key in ("len_div", "batch_div", "step_div", "min_steps"):
        if a[key] < (1 if key == "min_steps" else 0):
            raise ConfigError(
                f"config arg {key}={a[key]} must be >= 1"
                + ("" if key == "min_steps" else " (or 0 for the size's)"))
    divisors = [a[key] or (SMOKE_DIVISORS if a.smoke else size)[key]
                for key in ("len_div", "batch_div", "step_div")]
    # smoke's stages are one step each unless the arg asks for more
    min_steps = a.min_steps if not a.smoke or "min_steps" in configlib.arg_keys(arg) else 1
    stages = SCHEDULES[a.schedule](scaled_stages(*divisors, min_steps))
    config = configlib.base_config(
        encoding=a.encoding, encoding_overrides=a, kind="mlm", dataset=a.dataset, stages=stages,
        smoke=a.smoke, data_overrides=a,  # the dataset's own fields: text_glob=...
    )
    config.model.update(tie_embeddings=True, attention=a.attention,
                        **{key: size[key] for key in configlib.MODEL_SIZE_KEYS})
    if a.smoke:
        config.model.update(d_model=32, num_layers=1, num_heads=2, head_dim=16, mlp_dim=64)
    config.data.mlm.mask_rate = a.mask_rate
    config.train.learning_rate = a.learning_rate
    configlib.step_schedule(config, sum(s for _, _, s in stages), parts=8)
    config.train.eval_batches = 2 if a.smoke else 8
    # a learned table (BERT's) read past its rows, as configs/lm.py scores it
    config.eval.learned_extension = "hierarchical"
    config.train.seed = a.seed
    config.train.reference, config.train.reference_stages = REFERENCE, ROFORMER_STAGES
    return config


def sweep(add, arg: str = ""):
    """RoFormer's schedule against single-length training at equal tokens."""
    del arg
    for schedule in SCHEDULES:
        add(schedule=schedule)
