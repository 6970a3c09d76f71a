"""Fine-tuning a pretrained MLM encoder on doc_match (issue 51 items 1-3, CPU size): the task
builder, the classifier's head and pooling, resuming a fine-tune, and the whole tiny pipeline
(MLM pretraining -> fine-tunes at two lengths with two seeds -> accuracy JSON)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import config as configlib
from posjax import data, encoders, fileio, models
from posjax.data import matching
from posjax.errors import ConfigError
from posjax.eval.evaluation import check_trained, evaluate, evaluate_trained
from posjax.experiment import Experiment
from posjax.launch import cli, sweep
from posjax.results import finetune, plots
from posjax.train import checkpoint, trainer

ROOT = Path(__file__).resolve().parents[1]
MLM, FINETUNE = str(ROOT / "configs" / "mlm.py"), str(ROOT / "configs" / "finetune.py")
# six files, each written in its own four letters: a window tells its file by any character
TEXTS = ["".join(np.random.default_rng(k).choice(list("abcdefghijklmnopqrstuvwx"[4 * k:4 * k + 4]),
                                                 400)) for k in range(6)]


def _split(seed: int, count: int = 40, n: int = 50):
    cfg = matching.MatchConfig(name="t", doc_chars=n, max_depth=0.9, num_train_examples=count,
                               generation_seed=seed)
    return list(matching.generate_split(cfg, "train", TEXTS))


# --- the task ------------------------------------------------------------------------------


def test_triplets_are_balanced_seeded_and_carry_their_evidence_at_spread_depths():
    triplets = _split(0, count=200)
    assert sum(t["label"] for t in triplets) == 100  # label i % 2: exactly balanced
    assert _split(0, count=200) == triplets and _split(1, count=200) != triplets
    depths = np.array([t["depth"] for t in triplets])
    assert 0.0 <= depths.min() < 0.1 and depths.max() > 0.8
    assert all(np.histogram(depths, bins=4, range=(0, 0.9))[0] > 20)  # spread, not bunched
    for t in triplets:
        n, d = len(t["a"]), t["evidence"]
        assert len(t["b"]) == len(t["c"]) == n == 50
        close, far = (t["b"], t["c"]) if t["label"] == 0 else (t["c"], t["b"])
        assert close[:d] == far[:d]  # the same text before the evidence
        own = next(f for f in TEXTS if t["a"] in f)
        assert close[d:] in own and far[d:] not in own  # the evidence: A's file or not


def test_pair_rows_cut_each_document_to_half_the_length_and_say_whether_evidence_is_seen():
    tokenizer = data.tokenizers.ByteTokenizer()
    example = {"a": "A" * 20, "b": "g" * 8 + "B" * 12, "c": "g" * 8 + "C" * 12, "label": 1,
               "evidence": 8}
    whole = matching.pair_rows(example, tokenizer, 43)  # 3 + 20 + 20
    assert whole["inputs"].shape == (2, 43) and whole["segment_ids"].sum() == 86
    assert whole["visible"] == 1.0 and int(whole["targets"]) == 1
    half = matching.pair_rows(example, tokenizer, 19)  # 8 of each document: the shared part
    assert half["visible"] == 0.0
    np.testing.assert_array_equal(half["inputs"][0], half["inputs"][1])
    assert matching.ceiling(0.5) == 0.75


# --- the head ----------------------------------------------------------------------------


def _classifier(pooling: str):
    cfg = models.ModelConfig(d_model=16, num_layers=1, num_heads=2, head_dim=8, mlp_dim=32,
                             pooling=pooling, dtype="float32")
    return models.build_model(cfg, encoders.get("rope"), kind="classifier", max_len=12,
                              rngs=nnx.Rngs(params=0), vocab_size=20, num_classes=1)


def _bound(module):
    """module(tokens, positions, segment_ids), compiled once per shape."""
    call = nnx.jit(lambda m, *args: m(*args))
    return lambda *args: call(module, *args)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_classifier_scores_each_candidate_alone_and_ignores_padding(pooling):
    module = _classifier(pooling)
    model = _bound(module)
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(4, 20, (3, 2, 12)), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(12, dtype=jnp.int32), (3, 2, 12))
    segments = jnp.ones((3, 2, 12), jnp.int32).at[:, :, 9:].set(0)
    logits = model(tokens, positions, segments)
    assert logits.shape == (3, 2)
    swapped = model(tokens[:, ::-1], positions, segments[:, ::-1])
    np.testing.assert_allclose(swapped, logits[:, ::-1], rtol=1e-6, atol=1e-6)
    repadded = model(tokens.at[:, :, 9:].set(7), positions, segments)
    np.testing.assert_allclose(repadded, logits, rtol=1e-5, atol=1e-6)
    # one row per example: [B, L] -> [B, C]
    assert model(tokens[:, 0], positions[:, 0], segments[:, 0]).shape == (3, 1)
    assert (module.pooler is not None) == (pooling == "cls")


# --- the pipeline ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, small_data) -> Path:
    """A tiny MLM run (one stage of 3 steps at 16 tokens)."""
    run = tmp_path_factory.mktemp("mlm") / "run"
    config = configlib.load_config_module(MLM).get_config("smoke")
    config.train.stages = ((16, 4, 3),)
    config.train.eval_batches = 0
    config.data.update(**small_data)
    trainer.train(config, run, progress=False)
    return run


def _finetune(pretrained: Path, small_data: dict, arg: str):
    config = configlib.load_config_module(FINETUNE).get_config(
        f"smoke,pretrained={pretrained},{arg}")
    # triplets are cut from the whole stdlib text: the pretraining's 200 kB cap leaves its
    # validation split 2 documents long enough, where a triplet needs 3
    config.data.update(**{**small_data, "max_text_bytes": 0})
    config.train.eval_batches = 0
    return config


def test_a_fine_tune_starts_from_the_encoder_and_resumes_as_if_never_stopped(
        pretrained, small_data, tmp_path, monkeypatch):
    config = _finetune(pretrained, small_data, "seq_len=16,steps=4")
    config.train.checkpoint_every_steps = 1
    experiment = Experiment.from_config(config)
    start = trainer.finetune.start_from(experiment, experiment.build())
    _, mlm = checkpoint.restore_params(Experiment.from_workdir(pretrained), pretrained)
    np.testing.assert_array_equal(start.params["embed"]["embedding"][...],
                                  mlm["embed"]["embedding"][...])
    whole = tmp_path / "whole"
    trainer.train(config, whole, progress=False)

    calls = {"n": 0}

    def stop_after_two():
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "check_stop", stop_after_two)
    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        trainer.train(config, cut, progress=False)
    monkeypatch.undo()
    trainer.train(config, cut, progress=False)  # continues from step 2
    _, a = checkpoint.restore_params(experiment, whole)
    _, b = checkpoint.restore_params(experiment, cut)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
    assert [r["step"] for r in map(json.loads, (cut / "metrics.jsonl").read_text().split(
        "\n")[:-1])] == [r["step"] for r in map(json.loads, (whole / "metrics.jsonl")
                                                .read_text().split("\n")[:-1])]


def test_a_fine_tune_whose_every_checkpoint_is_unreadable_starts_again_from_the_encoder(
        pretrained, small_data, tmp_path):
    """A fine-tune killed while its first checkpoint was written (or with each checkpoint
    torn) set them aside and trained from step 0 from random parameters, not the pretrained
    encoder's: its re-run must be the run from scratch, loss for loss."""
    config = _finetune(pretrained, small_data, "seq_len=16,steps=4")
    config.train.checkpoint_every_steps = 2
    whole = tmp_path / "whole"
    trainer.train(config, whole, progress=False)
    torn = tmp_path / "torn"
    shutil.copytree(whole, torn)
    for path in (torn / "checkpoints").rglob("*"):
        if path.is_file():
            path.write_bytes(b"torn")
    (torn / "stages.json").unlink()  # the run is not finished: its training is redone
    trainer.train(config, torn, progress=False)
    assert sorted(p.name for p in (torn / "checkpoints.unreadable").iterdir()) == ["2", "4"]
    assert ([r["loss"] for r in fileio.read_jsonl(torn / "metrics.jsonl")] ==
            [r["loss"] for r in fileio.read_jsonl(whole / "metrics.jsonl")])


