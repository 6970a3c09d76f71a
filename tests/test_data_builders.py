"""TFDS builders: stdlib corpus offline, algorithmic and grid2d tasks, named datasets."""

from __future__ import annotations

import subprocess
import sys
import tempfile

import numpy as np
import pytest
import tensorflow_datasets as tfds

from posjax import data
from posjax.data import algorithmic, builders, grid2d
from posjax.errors import ConfigError

# The data code works offline: any connection it opens fails the test.
pytestmark = pytest.mark.usefixtures("no_network")


# --- stdlib and local text --------------------------------------------------------------


def test_stdlib_corpus_builds_offline_and_names_the_python_version(tmp_path):
    cfg = data.default_data_config("stdlib_text")
    cfg.data_dir = str(tmp_path)
    cfg.max_text_bytes = 300_000
    cfg.validation_fraction = 0.2
    builder = data.sources.prepare(data.kind_of(cfg))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"python{version}" in builder.info.full_name
    assert builder.info.full_name.startswith("stdlib_text/")
    assert (tmp_path / "stdlib_text").is_dir()
    train = data.kind_of(cfg).source("train")
    validation = data.kind_of(cfg).source("validation")
    assert len(train) > 0 and len(validation) > 0
    paths = [train[i]["path"].decode() for i in range(len(train))]
    assert paths == sorted(paths)
    assert not any(part in builders.STDLIB_EXCLUDED_PARTS for p in paths for part in p.split("/"))
    total = sum(len(train[i]["text"]) for i in range(len(train)))
    total += sum(len(validation[i]["text"]) for i in range(len(validation)))
    assert total <= 300_000
    batch = next(iter(data.kind_of(cfg).train_dataset(64, 2, 0)))
    assert batch["inputs"].shape == (2, 64)
    again = data.sources.prepare(data.kind_of(cfg))  # idempotent
    assert again.info.full_name == builder.info.full_name


_BUILD = """
import sys
from posjax import data
cfg = data.default_data_config("stdlib_text")
cfg.data_dir, cfg.max_text_bytes = sys.argv[1], 50_000
print(data.sources.prepare(data.kind_of(cfg)).info.full_name)
"""


def test_building_the_corpus_the_first_time_says_so_in_one_line(tmp_path):
    """tfds's own lines on a first build (its 'Variant folder ... has no dataset_info.json'
    warnings and 'Downloading and preparing dataset Unknown size') speak of a download that
    never happens; posjax says instead what it builds, from what and where, once."""
    first = subprocess.run([sys.executable, "-c", _BUILD, str(tmp_path)], text=True,
                           capture_output=True, timeout=300)
    assert first.returncode == 0, first.stderr[-300:]
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    line, full_name = first.stdout.splitlines()
    assert full_name == f"stdlib_text/python{python}-max50000/1.1.0" and first.stderr == ""
    assert line.startswith("posjax: building dataset stdlib_text once, from the running "
                           f"Python's standard library ({sys.version.split()[0]}, ")
    assert line.endswith(f"into {tmp_path}/stdlib_text/python{python}-max50000/1.1.0 "
                         "(nothing is downloaded)")
    again = subprocess.run([sys.executable, "-c", _BUILD, str(tmp_path)], text=True,
                           capture_output=True, timeout=300)
    assert (again.returncode, again.stdout, again.stderr) == (0, full_name + "\n", "")


def test_processes_preparing_one_dataset_at_once_all_get_it(tmp_path):
    # A sweep's parallel runs all start by preparing the same dataset: tfds's rename of its
    # `incomplete.*` folder failed for every process but the first.
    procs = [subprocess.Popen([sys.executable, "-c", _BUILD, str(tmp_path)], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-300:] for _, err in outs]
    assert len({out.splitlines()[-1] for out, _ in outs}) == 1
    assert not list((tmp_path / "stdlib_text").glob("*/incomplete.*"))


