"""Configs and the CLI's handling of them: the arg-string parser, every config file and its
sweep, RoFormer's length schedule, and one-line errors before any work starts."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

from posjax import attention, encoders, fileio
from posjax import config as configlib
from posjax.errors import ConfigError
from posjax.experiment import Experiment, build_encoding
from posjax.launch import cli, sweep
from posjax.train import sharding, trainer

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CONFIG_FILES = sorted(str(p) for p in CONFIGS.glob("*.py"))
LM = str(CONFIGS / "lm.py")
MLM = str(CONFIGS / "mlm.py")

# RoFormer (Su et al. 2021, arXiv:2104.09864) Table 4: (maximum length, batch, steps) of its
# six stages.
ROFORMER_TABLE_4 = ((512, 256, 200_000), (1536, 256, 12_500), (256, 256, 120_000),
                    (128, 512, 80_000), (1536, 256, 10_000), (512, 512, 30_000))
ROFORMER_LENGTHS = tuple(n for n, _, _ in ROFORMER_TABLE_4)


def load(path: str):
    return configlib.load_config_module(path)


# --- the arg parser ---------------------------------------------------------------------


def test_parse_arg_converts_to_the_defaults_types():
    defaults = dict(name="a", n=1, rate=0.5, flag=False, other=True, lengths=(1,), anything=None)
    a = configlib.parse_arg(
        "name=b, n=3, rate=1e-3, flag, other=false, lengths=8+16+32, anything=1.5", defaults)
    assert a.name == "b"
    assert a.n == 3 and isinstance(a.n, int)
    assert a.rate == 1e-3 and isinstance(a.rate, float)
    assert a.flag is True and a.other is False
    assert a.lengths == (8, 16, 32)
    assert a.anything == 1.5
    assert configlib.parse_arg("anything=word", defaults).anything == "word"
    assert configlib.parse_arg("", defaults).to_dict() == defaults


@pytest.mark.parametrize(("arg", "message"), [
    ("n=abc", "n='abc' is not a number"),
    ("flag=maybe", "flag='maybe' is not a boolean"),
    ("n", "config arg 'n' has no value"),
])
def test_parse_arg_rejects_bad_values_in_one_line(arg, message):
    with pytest.raises(ConfigError, match=message) as info:
        configlib.parse_arg(arg, dict(n=1, flag=False))
    assert "\n" not in str(info.value)


def test_encoding_hyperparameters_are_accepted_and_typed():
    config = load(LM).get_config("encoding=rope,theta=500,layout=half")
    assert config.encoding.name == "rope"
    assert config.encoding.theta == 500.0 and isinstance(config.encoding.theta, float)
    assert config.encoding.layout == "half"
    assert Experiment.from_config(config).encoding == encoders.get("rope", theta=500.0,
                                                                   layout="half")
    alibi = load(LM).get_config("encoding=alibi,bidirectional=true")
    assert alibi.encoding.to_dict() == {"name": "alibi", "bidirectional": True}


def test_unknown_key_is_a_one_line_error_with_a_suggestion():
    with pytest.raises(ConfigError, match="unknown config arg 'seq_lne'.*did you mean "
                                          "'seq_len'") as info:
        load(LM).get_config("smoke,seq_lne=64")
    assert "\n" not in str(info.value)
    # A key of other encodings is not this one's: the error names the encodings that take it.
    with pytest.raises(ConfigError) as info:
        load(LM).get_config("encoding=alibi,theta=500")
    takes = [name for name in encoders.names() if "theta" in encoders.hparams(name)]
    assert {"rope", "xpos", "rope2d", "rope_mixed"} <= set(takes)
    assert str(info.value) == (
        f"config arg 'theta' is a hyperparameter of {', '.join(takes)}, not of "
        "encoding=alibi: drop it, or pick one of those encodings (posjax list encodings)")


def test_the_datasets_own_fields_are_config_args(tmp_path):
    """Issue 50: `dataset=local_text,text_glob=...` was `unknown config arg 'text_glob'`."""
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.txt").write_text(f"text of {name} " * 50)
    glob = f"{tmp_path}/*.txt"
    config = load(LM).get_config(f"smoke,dataset=local_text,text_glob={glob},"
                                 "validation_fraction=0.34")
    assert (config.data.dataset, config.data.text_glob) == ("local_text", glob)
    assert config.data.validation_fraction == 0.34
    assert load(LM).get_config("smoke,max_text_bytes=1000").data.max_text_bytes == 1000
    with pytest.raises(ConfigError) as info:
        load(LM).get_config(f"smoke,text_glob={glob}")
    assert str(info.value) == ("config arg 'text_glob' is a field of dataset local_text or "
                               "doc_match, not of dataset=stdlib_text: give dataset=local_text "
                               "(posjax list datasets)")
    # a typo in the dataset's name is named, where it read as a field of the wrong dataset
    with pytest.raises(ConfigError, match=re.escape(
            "not of dataset=local_txt, a dataset posjax does not build (did you mean "
            "'local_text'?): give dataset=local_text")):
        load(LM).get_config(f"smoke,dataset=local_txt,text_glob={glob}")
    # a file that picks its dataset itself: it said "add dataset=retrieval", itself refused
    with pytest.raises(ConfigError, match="^config arg 'mix_dataset' is a field of config.data "
                       r"\(of dataset retrieval\), which this config file takes no arg for: "
                       "where it trains retrieval, give --config.data.mix_dataset=VALUE; else "
                       "drop it$"):
        load(str(CONFIGS / "retrieval.py")).get_config("smoke,mix_dataset=local_text")
    # a file that trains another dataset: following "give --config.data..." was refused next
    with pytest.raises(ConfigError, match="^config arg 'position_rule' .* where it trains "
                       "text_image, give --config.data.position_rule=VALUE; else drop it$"):
        load(str(CONFIGS / "patch2d.py")).get_config("smoke,position_rule=rope_tv")


def test_every_field_posjax_list_fields_names_is_an_arg_by_its_name():
    """The README says any model, train or eval field is a configs/lm.py arg, yet the fields
    that are None unless set (num_kv_heads, mlp_bias, grid_width) were unknown args, with
    "did you mean 'num_heads'"."""
    from posjax.config.fields import MODEL_PLACEHOLDERS, SECTION_FIELDS

    config = load(LM).get_config("smoke,num_kv_heads=2,mlp_bias=false,grid_width=3")
    assert (config.model.num_kv_heads, config.model.mlp_bias, config.model.grid_width) == (
        2, False, 3)
    assert isinstance(config.model.num_kv_heads, int)
    for section, fields in SECTION_FIELDS.items():
        for key in [*fields, *(MODEL_PLACEHOLDERS if section == "model" else ())]:
            value = config[section][key] if config[section].get(key) is not None else None
            if (value is None or isinstance(value, (dict, tuple, list))
                    or key in load(LM).DEFAULTS):
                continue  # None, a structure (--config.SECTION.KEY), or the file's own arg
            assert load(LM).get_config(f"smoke,{key}={value}")[section][key] == value, key
    with pytest.raises(ConfigError, match="num_kv_heads='x' is not a number: give num_kv_heads "
                                          "an integer"):
        load(LM).get_config("smoke,num_kv_heads=x")


def test_unknown_encoding_lists_the_valid_names():
    with pytest.raises(ConfigError, match="did you mean 'alibi'") as info:
        load(LM).get_config("encoding=alibo")
    message = str(info.value)
    assert "\n" not in message
    assert all(name in message for name in encoders.names())


# --- config files and their sweeps ------------------------------------------------------


def validate(config) -> Experiment:
    """What `posjax train` checks before any work: the Experiment, then the placement."""
    experiment = Experiment.from_config(config)
    sharding.check(config, [stage.batch_size for stage in experiment.stages])
    return experiment


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: Path(p).name)
def test_every_config_loads_with_smoke_and_has_every_section(path):
    config = load(path).get_config("smoke")
    assert {"encoding", "model", "data", "train", "eval"} <= set(config.keys())
    validate(config)


@pytest.mark.parametrize("path", [p for p in CONFIG_FILES if {"size", "smoke"} <= set(
    getattr(load(p), "DEFAULTS", {}))], ids=lambda p: Path(p).name)
def test_smoke_with_another_size_is_refused_not_one_of_them_ignored(path):
    """`smoke,size=main` trained the smoke size, without a word."""
    module = load(path)
    other = next(size for size in module.SIZES if size != "smoke")
    with pytest.raises(ConfigError, match=f"^config args smoke and size={other} both pick the "
                       r"size \(smoke is size=smoke\): give one of them$"):
        module.get_config(f"smoke,size={other}")
    if "smoke" in module.SIZES:
        assert (module.get_config("smoke,size=smoke").to_json()
                == module.get_config("smoke").to_json())
    assert module.get_config(f"smoke=false,size={other}")  # a smoke turned off picks no size
    if "smoke" not in module.SIZES:  # configs/mlm.py said "valid: cpu, gpu", and no more
        with pytest.raises(ConfigError, match=r"^unknown size 'smoke'.*; valid: .*; the quick "
                           "try is the bare word smoke in the arg$"):
            module.get_config("size=smoke")


@pytest.mark.parametrize(("path", "key"), [
    (p, key) for p in CONFIG_FILES for key in configlib.args.STAGE_COUNTS
    if isinstance(getattr(load(p), "DEFAULTS", {}).get(key), int)],
    ids=lambda v: Path(v).name if "/" in str(v) else v)
def test_a_stage_count_below_1_is_refused_in_the_args_words(path, key):
    """lm.py's seq_len=0 said "train.stages entry (0, 4, 6) is not (seq_len, ...)": a
    setting the user never wrote."""
    zero_is_default = load(path).DEFAULTS[key] == 0
    for value in (-1, 0):
        if value == 0 and zero_is_default:
            assert load(path).get_config(f"smoke,{key}=0")
            continue
        with pytest.raises(ConfigError, match=f"^config arg {key}={value} must be >= 1" + (
                re.escape(" (or 0 for the config file's default)") if zero_is_default else "")
                + "$"):
            load(path).get_config(f"smoke,{key}={value}")


def _sweep_args(path: str) -> list[str]:
    """The smoke arg with each study a config offers (a STUDIES table), or just smoke."""
    studies = getattr(load(path), "STUDIES", None)
    return [f"smoke,study={s}" for s in studies] if studies else ["smoke"]


@pytest.mark.parametrize(
    ("path", "arg"), [(p, a) for p in CONFIG_FILES for a in _sweep_args(p)],
    ids=lambda v: Path(v).name if v.endswith(".py") else v)
def test_every_sweep_expands_to_runs_that_validate(path, arg):
    runs = sweep.expand(path, arg)
    assert runs and len({r.name for r in runs}) == len(runs)
    module = load(path)
    for run in runs:
        experiment = validate(module.get_config(run.arg))
        attention.check_compatible(experiment.encoding, experiment.model_config.attention,
                                   experiment.model_class.causal)


def test_the_task_sweep_runs_an_encoding_that_reads_no_positions_once():
    """encodings_2024's command (encodings=none+rope+cope) was refused whole: CoPE with
    randomized positions would train the same model (Experiment.check_positions_read)."""
    runs = sweep.expand(str(CONFIGS / "algorithmic.py"),
                        "task=counting,encodings=none+rope+cope+stickbreaking")
    assert [r.name for r in runs] == [
        "encoding=none,randomize_positions=0", "encoding=rope,randomize_positions=0",
        "encoding=rope,randomize_positions=256", "encoding=cope,randomize_positions=0",
        "encoding=stickbreaking,randomize_positions=0"]


def test_sweep_run_args_override_the_base_arg():
    runs = sweep.expand(LM, "smoke,seq_len=64,study=theta")
    assert all("seq_len=64" in r.arg for r in runs)
    thetas = [load(LM).get_config(r.arg).encoding.theta for r in runs]
    assert thetas == sorted(thetas) and len(set(thetas)) == len(runs) > 1


def test_a_sweep_of_a_named_encoding_without_a_study_is_that_one_point():
    """Issue 50: `encoding=rope,theta=10000,seeds=2` was refused: the default study=main
    replaced the encoding with its seven, and theta fits none of them."""
    runs = sweep.expand(LM, "smoke,encoding=rope,theta=10000,seeds=2")
    assert sorted(r.name for r in runs) == ["encoding=rope,seed=0", "encoding=rope,seed=1"]
    assert {load(LM).get_config(r.arg).encoding.theta for r in runs} == {10000.0}
    assert len(sweep.expand(LM, "smoke,encoding=rope,study=theta")) == 5  # a study still wins
    assert len(sweep.expand(LM, "smoke")) == 7


def test_mlm_has_roformers_six_stages_and_length_ratios():
    module = load(MLM)
    for len_div in (1, 4, 8, 16):
        stages = module.get_config(f"len_div={len_div}").train.stages
        assert len(stages) == 6
        assert [n / stages[0][0] for n, _, _ in stages] == [
            n / ROFORMER_LENGTHS[0] for n in ROFORMER_LENGTHS]


@pytest.mark.parametrize("path", CONFIG_FILES)
def test_every_config_records_a_smoke_run_so_its_pictures_can_say_so(path):
    assert load(path).get_config("smoke").train.smoke
    assert not load(path).get_config("").train.smoke


def test_mlm_smoke_runs_all_six_stages_at_toy_size_with_roformers_ratios():
    stages = load(MLM).get_config("smoke").train.stages
    assert [n / stages[0][0] for n, _, _ in stages] == [
        n / ROFORMER_LENGTHS[0] for n in ROFORMER_LENGTHS]
    assert max(n * b * s for n, b, s in stages) <= 256  # toy size: one step of a few rows each


@pytest.mark.parametrize("arg", ["", "smoke"])
def test_mlm_prints_its_stages_beside_roformers_table_4(arg):
    config = load(MLM).get_config(arg)
    heading, *rows, share = trainer.reference_lines(config)
    assert "RoFormer (Su et al. 2021), Table 4" in heading
    # the floor of steps per stage is what moves the long stages' share (Table 4: 15.8 %)
    assert share == (f"  tokens in the longest rows' stages: "
                     f"{trainer.longest_share(config.train.stages):.1%} here, 15.8% there")
    assert f"{trainer.longest_share(((64, 8, 400), (192, 8, 100), (32, 8, 240))):.3f}" == "0.366"
    shown = [re.fullmatch(r"  \d: (.+?) +\((.+)\)", row).groups() for row in rows]
    assert shown == [(" x ".join(map(str, ours)), " x ".join(map(str, paper)))
                     for ours, paper in zip(config.train.stages, ROFORMER_TABLE_4, strict=True)]
    assert trainer.reference_lines(load(LM).get_config("smoke")) == []  # no reference, no lines


@pytest.mark.parametrize(("arg", "says"), [
    ("smoke,len_div=-1", "config arg len_div=-1 must be >= 1 (or 0 for the size's)"),
    ("step_div=-5", "config arg step_div=-5 must be >= 1 (or 0 for the size's)"),
    ("min_steps=0", "config arg min_steps=0 must be >= 1"),
    ("len_div=1000", "config arg len_div=1000 leaves RoFormer's stage of 128 tokens with fewer "
                     "than 8, and the stages would lose their length ratios: give len_div <= 16"),
    ("smoke,batch_div=300", "config arg batch_div=300 leaves RoFormer's stage of 256 rows with "
                            "fewer than 1, and the stages would lose their batch ratios: give "
                            "batch_div <= 256")])
def test_mlm_divisors_and_min_steps_out_of_range_are_refused(arg, says):
    """len_div=-1 trained every stage at 8 x 2 x 1, with no word; len_div=1000 every stage
    at 8 tokens, RoFormer's length ratios gone."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        configlib.configured(f"{MLM}:encoding=rope,{arg}", [])