def test_rows_longer_than_the_pretraining_read_are_noted(pretrained, small_data, capsys):
    """A RoPE fine-tune past every length its pretraining saw (RoFormer's long-text case)
    trained without a word, where a learned table is refused."""
    for length, noted in ((16, False), (32, True)):
        experiment = Experiment.from_config(_finetune(pretrained, small_data,
                                                      f"seq_len={length},steps=1"))
        trainer.finetune.start_from(experiment, experiment.build())
        err = capsys.readouterr().err
        assert (f"note: the pretrained run {pretrained} (train.init_from) trained on rows of "
                "at most 16 tokens and this run reads 32: positions past 16 are new to its "
                "rope encoder") in err if noted else "note:" not in err


def test_the_tiny_pipeline_writes_accuracies_over_seeds_at_two_lengths(
        pretrained, small_data, tmp_path):
    for seq_len in (16, 32):
        for seed in (0, 1):  # one after another (posjax train --seeds vmaps them)
            config = _finetune(pretrained, small_data, f"seq_len={seq_len},steps=4,seed={seed}")
            trainer.train(config, tmp_path / f"len{seq_len}_{seed}", progress=False,
                          evaluate=_Scorer())
    written = plots.plot_sweep(tmp_path)  # posjax plot: the match report
    assert {p.name for p in written} == {"finetune.json", "finetune.md", "finetune.png"}
    summary = json.loads((tmp_path / "finetune.json").read_text())
    rows = {row["length"]: row for row in summary["rows"]}
    assert set(rows) == {16, 32}
    for length, row in rows.items():
        assert sorted(row["seeds"]) == [0, 1] and row["finetune_len"] == length
        assert 0.0 <= row["min_acc"] <= row["mean_acc"] <= row["max_acc"] <= 1.0
    # the data's own ceiling: the short rows see less of the evidence than the long ones
    assert rows[16]["visible"] < rows[32]["visible"] == 1.0
    table = (tmp_path / "finetune.md").read_text()
    assert "| rope (" in table and "checks the set-up, not a result" in table  # smoke runs
    # past the documents (long_len 32: 14 characters each) a row is padding: refused
    scored = evaluate(tmp_path / "len32_0", lengths=(32, 64), output=tmp_path / "past.json")
    assert [row.get("error") for row in scored["lengths"]] == [None, (
        "length 64 reads past the documents (data.doc_chars=14, cut for rows of 32 tokens: "
        "the rest is padding): score lengths up to 32, or fine-tune on documents that long "
        "(configs/finetune.py long_len=64)")]
    # every length given refused: one line and no file of errors only (it was rc 0)
    with pytest.raises(ConfigError, match=r"^--lengths=64: no length could be scored, nothing "
                       r"was written; at 64: length 64 reads past the documents "):
        evaluate(tmp_path / "len32_0", lengths=(64,), output=tmp_path / "none.json")
    assert not (tmp_path / "none.json").exists()
    # --split (the match evaluation's option, named in its refusals): a file of its own
    run = tmp_path / "len32_0"
    own = (run / "extrapolation.json").read_bytes()
    assert cli.main(["extrapolate", f"--workdir={run}", "--split=validation"]) == 0
    assert json.loads((run / "extrapolation_validation.json").read_text())["split"] == "validation"
    assert (run / "extrapolation.json").read_bytes() == own
    with pytest.raises(ConfigError, match=r"^unknown --split 'tset' \(did you mean 'test'\?\)"):
        evaluate(run, split="tset")
    rows = finetune.summarize(plots.load_results(run))["rows"]  # a row of its own, not a seed
    assert [(finetune.label(r), r["seeds"]) for r in rows] == [
        (f"rope ({pretrained.name}) [split=test]", [0]),
        (f"rope ({pretrained.name}) [split=validation]", [0])]