def test_split_rule_is_deterministic_and_by_path():
    files = {f"pkg/mod{i}.py": 100 + i for i in range(200)}
    splits = builders.assign_splits(files, 0.05)
    assert splits == builders.assign_splits(dict(reversed(files.items())), 0.05)
    assert set(splits["train"]).isdisjoint(splits["validation"])
    assert len(splits["train"]) + len(splits["validation"]) == 200
    assert 2 <= len(splits["validation"]) <= 25
    # adding files never moves an existing file to the other split
    more = builders.assign_splits({**files, "new.py": 5}, 0.05)
    assert set(splits["validation"]) <= set(more["validation"])
    assert builders.assign_splits({"a.py": 1, "b.py": 1}, 0.01)["validation"]


def test_a_capped_corpus_keeps_its_validation_share_of_the_bytes():
    """The hash picks validation files by count; under a cap the few it picks can be tiny
    (empty __init__.py files), so validation is filled to its share of the kept bytes."""
    files = {f"pkg/mod{i}.py": 5000 for i in range(60)}
    tiny = sorted(files, key=builders.hash_fraction)[:3]
    files.update({path: 10 for path in tiny})  # the hash's own picks: 30 bytes
    splits = builders.assign_splits(files, 0.05, max_text_bytes=100_000)
    kept = splits["train"] + splits["validation"]
    assert sum(files[p] for p in kept) <= 100_000 and len(splits["train"]) >= 1
    assert sum(files[p] for p in splits["validation"]) >= 0.05 * sum(files[p] for p in kept)
    assert splits == builders.assign_splits(dict(reversed(files.items())), 0.05, 100_000)
    # no cap: the hash's rule alone, as every study's corpus was split
    assert builders.assign_splits(files, 0.05)["validation"] == sorted(
        p for p in files if builders.hash_fraction(p) < 0.05)


def test_local_text_needs_files(tmp_path):
    cfg = data.default_data_config("local_text")
    cfg.data_dir = str(tmp_path)
    with pytest.raises(ConfigError, match="text_glob"):
        data.sources.prepare(data.kind_of(cfg))
    cfg.text_glob = str(tmp_path / "nothing" / "*.txt")
    with pytest.raises(ConfigError, match="matches no files"):
        data.sources.prepare(data.kind_of(cfg))



def test_building_data_leaves_nothing_in_the_temp_folder(tmp_path, monkeypatch):
    """tfds looks a new builder's info up in its GCS bucket through an empty temp folder it
    never removes; posjax's builders skip the lookup (their data is made here)."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    (tmp_path / "a.txt").write_text("plain text\n" * 50)
    (tmp_path / "b.txt").write_text("more text\n" * 50)
    cfg = data.default_data_config("local_text")
    cfg.update(data_dir=str(tmp_path / "data"), text_glob=str(tmp_path / "*.txt"))
    grid = data.default_data_config("grid2d")
    grid.update(data_dir=str(tmp_path / "data"), grid_size=4, test_grid_sizes=(6,),
                num_train_examples=8, num_eval_examples=4)
    for config in (cfg, grid):
        assert isinstance(data.sources.prepare(data.kind_of(config)).info,
                          builders.LocalDatasetInfo)
    assert not list(temp.iterdir())


ELF_HEAD = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4


def test_local_text_skips_binary_files_in_one_line_naming_them(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("plain text\n" * 50)
    (tmp_path / "ls").write_bytes(ELF_HEAD)
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    root, files = builders.local_files(str(tmp_path / "*"))
    assert root == tmp_path and set(files) == {"a.txt"}
    err = capsys.readouterr().err
    assert err == (f"posjax: data.text_glob={str(tmp_path / '*')!r}: skipping 2 binary "
                   "(not UTF-8) files: latin1.txt, ls\n")
    builders.local_files(str(tmp_path / "*"))  # the same warning is not repeated
    assert capsys.readouterr().err == ""


def test_a_utf8_character_cut_by_the_sniffed_head_is_still_text(tmp_path):
    path = tmp_path / "cut.txt"
    path.write_text("a" * (builders.SNIFF_BYTES - 1) + "\u00e9" * 10)
    assert not builders.is_binary(path)


@pytest.mark.parametrize("contents, counts", [
    ((b"", b""), "0 binary (not UTF-8) and 2 empty"),
    ((ELF_HEAD, b""), "1 binary (not UTF-8) and 1 empty"),
])
def test_a_corpus_with_no_text_is_one_error_naming_the_glob_and_its_files(tmp_path, contents,
                                                                          counts):
    for i, content in enumerate(contents):
        (tmp_path / f"f{i}").write_bytes(content)
    with pytest.raises(ConfigError) as e:
        builders.local_files(str(tmp_path / "f*"))
    assert str(e.value) == (f"data.text_glob={str(tmp_path / 'f*')!r}: the corpus is empty: its "
                            f"2 matched files are {counts}; point it at text files")


# --- named TFDS datasets ----------------------------------------------------------------


def test_unprepared_named_dataset_fails_fast_with_one_line(tmp_path):
    cfg = data.default_data_config("pg19")
    cfg.data_dir = str(tmp_path)
    assert cfg.text_key == "book_text"
    with pytest.raises(ConfigError, match="not prepared") as err:
        iter(data.kind_of(cfg).train_dataset(64, 2, 0))
    assert "\n" not in str(err.value) and "allow_download" in str(err.value)


class PosjaxTestNamedText(tfds.core.GeneratorBasedBuilder):
    """Stands in for lm1b / pg19: a TFDS dataset posjax does not build, prepared by the user."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        features = tfds.features.FeaturesDict({"body": tfds.features.Text()})
        return tfds.core.DatasetInfo(builder=self, features=features)

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(0, 30), "test": self._generate_examples(30, 40)}

    def _generate_examples(self, lo, hi):
        for i in range(lo, hi):
            yield i, {"body": f"document {i}: " + "words and more words " * (i % 7 + 1)}


