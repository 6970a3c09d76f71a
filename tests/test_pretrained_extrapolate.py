"""`posjax extrapolate --pretrained=DIR`: a tiny Hugging Face snapshot scored by length through
the evaluation trained runs get (posjax.pretrained.extrapolate), on a small local corpus.

The scores are checked against cross-entropy computed from `Pretrained.logits` on the same
windows, so the Experiment built from a snapshot (its tokenizer, BOS/EOS, weights, packed
rows) scores exactly what the model predicts.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from posjax import fileio, pretrained
from posjax.errors import ConfigError
from posjax.launch import cli
from posjax.pretrained import extrapolate

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "pretrained"
LLAMA = FIXTURES / "llama"
LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
WORDS = ("def", "return", "the", "position", "of", "token", "rotary", "class", "(x)", "+ 1",
         "\n", "    ", "import", "length", "=", ":", "#", "window", "yield", "None")


def _text(seed: int, words: int) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(WORDS[i] for i in rng.integers(len(WORDS), size=words))


@pytest.fixture(autouse=True)
def results_root(tmp_path, monkeypatch) -> Path:
    """This test's own results root (POSJAX_RESULTS_DIR): nothing lands in the home folder."""
    monkeypatch.setenv("POSJAX_RESULTS_DIR", str(tmp_path / "results"))
    return tmp_path / "results"


@pytest.fixture
def corpus(tmp_path, monkeypatch) -> Path:
    """A folder of three generated text files (any dataset prepared would land in
    tmp_path/data)."""
    monkeypatch.setenv("POSJAX_DATA_DIR", str(tmp_path / "data"))
    folder = tmp_path / "corpus"
    folder.mkdir()
    for seed in range(3):
        (folder / f"doc{seed}.txt").write_text(_text(seed, 400))
    return folder