def test_a_fine_tune_refuses_a_pretraining_run_unfinished_or_in_use(pretrained, small_data,
                                                                    tmp_path,
                                                                    lock_held_elsewhere):
    """A fine-tune took checkpoint 2 of 6 of a pretraining run still training, and a run
    interrupted at step 4 of 6, without a word. The refusals name the run as the user gave
    it where configs/finetune.py's pretrained= gave it (they said train.init_from=, a field
    never typed)."""
    config = _finetune(pretrained, small_data, "seq_len=16,steps=2")
    experiment = Experiment.from_config(config)
    with lock_held_elsewhere(pretrained) as holder, pytest.raises(ConfigError) as busy:
        trainer.finetune.start_from(experiment, experiment.build())
    assert str(busy.value).startswith(
        f"the pretrained run {pretrained} (train.init_from) is in use by PID {holder.pid} "
    ), busy.value
    assert str(busy.value).endswith(": wait for it to finish, then re-run this command")
    unfinished = tmp_path / "unfinished"
    shutil.copytree(pretrained, unfinished)
    saved = fileio.read_json(unfinished / "config.json")  # 3 steps trained of 6
    saved["train"]["stages"] = [[16, 4, 6]]
    fileio.write_json(unfinished / "config.json", saved)
    config.train.init_from = str(unfinished)
    experiment = Experiment.from_config(config)
    with pytest.raises(ConfigError) as early:
        trainer.finetune.start_from(experiment, experiment.build())
    assert str(early.value) == (
        f"the pretrained run {unfinished} (train.init_from) has trained 3 of its 6 steps: "
        "finish it first (re-run its posjax train command), or start from a run that finished")