def test_mlm_smoke_honours_a_min_steps_the_arg_gives():
    """`smoke,min_steps=3` ran every stage one step: smoke's one step overrode it."""
    steps = [k for *_, k in configlib.configured(f"{MLM}:encoding=rope,smoke,min_steps=3",
                                                 []).train.stages]
    assert steps == [3] * 6
    assert [k for *_, k in configlib.configured(f"{MLM}:encoding=rope,smoke",
                                                []).train.stages] == [1] * 6


def test_mlm_scores_a_learned_table_past_its_rows_as_lm_does():
    """`--grid=encoding=rope,learned` of configs/mlm.py printed an error line per length past
    the learned table, where configs/lm.py scores it with Su's hierarchical extension."""
    for path in (LM, MLM):
        config = configlib.load_config_module(path).get_config("smoke,encoding=learned")
        assert config.eval.learned_extension == "hierarchical", path


@pytest.mark.parametrize("arg", ["", "smoke", "len_div=4,batch_div=64,step_div=1000"])
def test_mlm_single_schedule_trains_on_as_many_tokens(arg):
    module = load(MLM)
    roformer = module.get_config(arg).train.stages
    (single,) = module.get_config(f"{arg},schedule=single".lstrip(",")).train.stages
    assert single[:2] == roformer[0][:2]  # the first stage's length and batch
    tokens = sum(n * b * s for n, b, s in roformer)
    assert abs(single[0] * single[1] * single[2] - tokens) <= single[0] * single[1] / 2


