"""Data pipelines on tiny generated data: packing, MLM masking, determinism, restore, windows."""

from __future__ import annotations

import io
import json
from pathlib import Path

import grain
import numpy as np
import pytest
import sentencepiece as spm
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import data
from posjax.data import evaluation, packing, tokenizers
from posjax.errors import ConfigError

# The data code works offline: any connection it opens fails the test.
pytestmark = pytest.mark.usefixtures("no_network")


@pytest.fixture(scope="module")
def text_cfg(tmp_path_factory):
    """local_text over 16 generated files of 40 to 2,000 bytes, built into a tmp data_dir."""
    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "def", "return", "x", "=", "+", "(", ")"]
    for i in range(16):
        n_words = int(rng.integers(8, 350))
        text = " ".join(rng.choice(words, n_words)) + f"\n# file {i}\n"
        (root / f"doc{i:02d}.txt").write_text(text)
    cfg = data.default_data_config("local_text")
    cfg.text_glob = str(root / "*.txt")
    cfg.data_dir = str(tmp_path_factory.mktemp("tfds"))
    cfg.validation_fraction = 0.25
    return cfg


def take(iterator, n):
    return [next(iterator) for _ in range(n)]


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


# --- packing ----------------------------------------------------------------------------


def test_packing_matches_hand_worked_example():
    # seq_len 5, 2 rows. Pieces in order: A(3) -> row 0; B[:5] -> row 1 (row 0 has 2 free);
    # B[5:](2) -> row 0 fills it; C(2) fits nowhere -> rows 0, 1 are emitted, C starts the
    # next (last, one-row) packed batch. Every piece restarts its positions at 0.
    docs = [[5, 6, 7], [10, 11, 12, 13, 14, 15, 16], [20, 21]]
    ds = grain.MapDataset.source(
        [{"inputs": np.array(d, np.int32), "score": np.ones(len(d), np.int32)} for d in docs]
    ).to_iter_dataset()
    first, last = list(packing.pack_lm(ds, seq_len=5, batch_size=2, drop_remainder=False))
    expected_first = {
        "inputs": [[5, 6, 7, 15, 16], [10, 11, 12, 13, 14]],
        "segment_ids": [[1, 1, 1, 2, 2], [1, 1, 1, 1, 1]],
        "positions": [[0, 1, 2, 0, 1], [0, 1, 2, 3, 4]],
        "targets": [[6, 7, 0, 16, 0], [11, 12, 13, 14, 0]],
        "weights": [[1, 1, 0, 1, 0], [1, 1, 1, 1, 0]],
    }
    expected_last = {
        "inputs": [[20, 21, 0, 0, 0]],
        "segment_ids": [[1, 1, 0, 0, 0]],
        "positions": [[0, 1, 0, 0, 0]],
        "targets": [[21, 0, 0, 0, 0]],
        "weights": [[1, 0, 0, 0, 0]],
    }
    for batch, expected in ((first, expected_first), (last, expected_last)):
        assert set(batch) == set(packing.LM_KEYS)
        for k, v in expected.items():
            np.testing.assert_array_equal(batch[k], np.array(v), err_msg=k)
        assert batch["weights"].dtype == np.float32
        assert all(batch[k].dtype == np.int32 for k in packing.LM_KEYS if k != "weights")


def test_score_mask_weights_only_answer_targets():
    # prompt 7 8 SEP(1) answer 9 9: only predictions of the answer tokens are scored.
    row = packing.lm_example(
        inputs=[7, 8, 1, 9, 9, 0], segment_ids=[1, 1, 1, 1, 1, 0],
        positions=[0, 1, 2, 3, 4, 0], score=[0, 0, 0, 1, 1, 0],
    )  # fmt: skip
    np.testing.assert_array_equal(row["targets"], [8, 1, 9, 9, 0, 0])
    np.testing.assert_array_equal(row["weights"], [0, 0, 1, 1, 0, 0])


# --- MLM --------------------------------------------------------------------------------