def _only_line(capsys, argv: list[str]) -> str:
    """The whole of stderr after `posjax ARGV` exits 2, which must be one line."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    return err.strip()


def test_yarn_4_runs_to_4x_the_trained_length_and_prints_its_table(
        corpus, tmp_path, monkeypatch, capsys, results_root):
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in LLAMA.iterdir())
    assert cli.main(["extrapolate", f"--pretrained={LLAMA}", "--rope_scaling=yarn:4",
                     "--lengths=32,64,128", f"--text_glob={corpus}/*.txt"]) == 0
    out = capsys.readouterr().out.splitlines()
    out = out[out.index("llama (trained at 32, nonoverlapping, method yarn:4)"):]  # after tfds
    written = results_root / "pretrained" / "llama" / "extrapolation_yarn-4.json"
    result = fileio.read_json(written)
    # the three files hold fewer tokens than the default budget (16384): all are scored
    assert result["max_tokens"] < 16384
    assert out[1] == (f"scored on local_text, the files matching {corpus}/*.txt (fingerprint "
                      f"{result['data']['fingerprint']}), first {result['max_tokens']} tokens, "
                      "the model's own tokenizer")
    assert out[2:5] == ["", "| length | loss | ppl | acc |", "|---|---|---|---|"]
    assert [line.split(" | ")[0] for line in out[5:8]] == ["| 32", "| 64", "| 128"]
    assert out[8:] == [f"wrote {written}"]
    assert not (tmp_path / "runs").exists()  # nothing in the folder the command ran in
    assert (result["run"], result["train_len"], result["method"]) == ("llama", 32, "yarn:4")
    assert "step" not in result and result["pretrained"] == str(LLAMA)
    rows = result["lengths"]
    assert [row["length"] for row in rows] == [32, 64, 128]
    # every length scores the same tokens, each as well as a model can below ln(vocab) * 2
    assert len({row["tokens"] for row in rows}) == 1
    assert all(0 < row["loss"] < 2 * math.log(96) for row in rows)
    assert sorted(p.name for p in LLAMA.iterdir()) == before  # nothing written into it
    assert not (tmp_path / "data").exists()  # the glob's files are read as they are


def _cross_entropy(model, stream: np.ndarray, length: int, bos: int) -> float:
    """Mean next-token loss over windows of `length` that cut `stream` without overlap, from
    `model.logits` (targets equal to BOS are not scored, as in posjax's evaluation)."""
    total, weight = 0.0, 0
    for start in range(0, len(stream) - 1, length):
        inputs, targets = stream[start:start + length], stream[start + 1:start + length + 1]
        logits = model.logits(inputs[None])[0].astype(np.float64)
        shifted = logits - logits.max(-1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        scored = targets != bos
        total -= float(logp[np.arange(len(targets)), targets][scored].sum())
        weight += int(scored.sum())
    return total / weight


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_scoring_a_snapshot_gives_the_cross_entropy_of_its_logits(tmp_path, monkeypatch,
                                                                   family):
    """One document, 64 scored tokens: windows of 32 (one per row) and of 16 (packed two per
    row of 32) score the loss the model's own logits give on those windows."""
    monkeypatch.setenv("POSJAX_DATA_DIR", str(tmp_path / "data"))
    text = tmp_path / "one.txt"
    text.write_text(_text(7, 200))
    result = extrapolate.evaluate_pretrained(
        FIXTURES / family, lengths=[16, 32], max_tokens=64, text_glob=str(text),
        output=str(tmp_path / "out" / "result.json"))
    assert [row["row_len"] for row in result["lengths"]] == [32, 32]
    model = pretrained.load(FIXTURES / family)
    tokenizer = extrapolate.model_tokenizer(model)
    stream = np.concatenate([[tokenizer.bos_id], tokenizer.encode(text.read_text()),
                             [tokenizer.eos_id]])[:65]
    for row in result["lengths"]:
        assert row["tokens"] == 64
        expected = _cross_entropy(model, stream, row["length"], tokenizer.bos_id)
        np.testing.assert_allclose(row["loss"], expected, rtol=1e-5)


def test_a_snapshot_with_a_sliding_window_scores_past_it(tmp_path, monkeypatch):
    """A length past config.json's sliding_window was an error row: the loader did not map
    it onto the model. Windows of 32 (and of 16, packed two per row) past a window of 8
    score the loss the model's own logits give."""
    monkeypatch.setenv("POSJAX_DATA_DIR", str(tmp_path / "data"))
    snapshot = tmp_path / "mistral"
    shutil.copytree(FIXTURES / "mistral", snapshot)
    config = json.loads((snapshot / "config.json").read_text())
    (snapshot / "config.json").write_text(json.dumps({**config, "sliding_window": 8}))
    text = tmp_path / "one.txt"
    text.write_text(_text(7, 200))
    result = extrapolate.evaluate_pretrained(snapshot, lengths=[16, 32], max_tokens=64,
                                             text_glob=str(text),
                                             output=str(tmp_path / "out" / "result.json"))
    model = pretrained.load(snapshot)
    tokenizer = extrapolate.model_tokenizer(model)
    stream = np.concatenate([[tokenizer.bos_id], tokenizer.encode(text.read_text()),
                             [tokenizer.eos_id]])[:65]
    for row in result["lengths"]:
        expected = _cross_entropy(model, stream, row["length"], tokenizer.bos_id)
        np.testing.assert_allclose(row["loss"], expected, rtol=1e-5)


def test_results_go_to_posjax_results_in_the_home_folder_unless_told(monkeypatch, tmp_path):
    monkeypatch.delenv("POSJAX_RESULTS_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert extrapolate.output_dir(LLAMA, None) == (
        tmp_path / "home" / "posjax_results" / "pretrained" / "llama")
    assert extrapolate.output_dir(LLAMA, "out/llama.json") == Path("out")
    monkeypatch.setenv("POSJAX_RESULTS_DIR", str(tmp_path / "mine"))
    assert extrapolate.output_dir(LLAMA, None) == tmp_path / "mine" / "pretrained" / "llama"


def test_the_tokenizer_takes_bos_and_eos_from_config_json(tmp_path):
    model = pretrained.load(LLAMA)
    tokenizer = extrapolate.model_tokenizer(model)
    assert (tokenizer.bos_id, tokenizer.eos_id, tokenizer.vocab_size) == (0, 1, 96)
    ids = tokenizer.encode("def f(x):")
    assert ids.dtype == np.int32 and list(ids) == model.tokenizer.encode(
        "def f(x):", add_special_tokens=False).ids
    model.config = {**model.config, "bos_token_id": None, "eos_token_id": [5, 6]}
    assert extrapolate.model_tokenizer(model).bos_id == 5  # either stands for the other
    model.config = {**model.config, "eos_token_id": None}
    with pytest.raises(ConfigError, match="neither bos_token_id nor eos_token_id"):
        extrapolate.model_tokenizer(model)
    model.config = {**model.config, "bos_token_id": 0, "vocab_size": 50}
    with pytest.raises(ConfigError, match="tokenizer.json has 96 tokens, more than"):
        extrapolate.model_tokenizer(model)


@pytest.mark.parametrize(("argv", "line"), [
    ([], "--workdir or --pretrained is required; usage: posjax extrapolate "
         "--workdir=RUNDIR|--pretrained=DIR [flags]"),
    (["--workdir=runs/x", f"--pretrained={LLAMA}"],
     "give one of --workdir and --pretrained, not both; usage: posjax extrapolate "
     "--workdir=RUNDIR|--pretrained=DIR [flags]"),
    ([f"--pretrained={LLAMA}", "--learned_extension=hierarchical"],
     "--learned_extension applies to --workdir runs only, not to --pretrained: drop it"),
    ([f"--pretrained={LLAMA}", "--num_processes=2"],
     "--num_processes applies to --workdir runs only, not to --pretrained: drop it"),
    (["--pretrained=/nonexistent/llama"],
     "pretrained model directory /nonexistent/llama does not exist: get one with "
     "`hf download NAME --local-dir DIR`"),
    ([f"--pretrained={LLAMA}", "--rope_scaling=yarnn:4"],
     "unknown length-extension method 'yarnn'"),
    # a snapshot has no run whose eval.max_tokens this was
    ([f"--pretrained={LLAMA}", "--lengths=32,65536"],
     "posjax's default eval.max_tokens=16384 scores fewer tokens than the length 65536"),
])
def test_bad_extrapolate_flags_are_one_line(tmp_path, monkeypatch, capsys, argv, line):
    monkeypatch.chdir(tmp_path)
    got = _only_line(capsys, ["extrapolate", *argv])
    assert got.startswith(f"posjax extrapolate: error: {line}"), got
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*.json"))


def test_a_trained_run_is_scored_on_other_text_into_its_own_file(corpus, tmp_path, capsys,
                                                                   data_flags):
    """--text_glob was --pretrained's only: a trained run could not be scored on other text.
    It reads the files with the run's tokenizer, into --output (the run's own result stays),
    and its caption names the text."""
    run = tmp_path / "run"
    assert cli.main(["train", f"--config={LM}:smoke,lengths=32+64", f"--workdir={run}",
                     "--noprogress", "--extrapolate", *data_flags]) == 0
    own = (run / "extrapolation.json").read_bytes()
    base = ["extrapolate", f"--workdir={run}", f"--text_glob={corpus}/*.txt", "--lengths=32,64"]
    capsys.readouterr()
    assert _only_line(capsys, base) == (
        f"posjax extrapolate: error: --text_glob scores {run} on other text than its own: give "
        "--output=FILE.json, so the run's own result stays as it is")
    assert cli.main([*base, f"--output={tmp_path / 'books.json'}"]) == 0
    result = fileio.read_json(tmp_path / "books.json")
    assert (result["data"]["dataset"], result["data"]["text_glob"]) == (
        "local_text", f"{corpus}/*.txt")
    assert result["data"]["tokenizer"] == "bytes"  # the run's by its name, not "model"
    assert [row["length"] for row in result["lengths"]] == [32, 64]
    assert all(row["ppl"] > 1 for row in result["lengths"])
    out = capsys.readouterr().out
    assert f"the files matching {corpus}/*.txt" in out and "bytes tokenizer" in out
    assert (run / "extrapolation.json").read_bytes() == own


def test_a_text_glob_matching_nothing_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("POSJAX_DATA_DIR", str(tmp_path / "data"))
    got = _only_line(capsys, ["extrapolate", f"--pretrained={LLAMA}",
                              f"--text_glob={tmp_path}/none/*.txt",
                              f"--output={tmp_path}/out.json"])
    assert got == (f"posjax extrapolate: error: --text_glob={tmp_path}/none/*.txt matches no "
                   "files: point it at your text files, e.g. '/path/to/books/**/*.txt'")
    assert not (tmp_path / "out.json").exists()


def test_the_memory_floor_counts_a_bfloat16_snapshot_at_2_bytes_per_parameter():
    floors = {}
    for dtype in ("float32", "bfloat16"):
        experiment = extrapolate.experiment_of(pretrained.load(LLAMA, dtype=dtype))
        floors[dtype] = experiment.memory_floor(2048, 1, training=False)  # chunked: no scores
    cfg = experiment.model_config
    halved = 2 * experiment.num_params + 2 * 2048 * cfg.d_model * (cfg.num_layers + 1)
    assert floors["float32"] - floors["bfloat16"] == halved


def _with_digits(tmp_path) -> Path:
    """The llama fixture with a character tokenizer that writes digits (the fixture's own,
    trained on text without them, drops them): 67 characters, within its vocab of 96."""
    import shutil
    import string

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    snapshot = tmp_path / "llama_digits"
    shutil.copytree(LLAMA, snapshot)
    alphabet = ["[UNK]", "▁", *string.ascii_letters, *string.digits, ".", "\n", "?"]
    tokenizer = Tokenizer(models.WordLevel({c: i for i, c in enumerate(alphabet)}, "[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(), pre_tokenizers.Split("", "isolated")])
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.save(str(snapshot / "tokenizer.json"))
    return snapshot


def test_a_snapshot_is_scored_on_passkey_per_cell_with_a_method(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    snapshot = _with_digits(tmp_path)
    assert cli.main(["extrapolate", f"--pretrained={snapshot}", "--eval=passkey",
                     "--rope_scaling=yarn:32", "--lengths=512,1024", "--depths=0,1",
                     "--trials=2"]) == 0
    out = capsys.readouterr().out
    assert "llama_digits (passkey, trained at 32, method yarn:32" in out
    folder = tmp_path / "results" / "pretrained" / "llama_digits"
    assert out.splitlines()[-2:] == [f"wrote {folder / 'retrieval_passkey_yarn-32.json'}",
                                     f"wrote {folder / 'retrieval_passkey_yarn-32.png'}"]
    result = fileio.read_json(folder / "retrieval_passkey_yarn-32.json")
    assert [r["length"] for r in result["lengths"]] == [512, 1024]
    assert result["pretrained"] == str(snapshot) and "step" not in result
    for row in result["lengths"]:
        assert [c["depth"] for c in row["cells"]] == [0.0, 1.0]
        assert all(c["trials"] == 2 and 0 <= c["acc"] <= 1 for c in row["cells"])
    assert (folder / "retrieval_passkey_yarn-32.png").stat().st_size > 0


def test_passkey_on_a_tokenizer_without_digits_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = _only_line(capsys, ["extrapolate", f"--pretrained={LLAMA}", "--eval=passkey"])
    assert line == ("posjax extrapolate: error: passkey's answers are numbers, and this "
                    "tokenizer drops digits (0123456789 reads back as ''): evaluate a model "
                    "whose tokenizer writes them")


def test_a_task_evaluation_or_a_retrieval_option_on_text_is_one_line(tmp_path, monkeypatch,
                                                                     capsys):
    monkeypatch.chdir(tmp_path)
    assert "--eval=task scores a run's own data" in _only_line(
        capsys, ["extrapolate", f"--pretrained={LLAMA}", "--eval=task"])
    assert "--trials does not apply to" in _only_line(
        capsys, ["extrapolate", f"--pretrained={LLAMA}", "--trials=3"])


def _scalars(events, tag: str) -> dict[int, float]:
    """TensorBoard's points of `tag` among `events`: {step: value}, a step logged twice is a
    failure (its chart would mix two measurements)."""
    points = [(event.step, value.simple_value) for event in events
              for value in event.summary.value if value.tag == tag]
    assert len({step for step, _ in points}) == len(points), points
    return dict(points)


def test_a_re_run_on_other_text_never_merges_rows_of_the_first(
        corpus, tmp_path, monkeypatch, capsys, results_root, tensorboard_events):
    """Lengths 32,64,128 on the embedded text, then 32,128 on a glob with a token budget: the
    second file and table hold only 32 and 128, measured on the glob's text, and the file
    and the caption name the text; TensorBoard holds the second's numbers alone. The same
    text again with other lengths adds to the file and to TensorBoard (lengths of one
    evaluation accumulate), each length once."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("POSJAX_DATA_DIR", str(tmp_path / "data"))
    written = results_root / "pretrained" / "llama" / "extrapolation_yarn-4.json"
    base = ["extrapolate", f"--pretrained={LLAMA}", "--rope_scaling=yarn:4"]
    assert cli.main([*base, "--lengths=32,64,128", "--max_tokens=2048"]) == 0
    first = fileio.read_json(written)
    assert first["data"]["dataset"] == "stdlib_text" and first["max_tokens"] == 2048
    capsys.readouterr()
    assert cli.main([*base, "--lengths=32,128", f"--text_glob={corpus}/doc[01].txt",
                     "--max_tokens=1024"]) == 0
    out = capsys.readouterr().out
    # the snapshot's config holds the text it is scored on: another text is another data,
    # not "another data, run config"
    assert (f"Replaced {written} whole: its rows of 64 were scored with another data, "
            "max_tokens\n") in out, out
    second = fileio.read_json(written)
    assert [row["length"] for row in second["lengths"]] == [32, 128]
    assert second["data"]["text_glob"] == f"{corpus}/doc[01].txt"
    assert second["data"]["dataset"] == "local_text" and second["max_tokens"] == 1024
    table = out[out.index("llama (trained at 32"):]
    assert "| 64 |" not in table
    assert f"scored on local_text, the files matching {corpus}/doc[01].txt" in table
    assert "first 1024 tokens" in table
    board = written.parent / "tensorboard"
    ppl = {row["length"]: row["ppl"] for row in second["lengths"]}
    assert _scalars(tensorboard_events(board), "extrapolation_yarn-4/ppl") == pytest.approx(ppl)
    # the same text and budget, a new length and one again: added to the file, and
    # TensorBoard shows each length once
    assert cli.main([*base, "--lengths=64,128", f"--text_glob={corpus}/doc[01].txt",
                     "--max_tokens=1024"]) == 0
    third = fileio.read_json(written)
    assert [row["length"] for row in third["lengths"]] == [32, 64, 128]
    assert third["earlier_lengths"] == [32]  # and the table says which row it did not score
    assert capsys.readouterr().out.count("Kept in the file from an earlier command on the same "
                                         "checkpoint, data and settings: 32.") == 1
    assert _scalars(tensorboard_events(board), "extrapolation_yarn-4/ppl") == pytest.approx(
        {row["length"]: row["ppl"] for row in third["lengths"]})
    assert third["tensorboard_events"] == [p.name for p in board.iterdir()]
    # the same glob over edited files is other text: the file is replaced whole
    (corpus / "doc1.txt").write_text(_text(7, 400))
    capsys.readouterr()
    assert cli.main([*base, "--lengths=64", f"--text_glob={corpus}/doc[01].txt",
                     "--max_tokens=1024"]) == 0
    fourth = fileio.read_json(written)
    assert [row["length"] for row in fourth["lengths"]] == [64]
    assert "earlier_lengths" not in fourth
    assert fourth["data"]["fingerprint"] != third["data"]["fingerprint"]
    assert f"(fingerprint {fourth['data']['fingerprint']})" in capsys.readouterr().out


def test_a_budget_past_the_text_records_and_captions_the_tokens_the_text_holds(
        corpus, tmp_path, monkeypatch, capsys, results_root):
    """--max_tokens=100000000 on a small text captioned "first 100000000 tokens"."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["extrapolate", f"--pretrained={LLAMA}", "--lengths=32",
                     f"--text_glob={corpus}/*.txt", "--max_tokens=100000000"]) == 0
    result = fileio.read_json(results_root / "pretrained" / "llama" / "extrapolation.json")
    assert result["lengths"][0]["tokens"] <= result["max_tokens"] < 100_000_000
    out = capsys.readouterr().out
    assert f"first {result['max_tokens']} tokens" in out and "100000000" not in out


def test_results_written_to_two_files_keep_two_tensorboard_tags(corpus, tmp_path, monkeypatch,
                                                                tensorboard_events):
    """--output names the file, and TensorBoard's tag follows it: two texts scored into a.json
    and b.json in one folder are two charts, not one mixing both."""
    monkeypatch.chdir(tmp_path)
    base = ["extrapolate", f"--pretrained={LLAMA}", "--lengths=32", "--max_tokens=256"]
    assert cli.main([*base, "--output=out/a.json"]) == 0
    assert cli.main([*base, f"--text_glob={corpus}/*.txt", "--output=out/b.json"]) == 0
    events = tensorboard_events(tmp_path / "out" / "tensorboard")
    for name in ("a", "b"):
        ppl = fileio.read_json(tmp_path / "out" / f"{name}.json")["lengths"][0]["ppl"]
        assert _scalars(events, f"{name}/ppl") == pytest.approx({32: ppl})


def test_a_result_written_before_the_text_was_recorded_is_read_and_replaced(
        corpus, tmp_path, results_root):
    from posjax.eval import evaluation, format_table

    out = tmp_path / "old.json"
    result = extrapolate.evaluate_pretrained(LLAMA, lengths=[32], max_tokens=256,
                                             text_glob=f"{corpus}/*.txt", output=str(out))
    old = {k: v for k, v in result.items() if k not in ("data", "max_tokens")}
    old["lengths"] = [{**result["lengths"][0], "length": 64}]
    assert "| 64 |" in format_table(old) and "scored on" not in format_table(old)
    fileio.write_json(out, old)
    new = extrapolate.evaluate_pretrained(LLAMA, lengths=[32], max_tokens=256,
                                          text_glob=f"{corpus}/*.txt", output=str(out))
    assert [row["length"] for row in new["lengths"]] == [32]  # what it measured on is unknown
    assert evaluation.result_name(old) == evaluation.result_name(new)


def test_plot_draws_a_snapshots_methods_as_one_line_each(corpus, results_root, monkeypatch,
                                                        capsys):
    """A pretrained snapshot's result folder (no config.json) is a run to `posjax plot`,
    given itself or the folder of snapshots: PI against YaRN in one picture."""
    for method in ("yarn:4", "linear:4"):
        assert cli.main(["extrapolate", f"--pretrained={LLAMA}", f"--rope_scaling={method}",
                         "--lengths=32,64", f"--text_glob={corpus}/*.txt"]) == 0
    figures = {}
    monkeypatch.setattr(fileio, "save_figure",
                        lambda fig, path, **kw: figures.update({Path(path).name: fig}) or path)
    for given in (results_root / "pretrained" / "llama", results_root / "pretrained"):
        capsys.readouterr()
        assert cli.main(["plot", str(given)]) == 0
        assert capsys.readouterr().out.split()[0] == str(given / "extrapolation.png")
        lines = figures["extrapolation.png"].axes[0].get_lines()
        assert sorted(line.get_label() for line in lines if not line.get_label().startswith(
            "_")) == ["llama +linear:4", "llama +yarn:4"]
        table = (given / "extrapolation.md").read_text()
        assert "| llama +yarn:4 |" in table and "| llama +linear:4 |" in table


def test_an_output_inside_the_snapshot_is_refused(tmp_path, monkeypatch, capsys):
    """--output=SNAPSHOT/config.json wrote a result over the model's config, rc 0."""
    snapshot = tmp_path / "llama"
    shutil.copytree(LLAMA, snapshot)
    before = {p.name: p.read_bytes() for p in snapshot.iterdir()}
    for name in ("config.json", "res.json"):
        assert _only_line(capsys, ["extrapolate", f"--pretrained={snapshot}", "--lengths=32",
                                   f"--output={snapshot / name}"]) == (
            f"posjax extrapolate: error: --output={snapshot / name} lies inside the snapshot "
            f"{snapshot}, whose files are the model's and which posjax never writes into: give "
            "a file outside it")
    assert {p.name: p.read_bytes() for p in snapshot.iterdir()} == before


def test_rows_of_other_weights_saved_into_the_snapshot_are_not_merged(tmp_path, results_root,
                                                                      capsys):
    """New weights saved over a snapshot's: the second command kept the first's rows "of the
    same checkpoint" beside its own."""
    snapshot = tmp_path / "llama"
    shutil.copytree(LLAMA, snapshot)
    written = results_root / "pretrained" / "llama" / "extrapolation.json"
    assert cli.main(["extrapolate", f"--pretrained={snapshot}", "--lengths=32"]) == 0
    shard = next(snapshot.glob("*.safetensors"))
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    capsys.readouterr()
    assert cli.main(["extrapolate", f"--pretrained={snapshot}", "--lengths=64"]) == 0
    assert "Kept in the file" not in capsys.readouterr().out
    assert [row["length"] for row in fileio.read_json(written)["lengths"]] == [64]


def test_one_snapshot_by_a_relative_then_an_absolute_path_adds_to_its_file(
        monkeypatch, results_root):
    """The path as typed was part of what made rows mergeable: the second command's file
    held its own length alone, the first's rows dropped with no word."""
    monkeypatch.chdir(FIXTURES)
    written = results_root / "pretrained" / "llama" / "extrapolation.json"
    assert cli.main(["extrapolate", "--pretrained=llama", "--lengths=32"]) == 0
    assert cli.main(["extrapolate", f"--pretrained={LLAMA}", "--lengths=64"]) == 0
    result = fileio.read_json(written)
    assert [row["length"] for row in result["lengths"]] == [32, 64]
    assert result["earlier_lengths"] == [32]


def test_a_snapshots_own_rope_scaling_is_named_where_the_method_is_none(corpus, tmp_path,
                                                                       capsys):
    """A snapshot with a linear 2 block scored with --rope_scaling=none said "method none"
    beside the linear 2 numbers: its own block applies (linear:1 scores it without)."""
    snap = tmp_path / "snap" / "llama"
    shutil.copytree(LLAMA, snap)
    config = fileio.read_json(snap / "config.json")
    fileio.write_json(snap / "config.json",
                      {**config, "rope_scaling": {"rope_type": "linear", "factor": 2.0}})
    text = [f"--text_glob={corpus}/*.txt", "--lengths=32"]
    assert cli.main(["extrapolate", f"--pretrained={snap}", "--rope_scaling=none", *text]) == 0
    assert ("llama (trained at 32, nonoverlapping, method none: the snapshot's own rope_scaling "
            "applies (linear 2.0; --rope_scaling=linear:1 scores without it))"
            in capsys.readouterr().out)
    assert cli.main(["extrapolate", f"--pretrained={LLAMA}", *text]) == 0
    assert "method none)" in capsys.readouterr().out  # no block: nothing more to say


@pytest.mark.parametrize("spec", ['{"rope_type": "yarn", "factor": 4}+logn',
                                  'logn+{"rope_type": "linear", "factor": 2}'])
def test_a_json_block_joined_with_plus_is_one_line(spec, capsys):
    """It said "not valid JSON ... write it as '{...}'", a fix that dropped +logn, or
    "unknown length-extension method '{\"rope_type\"'"."""
    assert _only_line(capsys, ["extrapolate", f"--pretrained={LLAMA}", "--lengths=32",
                               f"--rope_scaling={spec}"]) == (
        f"posjax extrapolate: error: --rope_scaling={spec}: a JSON block takes no other "
        "method joined with + (global_only aside): give its map in short form joined with "
        "them (yarn:4+logn), or the block alone")


def test_an_output_named_as_a_snapshots_result_in_its_results_folder_is_refused(
        capsys, results_root):
    """A method-none result written as extrapolation_ntk.json into the folder posjax plot
    reads, where a run's folder refuses that name."""
    output = results_root / "pretrained" / "llama" / "extrapolation_ntk.json"
    assert _only_line(capsys, ["extrapolate", f"--pretrained={LLAMA}", "--lengths=32",
                               f"--output={output}"]) == (
        f"posjax extrapolate: error: --output={output} takes the name of one of the result "
        f"files of a snapshot in {output.parent} (posjax plot reads them): drop --output to "
        "write the snapshot's own result, or give a file of another name or folder")



def test_a_scoring_stopped_or_failed_leaves_no_results_folder_of_its_own(
        corpus, results_root, monkeypatch, capsys):
    """An evaluation stopped while it scored left ~/posjax_results/pretrained/NAME holding
    only snapshot.json (and its lock), a folder of no result."""
    from posjax import runlock

    folder = results_root / "pretrained" / "llama"

    def stopped(*args, **kwargs):  # as a stop that ends the process at once does
        assert (folder / extrapolate.SOURCE_FILE).is_file()
        runlock._exit_at_once()

    def ended(code):
        raise SystemExit(code)

    monkeypatch.setattr(runlock.os, "_exit", ended)
    monkeypatch.setattr(runlock, "_EXITING", threading.Lock())
    monkeypatch.setattr(extrapolate, "run_and_write", stopped)
    with runlock.interruptible("posjax extrapolate: interrupted"), pytest.raises(SystemExit):
        extrapolate.evaluate_pretrained(LLAMA, lengths=[32], text_glob=f"{corpus}/*.txt")
    assert capsys.readouterr().err == "posjax extrapolate: interrupted\n"
    assert not folder.exists()

    def failed(*args, **kwargs):
        raise ConfigError("the evaluation's own refusal")

    monkeypatch.setattr(extrapolate, "run_and_write", failed)
    with pytest.raises(ConfigError):
        extrapolate.evaluate_pretrained(LLAMA, lengths=[32], text_glob=f"{corpus}/*.txt")
    assert not folder.exists()
    # a folder that held a result before keeps it and its claim
    folder.mkdir(parents=True)
    fileio.write_json(folder / "extrapolation.json", {"lengths": []})
    with pytest.raises(ConfigError):
        extrapolate.evaluate_pretrained(LLAMA, lengths=[32], text_glob=f"{corpus}/*.txt")
    assert {p.name for p in folder.iterdir()} >= {"extrapolation.json",
                                                   extrapolate.SOURCE_FILE}


@pytest.mark.parametrize(("method", "replaced", "said"), [
    ("none", None, "method none: the snapshot's own rope_scaling applies (longrope; "
                   "--rope_scaling=linear:1 scores without it)"),
    # a method that keeps the block said nothing of it, and Phi-3's block "longrope None"
    ("logn", None, "method logn, on top of the snapshot's own rope_scaling (longrope)"),
    ("linear:2", "longrope", "method linear:2, in place of the trained scaling longrope"),
])
def test_the_title_says_where_a_snapshots_own_rope_scaling_applies(method, replaced, said):
    from posjax.eval.extrapolate import TextExtrapolation

    block = {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [2.0]}
    result = {"run": "phi", "pretrained": "snap/phi", "method": method, "train_len": 32,
              "protocol": "nonoverlapping", "encoding": {"scaling": json.dumps(block)},
              **({"replaced_scaling": replaced} if replaced else {})}
    assert TextExtrapolation.title(result) == (
        f"phi (trained at 32, nonoverlapping, {said})")


@pytest.mark.parametrize("method, turned", [("yarn:4", 0), ("logn", 1)])
def test_a_loaded_gemma3_scales_its_global_layers_and_says_where_a_method_turns_local_ones(
        corpus, capsys, method, turned):
    """A Gemma 3 snapshot's local layers rotate at their own base, unscaled, whatever map
    --rope_scaling gives (as Gemma 3's code scales its global layers alone): the note that a
    method turns windowed layers too is printed only for the methods that do (logn)."""
    assert cli.main(["extrapolate", f"--pretrained={FIXTURES / 'gemma3_text'}", "--lengths=16",
                     f"--rope_scaling={method}", f"--text_glob={corpus}/*.txt"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "sliding" in line]
    assert notes == ([f"posjax: --rope_scaling={method} applies to every RoPE layer, the 1 "
                      "with a sliding window too (Gemma 3's and Gemma 4's own code leave their "
                      f"local layers' RoPE unscaled: --rope_scaling={method}+global_only)"]
                     if turned else [])
