"""Length generalisation on algorithmic tasks: a causal LM trained on problem sizes 1..train_max
and scored at every size up to test_max (Kazemnejad et al. 2023, arXiv:2305.19466; with
randomized positions, Ruoss et al. 2023, arXiv:2305.16843).

    posjax train --config=configs/algorithmic.py:encoding=t5,task=copy --workdir=DIR
    posjax extrapolate --workdir=DIR          # accuracy per problem size -> extrapolation.json
    posjax sweep --config=configs/algorithmic.py:task=reverse --workdir=SWEEPDIR
    posjax plot SWEEPDIR                      # accuracy against size, one line per run

Arg keys (defaults below) plus any hyperparameter of the chosen encoding. Tasks: copy, reverse,
sort, addition, parity, associative_recall, counting, selective_copy (posjax.data.algorithmic).
One example is `prompt SEP answer`; only answer tokens are scored.

Lengths and positions (what a position encoding sees, and why):
  * seq_len defaults to the token length of the longest *training* example, T(train_max)
    (copy: 2 * 20 + 1 = 41). Training packs examples into rows of seq_len tokens, and every
    packed example restarts its positions at 0, so positions past T(train_max) - 1 are never
    trained whatever seq_len is; a tight row also holds about one long example, which keeps
    randomized positions as Ruoss et al. draw them (below).
  * Test examples are longer (T(test_max) = 81 tokens for copy at n = 40). Relative and
    parameter-free encodings (none, t5, alibi, rope, sinusoidal) are defined there. A learned
    table has seq_len rows (the model's max_len), so past them it has no value: evaluation
    records an error row for those sizes, or with `learned_extension=hierarchical` evaluates
    Su's hierarchical extension of the trained table instead. Kazemnejad et al. use sinusoidal
    for their absolute encoding ("APE") for this reason; the sweep runs both.
  * randomize_positions=M (Ruoss et al.): every training row takes seq_len sorted distinct
    positions drawn from [0, M) (a fresh draw per step), so the longest training examples
    already span [0, M); evaluation draws positions the same way (T of them, sorted, from
    [0, M), seeded), so every test position and distance lies in the trained range. M must be
    at least T(test_max) (checked here). A learned table then needs M rows.
  * T5's bias is unidirectional in this causal model (bidirectional follows the model, as
    in T5's decoder) unless the arg sets it.
"""

from posjax import config as configlib
from posjax import encoders
from posjax.data import algorithmic
from posjax.errors import ConfigError

SIZES = {
    # d_model, num_layers, num_heads, head_dim, mlp_dim, batch_size (rows), steps
    "smoke": configlib.SMOKE_SIZE,
    "main": dict(d_model=128, num_layers=4, num_heads=4, head_dim=32, mlp_dim=512,
                 batch_size=32, steps=3000),
}

# Ruoss et al. use M = 2048 for test lengths up to 500; 256 covers T(40) of every task here
# (addition, the longest: 3 * 40 + 3 = 123 tokens) about twice over.
RANDOMIZED_M = 256

DEFAULTS = dict(
    encoding="none",
    task="copy",
    train_max=20,
    test_max=40,
    size="main",
    smoke=False,
    steps=0,  # 0: the size's budget
    batch_size=0,  # 0: the size's batch
    learning_rate=3e-3,  # copy with t5, main size: 0.61 exact match at n = 18 after 3000
    # steps, against 0.02 at 1e-3 (measured on this project's 2-core machine)
    # 256, not 64: with 64 symbols most 20-symbol prompts repeat one, so "copy what followed
    # this symbol" is ambiguous; RoPE then reached 0 exact match past n = 10 after 2000
    # steps, and 0.88 at n = 20 after 1500 with 256 (probes on this machine).
    num_symbols=256,
    seq_len=0,  # 0: the longest training example, T(train_max)
    randomize_positions=0,  # 0: positions 0..T-1; M: sorted draws from [0, M)
    learned_extension="",  # "" : error rows past the table; "hierarchical": Su's extension
    seed=0,
    # sweep only: the encodings compared (Kazemnejad et al.'s five, plus a learned table)
    encodings=("none", "t5", "alibi", "rope", "sinusoidal", "learned"),
)

# Smoke data: a few examples per size, so a test builds the dataset in about a second.
SMOKE_EXAMPLES = dict(num_train_examples=512, num_eval_examples=80)


def get_config(arg: str = ""):
    a = configlib.parse_arg(arg, DEFAULTS)
    configlib.check_sweep_encodings(a, arg)
    size, dims, batch, steps = configlib.size_budget(a, SIZES, arg)
    if not 1 <= a.train_max < a.test_max:
        raise ConfigError(
            f"train_max={a.train_max}, test_max={a.test_max}: need 1 <= train_max < test_max "
            "(test sizes are train_max + 1 .. test_max)"
        )
    task = algorithmic.get_task(a.task)
    test_tokens = task.length(a.test_max)
    if a.randomize_positions and a.randomize_positions < test_tokens:
        raise ConfigError(
            f"randomize_positions={a.randomize_positions} is below the {test_tokens} tokens of "
            f"a {a.task} example at test_max={a.test_max}: evaluation draws one distinct "
            f"position per token from [0, M), so use M >= {test_tokens}"
        )
    seq_len = a.seq_len or task.length(a.train_max)
    overrides = dict(a)
    config = configlib.base_config(
        encoding=a.encoding,
        encoding_overrides=overrides,
        kind="causal_lm",
        dataset="algorithmic",
        stages=((seq_len, batch, steps),),
        smoke=size == "smoke",
    )
    configlib.apply_size(config, dims, steps)
    config.data.task = a.task
    config.data.num_symbols = a.num_symbols
    config.data.train_lengths = (1, a.train_max)
    config.data.test_lengths = (a.train_max + 1, a.test_max)
    # The trainer's own evaluation reads data.eval_split; keep it in-distribution, since the
    # test sizes are the task evaluation's job (`posjax extrapolate`).
    config.data.eval_split = "validation"
    config.train.learning_rate = a.learning_rate
    # The trainer evaluates one batch shape per problem size (a compile each); the task evaluation
    # pads every size to one shape, so it does that job after training.
    config.train.eval_batches = 0
    config.train.randomize_positions = a.randomize_positions
    config.train.seed = a.seed
    config.eval.batch_size = 64
    config.eval.learned_extension = a.learned_extension
    if size == "smoke":
        config.data.update(SMOKE_EXAMPLES)
    return config


# Arg keys this file's sweep reads itself: randomize_positions=M puts runs at M beside the
# controls at 0 (posjax.launch.sweep refuses any other arg key a sweep would replace).
SWEEP_READS = ("randomize_positions",)


def sweep(add, arg: str = ""):
    """Kazemnejad et al.'s comparison for the arg's task: each encoding of `encodings`, with
    positions 0..T-1 and with randomized positions (M = the arg's randomize_positions, else
    256). An encoding that reads no positions (NoPE, CoPE, stick-breaking) runs once."""
    a = configlib.parse_arg(arg, DEFAULTS)
    randomized = a.randomize_positions or RANDOMIZED_M
    for encoding in a.encodings:
        once = encoders.get(encoding).position_free
        for m in (0,) if once else (0, randomized):
            add(encoding=encoding, randomize_positions=m)