@pytest.mark.parametrize("arg, message", [
    # the rows past the documents were padding, the table's length the longer one
    ("smoke,seq_len=64", "seq_len=64 reads past the documents, sized for long_len=32 (a run "
     "at long_len reads them whole): give seq_len <= 32, or long_len=64"),
    ("seq_len=256", "seq_len=256 reads past the documents, sized for long_len=128"),
    ("smoke,fractions=0.5+3,seq_len=16", "fractions=0.5+3.0: each is a share of long_len=32, "
     "in (0, 1]: long_len is the longest fine-tune (the documents are cut to fit it)"),
    ("smoke,fractions=-0.5,seq_len=16", "fractions=-0.5: each is a share of long_len=32"),
    ("smoke,fractions=0.2+0.25,seq_len=16", "fractions=0.2+0.25 give the lengths [8, 8] of "
     "long_len=32, one of them twice: give fractions that differ"),
    ("smoke,fractions=0.5", "fractions=0.5 names the runs of posjax sweep, one per length; "
     "one run trains one: give seq_len=N, or drop fractions="),
    # it said "data.doc_chars=0 must be >= 8 characters", a field no one gave
    ("smoke,long_len=4", "long_len=4 cuts documents of 0 characters, fewer than the 8 a "
     "triplet needs: give long_len >= 19"),
])
def test_fine_tune_lengths_past_the_documents_or_bad_fractions_are_refused(arg, message):
    """fractions=0.5+3 planned a 96-token fine-tune against long_len=32, -0.5 an 8-token one,
    and 0+-0.5 said 'sweep adds run seq_len=8 twice'; a lone run took fractions= silently."""
    module = configlib.load_config_module(FINETUNE)
    with pytest.raises(ConfigError) as refused:
        module.get_config(arg)
    assert str(refused.value).startswith(message)
    if "fractions" in arg and "seq_len" in arg:  # the sweep's own plan refuses the same
        with pytest.raises(ConfigError) as planned:
            module.sweep(lambda **keys: None, arg.replace(",seq_len=16", ""))
        assert str(planned.value).startswith(message)


def _match(seed: int, accs: dict, method: str = "none") -> dict:
    return {"init_from": "/runs/mlm_rope", "encoding": {"name": "rope"}, "pooling": "cls",
            "train_len": 32, "seed": seed, "run": f"seq_len=32,seed={seed}", "method": method,
            "lengths": [{"length": n, "acc": a, "ceiling": 1.0, "visible": 1.0}
                        for n, a in accs.items()]}


def test_a_method_is_a_row_of_its_own_and_a_length_not_every_seed_scored_is_left_out():
    """A --rope_scaling=yarn:2 evaluation of seed 0 was averaged in as a third seed (seeds
    [0, 1, 0], mean 0.3958 over "3"), and a length scored by one seed of two was in the table
    that said it was left out."""
    plain = {"series": "seq_len=32", "per_seed": [_match(0, {16: 0.75, 32: 0.5}),
                                                  _match(1, {32: 0.25})]}
    yarn = {"series": "seq_len=32 +yarn:2", "per_seed": [_match(0, {32: 0.4375}, "yarn:2")]}
    rows = finetune.summarize([plain, yarn])["rows"]
    assert [(finetune.label(r), r["length"], r["seeds"], r["mean_acc"]) for r in rows] == [
        ("rope (mlm_rope)", 32, [0, 1], 0.375),
        ("rope +yarn:2 (mlm_rope)", 32, [0], 0.4375)]