def test_mlm_masking_rates_and_split():
    tok = tokenizers.ByteTokenizer()
    rng = np.random.default_rng(0)
    shape = (64, 512)
    inputs = rng.integers(tok.first_regular_id, tok.vocab_size, shape).astype(np.int32)
    inputs[:, 0] = tok.bos_id  # specials are never selected
    segments = np.ones(shape, np.int32)
    segments[:, -12:] = 0  # nor is padding
    batch = {"inputs": inputs, "segment_ids": segments}
    out = packing.mask_for_mlm(batch, rng, packing.MLMConfig(), tok)
    selected = out["weights"] == 1.0
    eligible = (segments > 0) & (inputs >= tok.first_regular_id)
    assert not (selected & ~eligible).any()
    assert abs(selected.sum() / eligible.sum() - 0.15) < 0.01
    np.testing.assert_array_equal(out["targets"], inputs)
    np.testing.assert_array_equal(out["inputs"][~selected], inputs[~selected])
    masked = out["inputs"][selected]
    original = inputs[selected]
    frac_mask = np.mean(masked == tok.mask_id)
    frac_keep = np.mean(masked == original)
    frac_random = 1.0 - frac_mask - frac_keep
    assert abs(frac_mask - 0.8) < 0.02
    assert abs(frac_keep - 0.1) < 0.015  # includes random draws equal to the original (1/256)
    assert abs(frac_random - 0.1) < 0.015
    assert (masked >= tok.first_regular_id).sum() + (masked == tok.mask_id).sum() == masked.size


def test_mlm_iterator_weights_exactly_masked_positions(text_cfg):
    it = iter(data.kind_of(text_cfg).train_dataset(32, 4, 1, mlm=text_cfg.mlm))
    batch = next(it)
    changed = batch["inputs"] != batch["targets"]
    assert (batch["weights"][changed] == 1.0).all()
    assert batch["weights"].sum() > 0
    assert (batch["weights"][batch["segment_ids"] == 0] == 0).all()


def test_mlm_config_rejects_bad_values():
    # named as config.data.mlm's fields are typed, not as the dataclass prints itself
    with pytest.raises(ConfigError, match=r"^config.data.mlm mask_rate=1.5, "
                       r"mask_token_fraction=0.8, random_token_fraction=0.1 is invalid"):
        packing.MLMConfig.from_config({"mask_rate": 1.5})
    with pytest.raises(ConfigError, match="unknown mlm field"):
        packing.MLMConfig.from_config({"mask_rat": 0.1})


# --- determinism and restore ------------------------------------------------------------


def test_same_seed_same_batches_different_seed_differs(text_cfg):
    a = take(iter(data.kind_of(text_cfg).train_dataset(32, 4, 3)), 4)
    b = take(iter(data.kind_of(text_cfg).train_dataset(32, 4, 3)), 4)
    c = take(iter(data.kind_of(text_cfg).train_dataset(32, 4, 4)), 4)
    assert_batches_equal(a, b)
    assert any(not np.array_equal(x["inputs"], y["inputs"]) for x, y in zip(a, c, strict=True))


def test_a_split_holding_no_document_is_one_line_naming_it(text_cfg, monkeypatch):
    """A dataset of one's own whose glob matched nothing said the evaluation text had -1
    scored tokens, fewer than the window length: lower the length."""
    kind = data.kind_of(text_cfg)
    assert len(kind.haystack_tokens(64)) == 65
    monkeypatch.setattr(kind, "source", lambda split: [])
    with pytest.raises(ConfigError, match=r"^dataset local_text's validation split holds no "
                       r"document to score: check the files its config.data fields name \(a "
                       r"glob that matches nothing\), or give it more text$"):
        kind.haystack_tokens(64)


def test_a_needles_haystack_is_the_documents_as_plain_text(text_cfg):
    """A needle's haystack carried the BOS and EOS of every document it spanned, tokens a
    trial holds nowhere else (its one BOS opens it); Kamradt's haystack is essays one after
    another as text."""
    kind = data.kind_of(text_cfg)
    tokenizer = kind.tokenizer
    stream, plain = kind.haystack_tokens(4000), kind.haystack_tokens(4000, plain=True)
    specials = {tokenizer.bos_id, tokenizer.eos_id}
    assert specials <= set(stream.tolist()) and not specials & set(plain.tolist())
    text = "".join(packing.text_of(d, text_cfg.text_key) + "\n"
                   for d in kind.source(text_cfg.eval_split))
    assert tokenizer.decode(plain) == text[:len(plain)]  # bytes: a token per character


