"""posjax's conventions against the peers' own code: golden values recorded once by
scripts/golden_conventions.py (see its docstring for the sources), so no torch is needed."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from posjax import encoders
from posjax.encoders import Dims, base
from posjax.encoders.absolute import sinusoidal

GOLDEN = json.loads((Path(__file__).parent / "golden" / "conventions.json").read_text())
README = (Path(__file__).parents[1] / "README.md").read_text()
EXTENDING = (Path(__file__).parents[1] / "docs" / "extending.md").read_text()


def _encoding_table_names() -> set[str]:
    """The `name`s in the first column of README's encoding table (the rows before the blank
    line that ends it)."""
    table = README.split("| name | site |", 1)[1].split("\n\n", 1)[0]
    return {name for row in table.splitlines()[2:]
            for name in re.findall(r"`([A-Za-z0-9_-]+)`", row.split("|")[1])}


def test_readme_encoding_table_has_a_row_for_every_registered_encoding():
    # posjax's own: tests register toy encodings of their own (test_extending).
    own = {n for n in encoders.names() if type(encoders.get(n)).__module__.startswith("posjax.")}
    missing = own - _encoding_table_names()
    assert not missing, (f"{sorted(missing)}: add a row to README.md's encoding table (name, "
                         "site, formula, source), as docs/extending.md says")


def _deberta_scores(p2c_index: str) -> np.ndarray:
    g = GOLDEN["deberta"]
    enc = encoders.get("deberta", bucket_size=g["bucket_size"], max_position=g["max_position"],
                       p2c_index=p2c_index)
    enc.check(Dims(g["d_model"], g["num_heads"], g["d_model"] // g["num_heads"], 64))
    params = {name: jnp.asarray(g[name], jnp.float32) for name in ("rel_emb", "wq_r", "wk_r")}
    positions = jnp.arange(len(g["q"][0]))
    return np.stack([
        np.asarray(enc.rel_score(params, jnp.asarray(q), jnp.asarray(k), positions, positions,
                                 head))
        for head, (q, k) in enumerate(zip(g["q"], g["k"], strict=True))])


def _documented_sites() -> dict[str, list[str]]:
    """site -> its arguments, as posjax/encoders/base.py's docstring writes `site(args) ->`."""
    return {site: [arg.strip() for arg in args.split(",")]
            for site, args in re.findall(r"^\s+(\w+)\(([^)]*)\) ->", base.__doc__, re.M)}


def test_documented_site_signatures_are_the_ones_the_encodings_implement():
    """base.py's contract and docs/extending.md's "Adding an encoding" example show each site's
    arguments as every registered encoding (and ReRoPE's score site) defines them."""
    documented = _documented_sites()
    sites = {"bias", "bias_prepare", "prepared_bias", "rel_score", "content_score"}
    assert sites <= set(documented)
    variants = [encoders.get(name) for name in encoders.names()]
    variants.append(encoders.get("rope", rerope_window=8))
    for enc in variants:
        for site, args in documented.items():
            method = getattr(enc, site, None)
            if method is not None:
                assert list(inspect.signature(method).parameters) == args, (enc, site)
    example = re.search(r"def bias\(self, ([^)]*)\)", EXTENDING)
    assert example and example[1].split(", ") == documented["bias"]


def test_deberta_code_convention_matches_hugging_faces_disentangled_attention():
    np.testing.assert_allclose(_deberta_scores("code"), GOLDEN["deberta"]["score"],
                               rtol=1e-5, atol=1e-5)


def test_deberta_paper_convention_is_the_mirrored_p2c_index():
    assert not np.allclose(_deberta_scores("paper"), GOLDEN["deberta"]["score"], atol=1e-3)


def test_sinusoidal_half_layout_is_roformers_and_x_transformers_table():
    g = GOLDEN["sinusoidal"]
    half = np.asarray(sinusoidal(jnp.asarray(g["positions"]), g["dim"], layout="half"))
    # RoFormer's angles are float64 (numpy), posjax's float32 as x-transformers': at position
    # 4095 a float32 angle is off by up to half an ulp, 2.4e-4 rad.
    np.testing.assert_allclose(half, g["roformer"], atol=1e-4)
    np.testing.assert_allclose(half, g["x_transformers"], atol=1e-6)
    interleaved = np.asarray(sinusoidal(jnp.asarray(g["positions"]), g["dim"]))
    np.testing.assert_allclose(interleaved[:, 0::2], half[:, : g["dim"] // 2], atol=1e-6)


def test_sinusoidal_t2t_spacing_with_half_layout_is_tensor2tensors_timing_signal():
    g = json.loads((Path(__file__).parent / "golden" / "sinusoid_t2t.json").read_text())
    positions = jnp.asarray(g["positions"])
    for dim, table in g["tables"].items():
        got = np.asarray(sinusoidal(positions, int(dim), layout="half", spacing="t2t"))
        # float32 angles against float64: up to half an ulp of 4095 rad, 2.4e-4.
        np.testing.assert_allclose(got, table, atol=3e-4)
        assert not np.allclose(sinusoidal(positions, int(dim), layout="half"), table, atol=1e-2)


def test_sinusoidal_spacing_and_layout_combine_freely():
    """t2t spacing in the interleaved layout is the same vectors as in the half layout, up to
    the fixed permutation of dims; the encoding passes its spacing on."""
    positions = jnp.arange(0, 300, 7)
    half = np.asarray(sinusoidal(positions, 8, layout="half", spacing="t2t"))
    interleaved = np.asarray(sinusoidal(positions, 8, spacing="t2t"))
    np.testing.assert_array_equal(interleaved[:, 0::2], half[:, :4])
    np.testing.assert_array_equal(interleaved[:, 1::2], half[:, 4:])
    enc = encoders.get("sinusoidal", spacing="t2t")
    enc.check(Dims(8, 2, 4, 64))
    x = jnp.zeros((1, positions.shape[0], 8))
    np.testing.assert_array_equal(enc.embed({}, x, positions[None])[0], interleaved)