def test_runs_trained_otherwise_are_rows_of_their_own_named_by_what_differs():
    """Fine-tunes at another learning rate, or of a mean-pooled head, were averaged in as
    more seeds of one row, and one seed run twice counted as two seeds; then one setup was
    labelled otherwise at each length, a logging setting split one model's seeds, a learned
    table's extension went unnamed and two pretrained runs of one folder name read as one."""
    def trained(seed, acc, lr=3e-4, pooling="cls", folder=None, length=32, log_every=1,
                start="/runs/mlm_rope", **fields):
        result = _match(seed, {length: acc})
        setup = {"train": {"learning_rate": lr, "log_every_steps": log_every,
                           "stages": [[length, 16, 300]]}, "model": {"pooling": pooling}}
        return {**result, "pooling": pooling, "setup": json.dumps(setup), "train_len": length,
                "init_from": start, "folder": folder or f"/runs/{lr},{pooling},{length},{seed}",
                **fields}

    def rows(*runs):
        summary = finetune.summarize([{"series": "x", "per_seed": [r]} for r in runs])
        return [(finetune.label(r), r["finetune_len"], r["seeds"], r["mean_acc"])
                for r in summary["rows"]]

    assert rows(trained(0, 0.5), trained(1, 0.75, log_every=2), trained(0, 1.0, lr=1e-4),
                trained(0, 0.25, pooling="mean"), trained(0, 0.5, length=16)) == [
        ("rope (mlm_rope) [train.learning_rate=0.0001]", 32, [0], 1.0),
        ("rope (mlm_rope) [train.learning_rate=0.0003]", 16, [0], 0.5),
        ("rope (mlm_rope) [train.learning_rate=0.0003]", 32, [0, 1], 0.625),
        ("rope (mlm_rope, mean pooling) [train.learning_rate=0.0003]", 32, [0], 0.25)]
    assert rows(trained(0, 0.5), trained(0, 0.25, learned_extension="hierarchical",
                                         learned_extension_given=True)) == [
        ("rope (mlm_rope)", 32, [0], 0.5),
        ("rope +hierarchical extension (mlm_rope)", 32, [0], 0.25)]
    assert [r[0] for r in rows(trained(0, 0.5, start="/runs/x/mlm"),
                               trained(0, 0.25, start="/runs/y/mlm"))] == [
        "rope (x/mlm)", "rope (y/mlm)"]
    # a key added to posjax since one of them trained is no difference (roformer_finetune's
    # fine-tunes of 2026-12-03 beside those of 2026-11-27: [train.schedule_restarts=[]] and
    # [train.schedule_restarts=None])
    newer = trained(0, 0.5)
    setup = json.loads(newer["setup"])
    setup["train"]["schedule_restarts"] = []
    assert [r[0] for r in rows({**newer, "setup": json.dumps(setup)},
                               trained(0, 0.25, start=""))] == [
        "rope (mlm_rope)", "rope (no pretraining)"]
    twice = [trained(0, 0.5, folder="/runs/a"), trained(0, 0.75, folder="/runs/b")]
    with pytest.raises(ConfigError, match=r"^runs /runs/a and /runs/b are the same fine-tune "
                       r"\(rope \(mlm_rope\), fine-tuned at 32\) trained with the same seed 0: "
                       r"they would count as two seeds; plot one of them$"):
        rows(*twice)