def test_prepared_named_dataset_is_read_without_download(tmp_path):
    PosjaxTestNamedText(data_dir=str(tmp_path), file_format="array_record").download_and_prepare(
        download_config=tfds.download.DownloadConfig(try_download_gcs=False)
    )
    cfg = data.default_data_config("posjax_test_named_text")
    cfg.update(data_dir=str(tmp_path), eval_split="test")
    with pytest.raises(ConfigError, match="set data.text_key to one of body"):
        next(iter(data.kind_of(cfg).train_dataset(32, 2, 0)))
    cfg.text_key = "body"
    assert next(iter(data.kind_of(cfg).train_dataset(32, 2, 0)))["inputs"].shape == (2, 32)
    windows = list(data.kind_of(cfg).eval_windows(64, batch_size=2, max_tokens=256))
    assert sum(b["weights"].sum() for b in windows) > 200


def test_unknown_dataset_suggests_a_name(tmp_path):
    cfg = data.default_data_config("stdlib_txt")
    cfg.data_dir = str(tmp_path)
    with pytest.raises(ConfigError, match="did you mean 'stdlib_text'"):
        data.sources.prepare(data.kind_of(cfg))


# --- algorithmic tasks ------------------------------------------------------------------


def decode_example(example):
    """(prompt symbols, answer symbols) of an algorithmic example."""
    tokens, mask = example["tokens"], example["answer_mask"].astype(bool)
    sep = int(np.flatnonzero(tokens == algorithmic.SEP)[0])
    assert not mask[: sep + 1].any() and mask[sep + 1 :].all()
    return tokens[:sep], tokens[sep + 1 :] - algorithmic.SYMBOL_OFFSET


def small_task_config(task, **kw):
    return algorithmic.algorithmic_config(
        task, (1, 6), (7, 9), kw.get("num_symbols", 16), 60, 20, kw.get("seed", 0)
    )


def recall_answer(symbols, answer, n):
    keys, values, query = symbols[0:-1:2], symbols[1:-1:2], symbols[-1]
    return len(set(keys)) == n and answer.tolist() == [values[list(keys).index(query)]]


def addition_answer(symbols, answer, n):
    a, plus, b = symbols[:n], symbols[n], symbols[n + 1 :]
    total = algorithmic.digits_to_int(a) + algorithmic.digits_to_int(b)
    return plus == algorithmic.PLUS - algorithmic.SYMBOL_OFFSET and (
        algorithmic.digits_to_int(answer) == total
    )