@pytest.mark.parametrize("mlm", [False, True])
def test_restored_iterator_continues_exactly(text_cfg, mlm):
    mlm_cfg = text_cfg.mlm if mlm else None
    it = iter(data.kind_of(text_cfg).train_dataset(32, 4, 7, mlm=mlm_cfg))
    take(it, 3)
    state = it.get_state()
    expected = take(it, 2)
    restored = iter(data.kind_of(text_cfg).train_dataset(32, 4, 7, mlm=mlm_cfg))
    restored.set_state(json.loads(json.dumps(state)))  # what a checkpoint round trip does
    assert_batches_equal(take(restored, 2), expected)


def test_iterator_repeats_past_one_epoch(text_cfg):
    source = data.kind_of(text_cfg).source("train")
    tokens = sum(len(source[i]["text"]) + 2 for i in range(len(source)))
    batches = take(iter(data.kind_of(text_cfg).train_dataset(32, 4, 0)), 2 * tokens // (4 * 32) + 1)
    assert all(b["inputs"].shape == (4, 32) for b in batches)


def real_rows(batches):
    """Rows of a list of batches in window order, without the all-padding rows."""
    return [
        {k: b[k][i] for k in b}
        for b in batches
        for i in range(len(b["inputs"]))
        if b["segment_ids"][i].any()
    ]


def test_mlm_eval_windows_mask_only_scored_tokens(text_cfg):
    kwargs = dict(batch_size=2, protocol="sliding", stride=8, max_tokens=300, mlm=text_cfg.mlm)
    first = list(data.kind_of(text_cfg).eval_windows(32, seed=1, **kwargs))
    assert_batches_equal(first, list(data.kind_of(text_cfg).eval_windows(32, seed=1, **kwargs)))
    rows = real_rows(first)
    for row in rows[1:]:
        assert not row["weights"][: 32 - 8].any()  # only the new tokens can be masked
    for row in rows:
        changed = row["inputs"] != row["targets"]
        assert (row["weights"][changed] == 1).all()
    total = sum(row["weights"].sum() for row in rows)
    assert 0.05 * 300 < total < 0.3 * 300


# --- evaluation windows -----------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 300), length=st.integers(1, 64), stride_frac=st.floats(0.01, 1.0))
def test_window_plan_scores_every_target_once(n, length, stride_frac):
    stride = max(1, int(length * stride_frac))
    if n < length:
        with pytest.raises(ConfigError):
            evaluation.window_plan(n, length, stride)
        return
    counts = np.zeros(n, int)
    plan = evaluation.window_plan(n, length, stride)
    for start, score_from in plan:
        assert start >= 0 and start + length <= n
        counts[start + score_from : start + length] += 1
    np.testing.assert_array_equal(counts, 1)
    assert plan[0] == (0, 0)


@pytest.mark.parametrize("protocol", ["nonoverlapping", "sliding"])
def test_eval_windows_shape_positions_and_scoring(text_cfg, protocol):
    length, stride = 24, 8
    batches = list(
        data.kind_of(text_cfg).eval_windows(
            length, batch_size=3, protocol=protocol, stride=stride, max_tokens=500
        )
    )
    rows = real_rows(batches)
    for row in rows:
        assert row["inputs"].shape == (length,)
        np.testing.assert_array_equal(row["positions"], np.arange(length))
        np.testing.assert_array_equal(row["segment_ids"], 1)
    if protocol == "sliding":
        # every window after the first scores only its last `stride` targets (the new ones);
        # the final window may score fewer, never earlier ones
        assert rows[0]["weights"][: length - stride].any()
        for row in rows[1:]:
            assert not row["weights"][: length - stride].any()
    # padding rows score nothing
    assert all(b["weights"].shape == (3, length) for b in batches)


def test_eval_windows_score_the_same_tokens_at_every_length(text_cfg):
    def scored(length, protocol):
        out = []
        for b in data.kind_of(text_cfg).eval_windows(
            length, batch_size=4, protocol=protocol, stride=5, max_tokens=400
        ):
            out.extend(b["targets"][b["weights"] == 1.0].tolist())
        return out

    reference = scored(16, "nonoverlapping")
    assert len(reference) > 300
    for length, protocol in [(40, "nonoverlapping"), (16, "sliding"), (64, "sliding")]:
        assert scored(length, protocol) == reference


def test_eval_windows_reject_too_long_windows(text_cfg):
    with pytest.raises(ConfigError, match="fewer than the window length"):
        list(data.kind_of(text_cfg).eval_windows(10_000, batch_size=2, max_tokens=100))


def _window(start: int, length: int, score_from: int = 0) -> dict:
    """A window whose tokens are start, start + 1, ... (so each token names its window)."""
    tokens = np.arange(start, start + length + 1, dtype=np.int32)
    return {
        "inputs": tokens[:-1],
        "targets": tokens[1:],
        "positions": np.arange(length, dtype=np.int32),
        "segment_ids": np.ones(length, np.int32),
        "weights": (np.arange(length) >= score_from).astype(np.float32),
    }


def test_pack_windows_matches_hand_worked_example():
    # Four windows of 3 tokens into rows of 9: three per row, the last row one window + padding.
    windows = [_window(10 * i, 3, score_from=1 if i else 0) for i in range(4)]
    rows = list(evaluation.pack_windows(iter(windows), 3, 9))
    assert len(rows) == 2
    first, last = rows
    np.testing.assert_array_equal(first["inputs"], [0, 1, 2, 10, 11, 12, 20, 21, 22])
    np.testing.assert_array_equal(first["targets"], [1, 2, 3, 11, 12, 13, 21, 22, 23])
    np.testing.assert_array_equal(first["positions"], [0, 1, 2, 0, 1, 2, 0, 1, 2])
    np.testing.assert_array_equal(first["segment_ids"], [1, 1, 1, 2, 2, 2, 3, 3, 3])
    np.testing.assert_array_equal(first["weights"], [1, 1, 1, 0, 1, 1, 0, 1, 1])
    np.testing.assert_array_equal(last["inputs"], [30, 31, 32, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(last["positions"], [0, 1, 2, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(last["segment_ids"], [1, 1, 1, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(last["weights"], [0, 1, 1, 0, 0, 0, 0, 0, 0])
    assert all(r[k].dtype == windows[0][k].dtype for r in rows for k in r)
    # row_len = length: the windows as they are.
    assert_batches_equal(list(evaluation.pack_windows(iter(windows), 3, 3)), windows)
    with pytest.raises(ConfigError, match="multiple of the window length 3"):
        evaluation.pack_windows(iter(windows), 3, 8)


@pytest.mark.parametrize(
    ("protocol", "mlm"), [("nonoverlapping", False), ("sliding", False), ("nonoverlapping", True)]
)
def test_packed_eval_windows_hold_the_same_windows(text_cfg, protocol, mlm):
    length, row_len = 16, 64
    kwargs = dict(protocol=protocol, stride=6, max_tokens=400, seed=3,
                  mlm=text_cfg.mlm if mlm else None)
    kind = data.kind_of(text_cfg)
    alone = real_rows(list(kind.eval_windows(length, batch_size=3, **kwargs)))
    batches = list(kind.eval_windows(length, batch_size=2, row_len=row_len, **kwargs))
    assert all(b[k].shape == (2, row_len) for b in batches for k in b)
    # Unpack: every row is row_len / length slots, slot j is segment j + 1 or all padding.
    windows = []
    for b in batches:
        for row in range(2):
            for j in range(row_len // length):
                slot = {k: v[row, j * length : (j + 1) * length] for k, v in b.items()}
                if slot["segment_ids"].any():
                    np.testing.assert_array_equal(slot["segment_ids"], j + 1)
                    windows.append(dict(slot, segment_ids=np.ones(length, np.int32)))
                else:
                    assert not slot["weights"].any() and not slot["positions"].any()
    assert len(windows) == len(alone) > 4
    assert_batches_equal(windows, alone)  # same windows, order, MLM masks and scored tokens


def test_packed_eval_windows_reject_a_row_length_that_splits_windows(text_cfg):
    with pytest.raises(ConfigError, match="row_len=40 must be a multiple"):
        data.kind_of(text_cfg).eval_windows(16, batch_size=2, row_len=40, max_tokens=100)


# --- tokenizers and specs ---------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(st.text(max_size=50))
def test_byte_tokenizer_round_trips(text):
    tok = tokenizers.ByteTokenizer()
    ids = tok.encode(text)
    assert ids.dtype == np.int32
    assert ids.min(initial=tok.first_regular_id) >= tok.first_regular_id
    assert tok.decode(ids) == text
    assert tok.decode(np.concatenate([[tok.bos_id], ids, [tok.eos_id, tok.pad_id]])) == text


def test_sentencepiece_trains_once_and_round_trips(text_cfg):
    cfg = text_cfg.copy_and_resolve_references()
    cfg.tokenizer = "sentencepiece"
    cfg.sentencepiece_vocab_size = 300
    tok = data.get_tokenizer(cfg)
    assert tok.vocab_size == 300 == data.kind_of(cfg).batch_spec(16, 2).vocab_size
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.mask_id) == (0, 1, 2, 4)
    assert tok.processor.id_to_piece(tok.mask_id) == "<mask>"
    text = "def gamma(x):\n    return x + délta\n"
    assert tok.decode(tok.encode(text)) == text
    cached = list(Path(cfg.data_dir, "posjax_tokenizers").rglob("*.model"))
    assert len(cached) == 1
    assert data.get_tokenizer(cfg).model_proto == tok.model_proto
    batch = next(iter(data.kind_of(cfg).train_dataset(16, 2, 0)))
    assert batch["inputs"].max() < 300


def _foreign_model(path: Path) -> Path:
    """A SentencePiece model with another project's id layout (Llama's: UNK 0, BOS 1, EOS 2,
    no PAD, no <mask>), as a user would bring one."""
    model = io.BytesIO()
    lines = Path(json.__file__).read_text().splitlines()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model,
                                   vocab_size=400, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                   byte_fallback=True, minloglevel=2)
    path.write_bytes(model.getvalue())
    return path


def test_an_existing_sentencepiece_model_is_used_as_is(text_cfg, tmp_path):
    cfg = text_cfg.copy_and_resolve_references()
    cfg.tokenizer = "sentencepiece"
    cfg.sentencepiece_model = str(_foreign_model(tmp_path / "foreign.model"))
    cached = set(Path(cfg.data_dir).rglob("*.model"))
    tok = data.get_tokenizer(cfg)
    assert tok.vocab_size == 400 == data.kind_of(cfg).batch_spec(16, 2).vocab_size
    assert (tok.bos_id, tok.eos_id, tok.first_regular_id) == (1, 2, 3)
    assert tok.pad_id == 0 and tok.mask_id == -1  # no PAD, no <mask> in that model
    assert tok.decode(tok.encode("return x + delta")) == "return x + delta"
    assert set(Path(cfg.data_dir).rglob("*.model")) == cached  # nothing trained
    batch = next(iter(data.kind_of(cfg).train_dataset(16, 2, 0)))
    assert batch["inputs"].max() < 400


@pytest.mark.parametrize(("content", "message"), [
    (None, "No such file"), (b"not a model", "is not a SentencePiece model")])
def test_a_bad_sentencepiece_model_path_is_one_line(tmp_path, content, message):
    path = tmp_path / "x.model"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=message) as error:
        tokenizers.load_sentencepiece(path)
    assert "\n" not in str(error.value)


def test_batch_spec_matches_batches(text_cfg):
    spec = data.kind_of(text_cfg).batch_spec(32, 4)
    batch = next(iter(data.kind_of(text_cfg).train_dataset(32, 4, 0)))
    assert spec.kind == "tokens" and spec.vocab_size == 260
    assert spec.arrays.keys() == batch.keys()
    for k, v in batch.items():
        assert (spec.arrays[k].shape, spec.arrays[k].dtype) == (v.shape, v.dtype)


def test_unknown_tokenizer_is_a_config_error(text_cfg):
    cfg = text_cfg.copy_and_resolve_references()
    cfg.tokenizer = "byte"
    with pytest.raises(ConfigError, match="did you mean 'bytes'"):
        data.get_tokenizer(cfg)


@given(st.text(alphabet=st.sampled_from(["a", " ", "é", "語", "🙂"]), max_size=3000),
       st.integers(1, 4))
@settings(max_examples=60, deadline=None)
def test_long_lines_are_cut_into_sentences_that_fit_and_join_to_the_line(text, copies):
    line = text * copies
    pieces = list(tokenizers.sentences([line]))
    assert "".join(pieces) == line
    assert all(len(p.encode()) <= tokenizers.MAX_SENTENCE_BYTES for p in pieces)
    assert all(pieces[:-1])  # no empty piece but perhaps the last (an empty line stays one)


def test_sentencepiece_learns_from_text_of_long_lines():
    """Six files of one 16 kB line each: SentencePiece skipped every line over its 4192
    bytes and failed with 'lower data.sentencepiece_vocab_size', which could not help."""
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), rng.integers(2, 9)))
             for _ in range(400)]
    lines = [" ".join(rng.choice(words, 3000)) for _ in range(6)]
    tokenizer = tokenizers.train_sentencepiece(lines, vocab_size=300)
    assert tokenizer.decode(tokenizer.encode(lines[0][:500])) == lines[0][:500]