def test_doubling_lengths():
    assert configlib.doubling_lengths(128, 16, "eval_max_factor") == (128, 256, 512, 1024, 2048)
    assert configlib.doubling_lengths(128, 1, "eval_max_factor") == (128,)


# --- the CLI: errors before any work ----------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--config.model.d_modle=3"], "config.model has no key 'd_modle' (did you mean 'd_model'?)"),
    (["--config.modle.d_model=3"], "config has no key 'modle' (did you mean 'model'?)"),
    (["--config.encoding.theta=3"], "config.encoding has no key 'theta'"),
    (["--config.model.d_model=abc"], "--config.model.d_model=abc"),
    (["--config.train.optimizer=sdg"], "unknown train.optimizer 'sdg' (did you mean 'sgd'?)"),
    (["--config.train.optimizer=sgd"], "optax.sgd takes no argument 'b1'"),
    # the smoke size's 6 steps: a warm-up as long is not cut short silently
    (["--config.train.warmup_steps=6"], "train.warmup_steps=6 does not end before the run's "
                                        "6 steps"),
])
def test_train_with_a_bad_override_exits_2_in_one_line(tmp_path, capsys, args, message):
    workdir = tmp_path / "run"
    code = cli.main(["train", f"--config={LM}:smoke,encoding=alibi", *args,
                     f"--workdir={workdir}"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("posjax train: error:")
    assert message in err
    assert not workdir.exists()


@pytest.mark.parametrize(("spec", "message"), [
    (f"{LM}:smoke,encoding=ropee", "unknown encoding 'ropee' (did you mean 'rope'?); valid: "),
    (f"{LM}:smoke,sizee=main", "unknown config arg 'sizee' (did you mean 'size'?)"),
    (f"{CONFIGS}/nonexistent.py:smoke", "config file"),
])
def test_train_with_a_bad_config_arg_exits_2_in_one_line(tmp_path, capsys, spec, message):
    workdir = tmp_path / "run"
    assert cli.main(["train", f"--config={spec}", f"--workdir={workdir}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not workdir.exists()


def test_cli_main_parses_overrides_in_process():
    # Overrides must come from the argv given to main, not from sys.argv (pytest's here).
    fv = cli._flags([f"--config={LM}:smoke", "--config.model.d_model=48",
                     "--config.encoding.theta=500", "--config.train.stages=((16,4,3),(32,4,2))",
                     "--workdir=unused"], cli._define_train, config=True)
    assert fv.config.model.d_model == 48
    assert fv.config.encoding.theta == 500.0
    assert tuple(map(tuple, fv.config.train.stages)) == ((16, 4, 3), (32, 4, 2))


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: Path(p).name)
def test_a_warmup_the_user_set_survives_the_sizes_step_schedule(path):
    own = configlib.configured(f"{path}:smoke", []).train
    given = configlib.configured(f"{path}:smoke", ["--config.train.warmup_steps=3"]).train
    assert given.warmup_steps == 3 and own.warmup_steps != 3
    assert given.to_dict() == {**own.to_dict(), "warmup_steps": 3}


CADENCE = ("warmup_steps", "checkpoint_every_steps", "log_every_steps")


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: Path(p).name)
def test_stages_of_another_length_move_the_sizes_step_schedule_as_steps_would(path):
    """--config.train.stages=((128,4,2000),) on smoke kept smoke's cadence: a log row every
    step and a checkpoint every 6; a key given too, or one the file sets itself, stays."""
    stages = ["--config.train.stages=((32,4,2000),)"]
    moved = configlib.configured(f"{path}:smoke", stages).train
    own = configlib.configured(f"{path}:smoke", []).train
    assert {k: moved[k] for k in CADENCE} == {
        **configlib.schedule_fields(2000, True, 4), "checkpoint_every_steps": 2000}
    assert own.log_every_steps == 1  # the smoke size's own, for its few steps
    given = configlib.configured(f"{path}:smoke", [*stages, "--config.train.log_every_steps=7"])
    assert given.train.log_every_steps == 7 and given.train.warmup_steps == 100
    same = configlib.configured(f"{path}:smoke", [f"--config.train.stages={own.stages}"])
    assert {k: same.train[k] for k in CADENCE} == {k: own[k] for k in CADENCE}


@pytest.mark.parametrize(("arg", "cadence"), [
    ("log_every_steps=3", (6, 3, 60)), ("checkpoint_every_steps=7", (6, 15, 7)),
    ("log_every_steps=1", (6, 1, 60))])
def test_a_cadence_key_of_the_arg_stays_when_stages_move_the_others(arg, cadence):
    """A cadence key in the arg kept the others at smoke's 6 steps, or (equal to the size's
    own) was moved to the new steps' value."""
    train = configlib.configured(f"{LM}:smoke,{arg}",
                                 ["--config.train.stages=((128,4,60),)"]).train
    assert (train.warmup_steps, train.log_every_steps, train.checkpoint_every_steps) == cadence


def test_dropes_restart_moves_with_the_stages_an_override_gives():
    """drope_restart restarted the schedule at the arg's 18 steps, inside stages of 30 + 10."""
    arg = f"{LM}:drope=0.1,smoke,steps=20,drope_restart"
    assert configlib.configured(arg, []).train.schedule_restarts == (18,)
    stages = "--config.train.stages=((128,4,30),(128,4,10))"
    assert configlib.configured(arg, [stages]).train.schedule_restarts == (30,)
    given = configlib.configured(arg, [stages, "--config.train.schedule_restarts=(25,)"])
    assert given.train.schedule_restarts == (25,)


@pytest.mark.parametrize(("stages", "says"), [
    ("(128,4,6)", "train.stages=(128, 4, 6) is not a tuple of (seq_len, batch_size, steps) "
                  "entries: one stage is written ((64,4,100),), with the comma"),
    ("((128,4,10)", "--config.train.stages=((128,4,10): config.train.stages takes a tuple, not "
                    "'((128,4,10)'; e.g. --config.train.stages=((128,4,6),) (its value now)"),
])
def test_stages_written_without_their_outer_tuple_are_one_line(tmp_path, capsys, stages, says):
    """The hint showed the stages as (128, 4, 6), and following it was a TypeError."""
    assert cli.main(["train", f"--config={LM}:smoke", f"--workdir={tmp_path / 'run'}",
                     f"--config.train.stages={stages}"]) == 2
    assert capsys.readouterr().err.strip() == f"posjax train: error: {says}"


def test_lm_sizes_set_a_warmup_of_a_tenth_of_the_steps_up_to_100():
    assert configlib.configured(f"{LM}:size=main", []).train.warmup_steps == 60
    assert configlib.configured(f"{LM}:size=base", []).train.warmup_steps == 100
    main = configlib.configured(f"{LM}:size=main", ["--config.train.warmup_steps=200"])
    assert main.train.warmup_steps == 200


def test_an_old_config_json_without_the_optimizer_keys_loads_as_adamw(tmp_path):
    import shutil

    from posjax.config import load_config
    from posjax.train import optim

    old = Path(__file__).resolve().parent / "golden" / "old_run_configs" / "rope.json"
    assert "optimizer" not in fileio.read_json(old)["train"]
    shutil.copy(old, tmp_path / "config.json")
    train = load_config(tmp_path).train
    assert (train.optimizer, train.optimizer_args) == ("adamw", '{"b1": 0.9, "b2": 0.98}')
    today = load(LM).get_config("smoke").train  # with the keys, at their defaults
    for key in ("learning_rate", "schedule", "warmup_steps", "weight_decay", "grad_clip"):
        today[key] = train[key]
    assert optim.optimizer(train, 10) is optim.optimizer(today, 10)


def test_cli_unknown_command_and_usage(capsys):
    assert cli.main(["trian"]) == 2
    assert "did you mean 'train'" in capsys.readouterr().err
    assert cli.main([]) == 2
    assert cli.main(["--help"]) == 0
    assert "posjax {train|sweep|extrapolate|plot|report|analyze|list}" in capsys.readouterr().out


HF_YARN = '{"rope_type": "yarn", "factor": 4, "beta_fast": 16, "attention_factor": 1.2}'


@pytest.mark.parametrize(("args", "expected"), [
    ([f"--config={LM}:smoke,scaling=linear:4"],
     {"rope_type": "linear", "factor": 4.0, "original_max_position_embeddings": 128}),
    ([f"--config={LM}:smoke,scaling=" + HF_YARN],
     {"rope_type": "yarn", "factor": 4, "beta_fast": 16, "attention_factor": 1.2,
      "original_max_position_embeddings": 128}),
    ([f"--config={LM}:smoke", "--config.encoding.scaling=" + HF_YARN.replace("}", ', '
      '"original_max_position_embeddings": 8}')],
     {"rope_type": "yarn", "factor": 4, "beta_fast": 16, "attention_factor": 1.2,
      "original_max_position_embeddings": 8}),
])
def test_rope_scaling_in_a_config_takes_the_short_form_or_a_hugging_face_block(args, expected):
    fv = cli._flags([*args, "--workdir=unused"], cli._define_train, config=True)
    # the short form and a block without a training length take the first stage's, 128
    assert dict(build_encoding(fv.config).scaling) == expected


@pytest.mark.parametrize(("arg", "message"), [
    ("scaling=linear", "rope_scaling 'linear' needs a numeric factor"),
    ("scaling=linear:0.5", "rope_scaling factor 0.5 < 1"),
    ("scaling=ntk_by_parts:2", "unknown rope_scaling type 'ntk_by_parts'"),
    ('scaling={"rope_type": "yarn", "factr": 4}', "does not read 'factr'"),
])
def test_a_bad_rope_scaling_config_exits_2_in_one_line(tmp_path, capsys, arg, message):
    workdir = tmp_path / "run"
    assert cli.main(["train", f"--config={LM}:smoke,{arg}", f"--workdir={workdir}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not workdir.exists()


# --- paths and sizes: one line before any work ------------------------------------------


def _one_line_error(capsys, argv: list[str], message: str) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_a_workdir_that_is_a_file_is_one_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    _one_line_error(capsys, ["train", f"--config={LM}:smoke", f"--workdir={afile}"],
                    f"--workdir={afile} is a file, not a directory")
    _one_line_error(capsys, ["train", f"--config={LM}:smoke", f"--workdir={afile}/run"],
                    f"is under the file {afile}")
    assert afile.read_text() == "keep me"


def test_a_config_file_with_a_syntax_error_is_one_line(tmp_path, capsys):
    config = tmp_path / "broken.py"
    config.write_text("def get_config(arg):\n    return (\n")
    for command in ("train", "sweep"):
        _one_line_error(capsys, [command, f"--config={config}", f"--workdir={tmp_path}/w"],
                        f"config file {config} has a syntax error at line 2")


@pytest.mark.parametrize("line, message", [
    ("c.train.steps = 8", "sets config.train.steps, a field posjax does not have (did you mean "
                          "'stages'?)"),
    ("c.train.learning_rat = 0.5", "sets config.train.learning_rat, a field posjax does not "
                                   "have (did you mean 'learning_rate'?)"),
    ("c.eval.lenghts = (128,)", "sets config.eval.lenghts, a field posjax does not have (did "
                                "you mean 'lengths'?)"),
    ("c.data.datset = 'x'", "sets config.data.datset, a field posjax does not have (did you "
                            "mean 'dataset'?)"),
])
def test_a_config_file_setting_a_field_posjax_lacks_is_one_line(tmp_path, capsys, line,
                                                                  message):
    """`c.train.steps = 8` in a user's config file trained 6 steps and recorded steps: 8 in
    config.json; a typo in train, eval or data was taken silently (model's was refused)."""
    config = tmp_path / "mine.py"
    config.write_text(f"from configs.lm import get_config as lm\n\n\ndef get_config(arg):\n"
                      f"    c = lm(arg)\n    {line}\n    return c\n")
    _one_line_error(capsys, ["train", f"--config={config}:smoke", f"--workdir={tmp_path}/w"],
                    f"config file {config}: get_config('smoke') {message}, so nothing would "
                    "read it; fix the file")
    assert not (tmp_path / "w").exists()


def test_a_get_config_of_no_parameter_is_called_without_an_arg(tmp_path, capsys):
    """`def get_config():`, as ml_collections' examples write it, raised "get_config('')
    raised TypeError ... at posjax/config/files.py; fix the arg or the file"."""
    config = tmp_path / "plain.py"
    config.write_text("from configs.lm import get_config as lm\n\n\ndef get_config():\n"
                      "    return lm('smoke,seq_len=32')\n")
    assert configlib.configured(str(config), []).train.stages[0][0] == 32
    _one_line_error(capsys, ["train", f"--config={config}:steps=3", f"--workdir={tmp_path}/w"],
                    f"config file {config}: its get_config takes no arg, and the arg 'steps=3' "
                    "was given: drop ':steps=3' from --config, or give get_config a parameter "
                    "(def get_config(arg): ...)")


def test_a_full_disk_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(fileio, "_atomic", full)
    _one_line_error(capsys, ["train", f"--config={LM}:smoke", f"--workdir={tmp_path}/run"],
                    f"No space left on device ({tmp_path}/run/config.json): free space")


@pytest.mark.parametrize("text, line", [
    ("", "the corpus is empty: its 2 matched files are 0 binary (not UTF-8) and 2 empty"),
    ("short", "the evaluation text has"),
])
def test_an_empty_or_too_short_corpus_fails_before_training(tmp_path, capsys, text, line):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a.txt", "b.txt"):
        (corpus / name).write_text(text)
    workdir = tmp_path / "run"
    _one_line_error(capsys, ["train", f"--config={LM}:smoke,dataset=local_text",
                             f"--config.data.text_glob={corpus}/*.txt",
                             f"--config.data.data_dir={tmp_path}/tfds", f"--workdir={workdir}"],
                    line)
    assert not workdir.exists()


def test_a_sequence_length_past_the_devices_memory_is_one_line_before_any_work(tmp_path, capsys):
    workdir = tmp_path / "run"
    _one_line_error(capsys, ["train", f"--config={LM}:smoke,seq_len=100000000",
                             f"--workdir={workdir}"],
                    "seq_len=100000000 at batch 4 needs at least")
    assert not workdir.exists()


def test_the_memory_floor_counts_dense_scores_only_where_attention_is_dense():
    experiment = Experiment.from_config(load(LM).get_config("smoke"))
    cfg = experiment.model_config
    dense = experiment.memory_floor(cfg.dense_max_len, 1)
    chunked = experiment.memory_floor(cfg.dense_max_len + 1, 1)
    scores = 4 * 2 * cfg.num_heads * cfg.dense_max_len**2 * cfg.num_layers
    assert dense - scores < chunked < dense


def test_a_read_only_workdir_is_one_line_before_any_work(tmp_path, capsys, monkeypatch):
    # root ignores permission bits, so the test takes the answer of os.access itself
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    real_access = fileio.os.access
    monkeypatch.setattr(fileio.os, "access",
                        lambda path, mode: Path(path) != readonly and real_access(path, mode))
    _one_line_error(capsys, ["train", f"--config={LM}:smoke", f"--workdir={readonly}/run"],
                    f"{readonly} is not writable")
    assert not (readonly / "run").exists()
    # a file's folder checked for --output=FILE: the flag is quoted as typed (it said
    # "--output=readonly: ... not writable", the folder for the file)
    with pytest.raises(ConfigError, match=re.escape(
            f"--output={readonly}/x.json: {readonly} is not writable: choose a writable "
            "--output")):
        fileio.check_writable(readonly, "--output", given=f"{readonly}/x.json")


def test_a_path_the_locale_could_not_decode_is_one_line_before_any_work(tmp_path, capsys):
    """`LC_ALL=C PYTHONUTF8=0 posjax train --workdir=runs_é` trained every step, then failed
    in orbax's save with tracebacks (rc 1), leaving a half-written checkpoint."""
    undecoded = f"{tmp_path}/runs_\udcc3\udca9"  # what Python makes of b"\xc3\xa9" in ASCII
    _one_line_error(capsys, ["train", f"--config={LM}:smoke", f"--workdir={undecoded}"],
                    "runs_\\udcc3\\udca9' has characters this process's encoding")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", [p for p in CONFIG_FILES if "encodings" in getattr(
    load(p), "DEFAULTS", {})], ids=lambda p: Path(p).name)
def test_a_sweeps_encodings_in_one_runs_arg_must_name_its_encoding(path):
    """`posjax train ...:smoke,encodings=rope+bogus` trained the file's default encoding,
    exit 0: the sweep-only arg was ignored, its typo too."""
    module = load(path)
    with pytest.raises(ConfigError, match="^unknown encoding in encodings 'bogus'"):
        module.get_config("smoke,encodings=rope+bogus")
    with pytest.raises(ConfigError, match=r"^encodings=rope\+none names the runs of posjax "
                       "sweep, one per encoding; one run trains one: give encoding=NAME"):
        module.get_config("smoke,encodings=rope+none")
    assert module.get_config("smoke,encodings=rope+none,encoding=none").encoding.name == "none"


def test_a_read_only_checkpoints_folder_is_one_line_before_any_work(tmp_path, capsys,
                                                                    monkeypatch):
    """orbax's save failed in its thread on it, and training waited 300 s for orbax's
    time-out, then ended in 83 lines naming no file."""
    checkpoints = tmp_path / "run" / "checkpoints"
    checkpoints.mkdir(parents=True)
    real_access = fileio.os.access
    monkeypatch.setattr(fileio.os, "access",
                        lambda path, mode: Path(path) != checkpoints and real_access(path, mode))
    _one_line_error(capsys, ["train", f"--config={LM}:smoke", f"--workdir={tmp_path / 'run'}"],
                    f"{checkpoints} is not writable: change its permissions (chmod -R u+w "
                    f"{checkpoints}), then re-run")
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["checkpoints"]


@pytest.mark.parametrize(("spec", "where", "value"), [
    # configs/mlm.py took these args and dropped them (local_text then wanted a text_glob)
    ("mlm.py:smoke,validation_fraction=0.2", "data.validation_fraction", 0.2),
    ("mlm.py:smoke,dataset=local_text,text_glob=/books/*.txt", "data.text_glob",
     "/books/*.txt"),
    # grouped-query heads were half the size's heads, not of the heads asked for
    ("lm.py:arch=llama,smoke,num_heads=8", "model.num_kv_heads", 4),
    ("lm.py:arch=qwen2,smoke,num_heads=8,num_kv_heads=2", "model.num_kv_heads", 2),
])
def test_a_config_arg_lands_where_it_says(spec, where, value):
    config = load(str(CONFIGS / spec.split(":")[0])).get_config(spec.split(":", 1)[1])
    section, key = where.split(".")
    assert config[section][key] == value


def test_the_retrieval_sweep_takes_the_field_args_its_runs_take():
    """`sweep --config=configs/retrieval.py:smoke,qk_norm=true,...`: unknown config arg."""
    runs = sweep.expand(str(CONFIGS / "retrieval.py"), "smoke,qk_norm=true,encodings=rope+alibi")
    assert [run.name for run in runs] == ["encoding=rope", "encoding=alibi"]
    assert all(run.config.model.qk_norm for run in runs)