def test_the_picture_labels_its_ceiling_and_chance_lines(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(finetune.plt, "close", figures.append)
    plain = {"series": "seq_len=32", "per_seed": [_match(0, {32: 0.5}), _match(1, {32: 0.75})]}
    finetune.plot(finetune.summarize([plain]), tmp_path / "finetune.png")
    legend = [text.get_text() for text in figures[0].axes[0].get_legend().get_texts()]
    assert legend == ["ceiling (the data)", "chance (two classes)", "rope (mlm_rope)"]


@pytest.mark.parametrize("arg, dropped", [("encoding=alibi", "encoding="),
                                           ("theta=500", "theta="),
                                           ("encoding=rope,theta=500", "encoding=, theta=")])
def test_an_encoding_beside_pretrained_is_refused_not_ignored(pretrained, arg, dropped):
    """pretrained= brings the run's encoding: one named beside it would be replaced."""
    with pytest.raises(ConfigError, match=rf"^pretrained=.* fine-tunes that run's "
                       rf"encoding \(rope\) with its settings: drop {dropped} from the arg$"):
        configlib.load_config_module(FINETUNE).get_config(f"smoke,pretrained={pretrained},{arg}")


@pytest.mark.parametrize("kind, message", [
    ("causal_lm", r"is a causal_lm run: doc_match fine-tunes a masked-LM encoder, whose "
                  r"bidirectional body the classifier shares; pretrain one with posjax train "
                  r"--config=configs/mlm.py"),
    ("classifier", r"is itself a fine-tune \(model.kind=classifier\): give the MLM run it "
                   r"started from \(/runs/mlm\)")])
def test_a_run_that_is_no_mlm_encoder_is_refused_as_pretrained(pretrained, small_data,
                                                               tmp_path, kind, message):
    """A causal LM's run (and a fine-tune's) loaded into the classifier name for name, with
    rc 0 and no word."""
    saved = json.loads((pretrained / "config.json").read_text())
    saved["model"]["kind"] = kind
    saved["train"]["init_from"] = "/runs/mlm" if kind == "classifier" else ""
    run = tmp_path / kind
    run.mkdir()
    (run / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ConfigError, match=rf"^pretrained={run} {message}$"):
        configlib.load_config_module(FINETUNE).get_config(f"smoke,pretrained={run}")
    # the same through --config.train.init_from, which skipped the check
    config = _finetune(pretrained, small_data, "seq_len=16,steps=2")
    config.train.init_from = str(run)
    experiment = Experiment.from_config(config)
    with pytest.raises(ConfigError, match=rf"^the pretrained run {run} \(train.init_from\) "
                                          rf"{message}$"):
        trainer.finetune.start_from(experiment, experiment.build())


def test_sliding_windows_on_an_mlm_run_are_refused(pretrained, capsys):
    """They scored each window's last tokens, which a bidirectional encoder reads with no
    context to their right (perplexity 28.155 against 28.227, as if from more context)."""
    assert cli.main(["extrapolate", f"--workdir={pretrained}", "--protocol=sliding",
                     "--stride=8", "--lengths=16"]) == 2
    assert capsys.readouterr().err.strip() == (
        "posjax extrapolate: error: sliding windows score each window's last `stride` tokens, "
        "which a masked LM reads with no context to their right, not with more context as a "
        "causal LM does: score an MLM run with non-overlapping windows (drop "
        "--protocol=sliding)")
    assert not list(pretrained.glob("extrapolation*sliding*"))


def test_a_hugging_face_snapshot_as_pretrained_is_one_line_naming_what_scores_it():
    """pretrained=tests/fixtures/pretrained/llama (a Hugging Face snapshot, which
    docs/pretrained.md scores) raised KeyError: 'model' in configs/finetune.py."""
    snapshot = Path(__file__).parent / "fixtures" / "pretrained" / "llama"
    with pytest.raises(ConfigError) as error:
        configlib.load_config_module(FINETUNE).get_config(f"smoke,pretrained={snapshot}")
    assert str(error.value) == (
        f"{snapshot / 'config.json'} is a Hugging Face model's (model_type 'llama'), not one "
        f"posjax train wrote: give a run's folder; `posjax extrapolate --pretrained={snapshot}` "
        "scores a Hugging Face snapshot")


def test_a_sweeps_run_folder_with_commas_is_named_in_quotes(pretrained, tmp_path):
    """A sweep names its runs `encoding=rope,seed=0`: quoted, the whole name is the path (the
    comma no longer cuts it into a stray seed=0); unquoted, the refusal shows the quotes."""
    run = tmp_path / "encoding=rope,seed=0"
    run.symlink_to(pretrained, target_is_directory=True)
    finetune = configlib.load_config_module(FINETUNE)
    config = finetune.get_config(f"smoke,pretrained='{run}',seed=3")
    assert config.train.init_from == str(run) and config.train.seed == 3
    runs = sweep.expand(FINETUNE, f"smoke,pretrained='{run}',seeds=2")  # posjax sweep's plan
    assert sorted(r.config.train.seed for r in runs) == [0, 0, 1, 1]
    assert {r.config.train.init_from for r in runs} == {str(run)}
    (tmp_path / "encoding=rope,seed=1").symlink_to(pretrained, target_is_directory=True)
    with pytest.raises(ConfigError, match=r"^pretrained=.*/encoding=rope does not "
                       r"exist \(did you mean .*seed=0\?\): a run folder with commas in its "
                       r"name goes in quotes, --config=\"configs/finetune.py:pretrained='"
                       r".*/encoding=rope,seed=0'\"$"):
        finetune.get_config(f"smoke,pretrained={run},steps=2")


def test_a_sweeps_run_given_without_its_runs_folder_is_named_with_it(pretrained, tmp_path):
    """pretrained='runs/mlm/encoding=rope,seed=0' (the config's docstring had it so) said
    only "does not exist": a sweep keeps its runs under runs/."""
    sweep_dir = tmp_path / "mlm"
    (sweep_dir / "runs").mkdir(parents=True)
    (sweep_dir / "sweep.json").write_text("{}")
    (sweep_dir / "runs" / "encoding=rope,seed=0").symlink_to(pretrained, target_is_directory=True)
    with pytest.raises(ConfigError, match=rf"^pretrained={sweep_dir}/encoding=rope,seed=0 does "
                       rf"not exist \(did you mean {sweep_dir}/runs/encoding=rope,seed=0\?\)"):
        configlib.load_config_module(FINETUNE).get_config(
            f"smoke,pretrained='{sweep_dir}/encoding=rope,seed=0'")


def test_a_sweeps_folder_as_pretrained_names_a_run_in_the_args_words(pretrained, tmp_path):
    """pretrained=SWEEPDIR advised --workdir=SWEEPDIR/runs/RUN, a flag a fine-tune's config
    arg does not take, unquoted where the run's name has commas."""
    sweep_dir = tmp_path / "mlm"
    (sweep_dir / "runs").mkdir(parents=True)
    (sweep_dir / "sweep.json").write_text("{}")
    (sweep_dir / "runs" / "encoding=rope,seed=0").symlink_to(pretrained, target_is_directory=True)
    with pytest.raises(ConfigError) as err:
        configlib.load_config_module(FINETUNE).get_config(f"smoke,pretrained={sweep_dir}")
    assert str(err.value) == (
        f"{sweep_dir} is a sweep's folder, not a run's: give one of its runs, "
        f"pretrained='{sweep_dir}/runs/encoding=rope,seed=0' (its runs: encoding=rope,seed=0)")


def test_a_sweep_makes_a_relative_pretrained_run_absolute_for_any_host(pretrained, tmp_path,
                                                                      monkeypatch):
    """A relative pretrained= was read against the working directory of whichever host ran
    the sweep's job (Ray, SLURM): the sweep now plans it absolute, quoted with its commas."""
    (tmp_path / "runs").mkdir()
    run = tmp_path / "runs" / "encoding=rope,seed=0"
    run.symlink_to(pretrained, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    runs = sweep.expand(FINETUNE, "smoke,pretrained='runs/encoding=rope,seed=0',seeds=2")
    assert {r.config.train.init_from for r in runs} == {str(run)}
    (command,) = sweep.commands(FINETUNE, runs[0], tmp_path / "sweep")
    assert f"pretrained='{run}'" in command[2]
    elsewhere = tmp_path / "another_host"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = configlib.configured(command[2].removeprefix("--config="), [])
    assert config.train.init_from == str(run)


class _Scorer:
    """What posjax train --extrapolate hands the trainer."""

    def __call__(self, experiment, workdir, step, params):
        return evaluate_trained(experiment, workdir, step, params)

    def scored(self, experiment, workdir) -> bool:
        return False

    def check(self, experiment) -> None:
        check_trained(experiment)


def test_the_gpu_sizes_run_roformers_six_stages_at_half_its_lengths_and_fine_tune_within_them():
    """configs/mlm.py size=gpu (scripts/gpu_check.sh's roformer stage): BERT-small or larger,
    Table 4's six stages at lengths at least a quarter of the paper's, in its proportions;
    configs/finetune.py size=gpu fine-tunes at lengths the pretraining reached."""
    mlm = configlib.load_config_module(MLM)
    config = mlm.get_config("size=gpu")
    assert config.model.num_layers >= 4 and config.model.d_model >= 512
    stages = config.train.stages
    assert len(stages) == len(mlm.ROFORMER_STAGES) == 6
    paper = [n for n, _, _ in mlm.ROFORMER_STAGES]
    assert all(4 * n >= p for (n, _, _), p in zip(stages, paper, strict=True))
    assert [n / stages[0][0] for n, _, _ in stages] == [p / paper[0] for p in paper]
    finetune = configlib.load_config_module(FINETUNE).get_config("size=gpu")
    assert finetune.train.stages[0][0] <= max(n for n, _, _ in stages)


def test_a_width_that_differs_is_named_as_a_model_size_not_a_position_table():
    """A fine-tune of another d_model from a run said its final norm's bias "has 32 rows
    (positions the pretrained run read)": any parameter whose first axis alone differed was
    taken for a position table."""
    import numpy as np

    from posjax.train.finetune import _fitted

    with pytest.raises(ConfigError) as refused:
        _fitted(("backbone", "final_norm", "bias"), np.zeros(32, np.float32),
                np.zeros(64, np.float32), "train.init_from=RUN")
    assert str(refused.value) == (
        "train.init_from=RUN: backbone.final_norm.bias is (32,) there and (64,) here: fine-tune "
        "with the pretrained run's model sizes and tokenizer (configs/finetune.py:pretrained=RUN "
        "copies them)")
    table = ("backbone", "input_site", "params", 0, "table")
    rows = np.arange(8.0, dtype=np.float32).reshape(4, 2)
    fewer = _fitted(table, rows, np.zeros((3, 2), np.float32), "RUN")
    np.testing.assert_array_equal(fewer, rows[:3])
    with pytest.raises(ConfigError, match="table has 4 rows .* this run reads 6: rows past 4 "
                                          "were never trained"):
        _fitted(table, rows, np.zeros((6, 2), np.float32), "RUN")
    with pytest.raises(ConfigError, match=r"is \(4, 2\) there and \(6, 2\) here"):
        _fitted(("backbone", "embed", "embedding"), rows, np.zeros((6, 2), np.float32), "RUN")


def test_the_local_text_corpus_of_doc_match_is_built_with_the_configs_fields(monkeypatch,
                                                                            tmp_path):
    """The builder's name recorded the corpus's validation_fraction and max_text_bytes, and
    its split generator built the corpus with their defaults instead."""
    for k, text in enumerate(TEXTS):
        (tmp_path / f"{k}.txt").write_text(text)
    cfg = data.default_data_config("doc_match")
    cfg.update(match_corpus="local_text", text_glob=str(tmp_path / "*.txt"),
               validation_fraction=0.5, max_text_bytes=1000)
    config = matching.match_config(cfg)
    assert (config.validation_fraction, config.max_text_bytes) == (0.5, 1000)
    built = []

    def corpus_kind(data_cfg):
        built.append((data_cfg.validation_fraction, data_cfg.max_text_bytes))
        raise ConfigError("stop here")

    monkeypatch.setattr(matching, "corpus_kind", corpus_kind)
    with pytest.raises(ConfigError, match="stop here"):
        matching.DocMatch(config=config)._split_generators(None)
    assert built == [(0.5, 1000)]


def test_a_pretrained_run_that_is_gone_is_named_as_the_pretrained_arg(tmp_path):
    """A resumed fine-tune whose pretrained run moved said "give the --workdir of a trained
    run (posjax train)", a flag the user never gave; a fine-tune before its pretraining was
    pointed at the nearest folder, a causal LM's."""
    gone = tmp_path / "mlm_moved"
    with pytest.raises(ConfigError) as raised:
        configlib.load_config_module(FINETUNE).get_config(f"smoke,pretrained={gone}")
    assert str(raised.value) == (
        f"{gone} does not exist: pretrained= names the masked-LM run whose encoding, sizes and "
        "tokenizer this config copies, a resumed fine-tune's too: give its folder, put it "
        f"back, or pretrain it first (posjax train --config=configs/mlm.py:encoding=rope "
        f"--workdir={gone})")


def test_the_caption_names_the_splits_scored(tmp_path):
    """finetune.md and finetune.png said "doc_match test accuracy" over rows of the
    validation and train splits too."""
    rows = [{"split": "test"}, {"split": "validation"}]
    assert finetune._accuracy_of(rows[:1]) == "doc_match test accuracy"
    assert finetune._accuracy_of(rows[1:]) == "doc_match validation accuracy"
    assert finetune._accuracy_of(rows) == (
        "doc_match accuracy on the test split, or the split a label names")


def test_documents_longer_than_the_corpus_files_name_the_longest_that_fits_and_leave_no_folder(
        tmp_path):
    """long_len=400000 named data.doc_chars, a field the user never gave, with no size that
    fits, and left the dataset's empty folder behind."""
    for k, text in enumerate(TEXTS):
        (tmp_path / f"{k}.txt").write_text(text)
    cfg = data.default_data_config("doc_match")
    cfg.update(match_corpus="local_text", text_glob=str(tmp_path / "*.txt"),
               validation_fraction=0.5, data_dir=str(tmp_path / "data"),
               doc_chars=10 * max(map(len, TEXTS)))
    third = sorted(map(len, TEXTS))[-3] // 2  # each split holds 3 of the 6 files, all alike
    with pytest.raises(ConfigError, match=rf"at most {third} \(configs/finetune.py's long_len "
                                          rf"to at most {2 * third + 4}\)"):
        data.sources.prepare(data.kind_of(cfg))
    assert [p.name for p in (tmp_path / "data" / "doc_match").iterdir()] == [
        f"{matching.match_config(cfg).name}.build.lock"]