def counting_answer(symbols, answer, n):
    """The counter read statement by statement: increments since the last reset (never past
    9), asked for by the final print."""
    value = 0
    for statement in symbols[:-1]:
        assert statement in (algorithmic.PASS, algorithmic.INCREMENT, algorithmic.RESET)
        value = {algorithmic.INCREMENT: value + 1, algorithmic.RESET: 0}.get(statement, value)
    return len(symbols) == n + 1 and symbols[-1] == algorithmic.PRINT and answer.tolist() == [
        value] and value <= 9


def selective_copy_answer(symbols, answer, n):
    kept = symbols[symbols != 0]
    return len(kept) == max(1, n // 4) and np.array_equal(answer, kept)


# (prompt symbols, answer symbols, n) -> is the answer right
ANSWERS = {
    "counting": counting_answer,
    "selective_copy": selective_copy_answer,
    "copy": lambda x, y, n: np.array_equal(y, x),
    "reverse": lambda x, y, n: np.array_equal(y, x[::-1]),
    "sort": lambda x, y, n: np.array_equal(y, np.sort(x)),
    "parity": lambda x, y, n: y.tolist() == [x.sum() % 2],
    "addition": addition_answer,
    "associative_recall": recall_answer,
}


def test_every_task_has_a_check():
    assert set(ANSWERS) == set(algorithmic.TASKS)


@pytest.mark.parametrize("task", sorted(algorithmic.TASKS))
def test_algorithmic_tasks_are_deterministic_and_correct(task):
    cfg = small_task_config(task)
    train = list(algorithmic.generate_split(cfg, "train"))
    again = list(algorithmic.generate_split(cfg, "train"))
    other = list(algorithmic.generate_split(small_task_config(task, seed=1), "train"))
    assert all(np.array_equal(a["tokens"], b["tokens"]) for a, b in zip(train, again, strict=True))
    assert any(
        not np.array_equal(a["tokens"], b["tokens"]) for a, b in zip(train, other, strict=True)
    )
    spec = algorithmic.get_task(task)
    for split, (lo, hi) in (("train", (1, 6)), ("test", (7, 9))):
        for ex in algorithmic.generate_split(cfg, split):
            n = int(ex["size"])
            assert lo <= n <= hi and len(ex["tokens"]) == spec.length(n)
            prompt, answer = decode_example(ex)
            symbols = prompt - algorithmic.SYMBOL_OFFSET  # PLUS becomes -2
            assert ANSWERS[task](symbols, answer, n), (task, prompt, answer)


def test_addition_golden_example():
    # 123 + 989 = 1112; digits least-significant first, 3 + 1 answer digits.
    assert algorithmic.int_to_digits(1112, 4).tolist() == [2, 1, 1, 1]
    assert algorithmic.digits_to_int([3, 2, 1]) + algorithmic.digits_to_int([9, 8, 9]) == 1112
    tok = algorithmic.SymbolTokenizer(num_symbols=10)
    ids = tok.encode("3 2 1 + 9 8 9 = 2 1 1 1")
    assert ids.tolist() == [7, 6, 5, 2, 13, 12, 13, 1, 6, 5, 5, 5]
    assert tok.decode(ids) == "3 2 1 + 9 8 9 = 2 1 1 1"


def test_algorithmic_pipeline_and_eval_batches(tmp_path):
    cfg = data.default_data_config("algorithmic")
    cfg.update(
        data_dir=str(tmp_path), task="reverse", train_lengths=(1, 5), test_lengths=(6, 8),
        num_train_examples=200, num_eval_examples=40,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="seq_len >= 11"):
        data.kind_of(cfg).batch_spec(8, 4)
    spec = data.kind_of(cfg).batch_spec(16, 4)
    assert spec.vocab_size == 4 + 64
    batch = next(iter(data.kind_of(cfg).train_dataset(16, 4, 0)))
    for k, v in batch.items():
        assert (spec.arrays[k].shape, spec.arrays[k].dtype) == (v.shape, v.dtype)
    # scored targets are answer symbols only, never SEP or padding
    assert (batch["targets"][batch["weights"] == 1] >= algorithmic.SYMBOL_OFFSET).all()
    seen = set()
    for split, size, b in data.kind_of(cfg).task_batches(8):
        seen.add((split, size))
        assert b["inputs"].shape == (8, 2 * size + 1)
        real = b["segment_ids"][:, 0] == 1
        np.testing.assert_array_equal(b["weights"][real].sum(axis=1), size)
    assert {s for s, _ in seen} == {"validation", "test"}
    assert {n for s, n in seen if s == "test"} <= {6, 7, 8}


def test_algorithmic_config_errors():
    with pytest.raises(ConfigError, match="unknown algorithmic task 'revers'"):
        small_task_config("revers")
    with pytest.raises(ConfigError, match="num_symbols >= 9"):
        small_task_config("associative_recall", num_symbols=8)


# --- grid2d -----------------------------------------------------------------------------


def test_grid_targets_hand_checked():
    # 3x3 grid, mark at (row 1, col 2)
    np.testing.assert_array_equal(
        grid2d.row_col_targets(3, 1, 2, 4).reshape(3, 3),
        [[0, 0, 2],
         [1, 1, 3],
         [0, 0, 2]],
    )  # fmt: skip
    np.testing.assert_array_equal(
        grid2d.manhattan_targets(3, 0, 0, 2).reshape(3, 3),
        [[0, 1, 2],
         [1, 2, 2],
         [2, 2, 2]],
    )  # fmt: skip
    np.testing.assert_array_equal(grid2d.grid_positions(2), [[0, 0], [0, 1], [1, 0], [1, 1]])


def test_grid_example_patches_encode_mark_and_colour():
    ex = grid2d.make_grid_example("row_col", np.random.default_rng(0), 5, 3, 4)
    patches = ex["patches"]
    assert patches.shape == (25, 4) and patches.dtype == np.float32
    np.testing.assert_array_equal(patches[:, 1:].sum(axis=1), 1.0)
    mark = int(np.flatnonzero(patches[:, 0])[0])
    assert patches[:, 0].sum() == 1
    row, col = ex["positions"][mark]
    np.testing.assert_array_equal(ex["targets"], grid2d.row_col_targets(5, row, col, 4))


def test_grid2d_pipeline_shapes_and_test_sizes(tmp_path):
    cfg = data.default_data_config("grid2d")
    cfg.update(
        data_dir=str(tmp_path), grid_size=4, test_grid_sizes=(6,), num_train_examples=40,
        num_eval_examples=10,
    )  # fmt: skip
    spec = data.kind_of(cfg).batch_spec(0, 8)
    assert (spec.kind, spec.num_classes, spec.patch_dim) == ("patches", 4, 5)
    it = iter(data.kind_of(cfg).train_dataset(0, 8, 0))
    batch = next(it)
    for k, v in batch.items():
        assert (spec.arrays[k].shape, spec.arrays[k].dtype) == (v.shape, v.dtype)
    state = it.get_state()
    expected = next(it)
    fresh = iter(data.kind_of(cfg).train_dataset(0, 8, 0))
    fresh.set_state(state)
    np.testing.assert_array_equal(next(fresh)["patches"], expected["patches"])
    sizes = {
        (split, size): b["patches"].shape for split, size, b in data.kind_of(cfg).task_batches(16)
    }
    assert sizes == {("validation", 4): (16, 16, 5), ("test_6", 6): (16, 36, 5)}


def test_a_glob_that_cannot_fill_both_splits_is_refused_before_building(tmp_path):
    """One file cannot be both a train and a validation split: refused as the config is made
    (so a sweep refuses it as it plans), naming the size cap only where one is set."""
    (tmp_path / "one.txt").write_text("a single book\n" * 50)
    with pytest.raises(ConfigError) as refused:
        builders.local_text_config(str(tmp_path / "*.txt"))
    line = str(refused.value)
    assert line.endswith("cannot fill both a train and a validation split; point it at 2 or "
                         "more files") and "\n" not in line
    (tmp_path / "two.txt").write_text("another book\n" * 50)
    builders.local_text_config(str(tmp_path / "*.txt"))
    with pytest.raises(ConfigError, match="or raise max_text_bytes: its cap kept too few"):
        builders.local_text_config(str(tmp_path / "*.txt"), max_text_bytes=800)
