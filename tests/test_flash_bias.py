"""The Pallas flash kernel with position biases (posjax.attention.flash_bias), in interpret
mode on a CPU: values and gradients against a dense float32 reference, the encodings that
declare their bias as a table over distances, a whole train step, and that no [L, L] bias
exists outside the kernel."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import encoders
from posjax.attention import auto_impl, check_compatible, multi_head_attention
from posjax.attention import flash_bias as flash_bias_module
from posjax.attention.flash_bias import flash_bias
from posjax.attention.masks import NEG
from posjax.encoders.base import Dims
from posjax.errors import ConfigError
from posjax.eval import methods
from posjax.launch import discover

TABLE_ENCODINGS = ("alibi", "t5", "kerple_log", "kerple_power")
# Tolerances by dtype: float32 at full matmul precision; bfloat16 inputs (float32 inside).
TOL = {jnp.float32: dict(rtol=2e-5, atol=2e-5), jnp.bfloat16: dict(rtol=3e-2, atol=3e-2)}


def dense_reference(q, k, v, table, u, w, q_pos, k_pos, q_seg, k_seg, *, causal, scale,
                    window=None):
    """softmax(scale q.k + T[clip(k_pos - q_pos)] + u + w) v with posjax's masks, in float32:
    [B, Lq, H, Dv]."""
    lq, lk = q.shape[1], k.shape[1]
    radius = (table.shape[-1] - 1) // 2
    f32 = jnp.float32
    s = jnp.einsum("bqhd,bkhd->bhqk", q.astype(f32), k.astype(f32)) * scale
    index = jnp.clip(k_pos[:, None, :] - q_pos[:, :, None], -radius, radius) + radius
    s = s + table[:, index].transpose(1, 0, 2, 3) + u[..., None] + w[..., None, :]
    q_idx, k_idx = jnp.arange(lq) + lk - lq, jnp.arange(lk)
    ok = (q_seg[:, :, None] == k_seg[:, None, :]) & (k_seg[:, None, :] != 0)
    if causal:
        ok &= k_idx[None, None, :] <= q_idx[None, :, None]
    if window is not None:
        ok &= q_idx[None, :, None] - k_idx[None, None, :] < window
    s = jnp.where(ok[:, None], s, NEG)
    e = jnp.where(ok[:, None], jnp.exp(s - s.max(-1, keepdims=True)), 0.0)
    total = e.sum(-1, keepdims=True)
    p = e / jnp.where(total > 0, total, 1.0)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v.astype(f32))


def _inputs(lq=40, lk=50, heads=3, dim=16, radius=9, dtype=jnp.float32):
    """Two examples: the first packs two documents (positions restart) and ends in padding,
    the second is one whole row; queries are the last lq tokens."""
    keys = jax.random.split(jax.random.key(0), 6)
    q = jax.random.normal(keys[0], (2, lq, heads, dim)).astype(dtype)
    k = jax.random.normal(keys[1], (2, lk, heads, dim)).astype(dtype)
    v = jax.random.normal(keys[2], (2, lk, heads, dim)).astype(dtype)
    table = jax.random.normal(keys[3], (heads, 2 * radius + 1))
    u = jax.random.normal(keys[4], (2, heads, lq))
    w = jax.random.normal(keys[5], (2, heads, lk))
    first_doc, pad = 20, 5
    seg = np.ones((2, lk), np.int32)
    seg[0, first_doc:] = 2
    seg[0, lk - pad:] = 0
    pos = np.tile(np.arange(lk, dtype=np.int32), (2, 1))
    pos[0, first_doc:] = np.arange(lk - first_doc)
    pos, seg = jnp.asarray(pos), jnp.asarray(seg)
    return q, k, v, table, u, w, pos[:, lk - lq:], pos, seg[:, lk - lq:], seg


@pytest.mark.parametrize("causal,window,dtype", [
    (True, None, jnp.float32), (False, None, jnp.float32), (True, 7, jnp.float32),
    (True, None, jnp.bfloat16), (False, None, jnp.bfloat16), (True, 7, jnp.bfloat16)])
def test_kernel_matches_the_dense_reference_in_values_and_gradients(causal, window, dtype):
    """Packed segments, padding, Lq != Lk, lengths off the block, a sliding window: the
    output and the gradients of q, k, v, the table, u and w."""
    q, k, v, table, u, w, qp, kp, qs, ks = _inputs(dtype=dtype)
    options = dict(causal=causal, scale=0.25, window=window)
    flash = functools.partial(flash_bias, block_q=16, block_k=16, **options)
    ref = functools.partial(dense_reference, **options)
    cotangent = jax.random.normal(jax.random.key(7), q.shape[:3] + (v.shape[-1],))

    def loss(attend, q, k, v, table, u, w):
        out = attend(q, k, v, table, u, w, qp, kp, qs, ks)
        return (out.astype(jnp.float32) * cotangent).sum()

    tol = TOL[dtype]
    np.testing.assert_allclose(flash(q, k, v, table, u, w, qp, kp, qs, ks).astype(jnp.float32),
                               ref(q, k, v, table, u, w, qp, kp, qs, ks), **tol)
    grads = jax.grad(functools.partial(loss, flash), argnums=range(6))(q, k, v, table, u, w)
    expected = jax.grad(functools.partial(loss, ref), argnums=range(6))(q, k, v, table, u, w)
    for name, got, want in zip(("q", "k", "v", "table", "u", "w"), grads, expected,
                               strict=True):
        # Relative to the largest entry, or absolute for u's: a per-query term shifts a
        # softmax row, so its gradient is zero up to rounding.
        scale = max(float(jnp.abs(want.astype(jnp.float32)).max()), 1.0)
        np.testing.assert_allclose(np.asarray(got, np.float32) / scale,
                                   np.asarray(want, np.float32) / scale, err_msg=name, **tol)


@pytest.mark.parametrize("lq,lk,dim,dv", [(40, 40, 24, 24), (33, 48, 8, 80), (1, 7, 16, 48)])
def test_lengths_and_head_dims_off_a_power_of_two_match_the_reference(lq, lk, dim, dv):
    """On a GPU a block of 48 queries (lengths 33-48) or a head of 24 dims did not lower
    (Triton's tensors are powers of two, its dots at least 16 wide): the kernel pads them."""
    q, k, v, table, u, w, qp, kp, qs, ks = _inputs(lq=lq, lk=lk, dim=dim)
    v = jax.random.normal(jax.random.key(3), (*v.shape[:3], dv))
    options = dict(causal=True, scale=0.3)
    got = flash_bias(q, k, v, table, u, w, qp, kp, qs, ks, **options)
    np.testing.assert_allclose(got, dense_reference(q, k, v, table, u, w, qp, kp, qs, ks,
                                                    **options), **TOL[jnp.float32])


def test_what_the_kernel_is_handed_has_power_of_two_blocks_and_head_dims(monkeypatch):
    """The shapes Pallas's Triton lowering accepts, for the lengths and head dims a GPU run
    meets (the GPU check runs the kernel itself)."""
    handed = []
    monkeypatch.setattr(flash_bias_module, "_flash", lambda *args: handed.append(args) or (
        jnp.zeros(args[2].shape[:3] + (args[2].shape[-1],))))
    power = lambda n: n >= 16 and n & (n - 1) == 0  # noqa: E731
    for length in (1, 17, 33, 47, 48, 65, 300):
        for dim in (8, 24, 64, 80):
            q = jnp.zeros((1, length, 2, dim))
            out = flash_bias(q, q, q, jnp.zeros((2, 3)), causal=True, scale=1.0)
            assert out.shape == q.shape
            q_, k_, v_, *_, block_q, block_k = handed[-1][:15]
            assert power(block_q) and power(block_k) and power(q_.shape[-1]), (length, dim)
            assert q_.shape[2] % block_q == 0 and k_.shape[2] % block_k == 0
            assert power(v_.shape[-1]) and q_.shape[-1] == k_.shape[-1]


@pytest.mark.parametrize("table_grad,seeds", [(True, None), (False, None), (True, 3)])
def test_the_kernel_and_its_gradient_lower_for_an_nvidia_gpu_through_triton(table_grad, seeds):
    """What a GPU run hands the library, lowered here with no GPU: the forward and both
    backward kernels (with and without dT's atomic adds, alone and under vmapped seeds, a
    fourth grid axis) as Triton calls. jax 0.10 sends a kernel that names no backend to
    Mosaic GPU, which refuses this one."""
    q, k, v, table, u, w, q_pos, k_pos, q_seg, k_seg = _inputs(lq=48, lk=64, dtype=jnp.bfloat16)

    def loss(q, k, v, table, u, w):
        return flash_bias(q, k, v, table, u, w, q_pos, k_pos, q_seg, k_seg, causal=True,
                          scale=0.25, interpret=False, table_grad=table_grad).sum()

    grad = jax.grad(loss, argnums=range(6))
    args = (q, k, v, table, u, w)
    if seeds:
        grad = jax.vmap(grad)
        args = tuple(jnp.stack([x] * seeds) for x in args)
    lowered = jax.jit(grad).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert lowered.count("__gpu$xla.gpu.triton") == 3
    assert "mosaic" not in lowered.lower()


def _attention(encoding, impl, params, q, k, v, pos, seg):
    return multi_head_attention(q, k, v, encoding=encoding, params=params, q_pos=pos,
                                k_pos=pos, q_seg=seg, k_seg=seg, causal=True, impl=impl,
                                block_size=16)


@pytest.mark.parametrize("name", TABLE_ENCODINGS)
def test_each_table_encoding_matches_dense_attention_with_parameter_gradients(name):
    q, k, v, *_ = _inputs(lq=48, lk=48, heads=4)
    _, _, _, _, _, _, _, pos, _, seg = _inputs(lq=48, lk=48, heads=4)
    encoding = encoders.get(name).for_model(True)
    params = encoding.init(jax.random.key(3), Dims(64, 4, 16, 48))

    def loss(impl, params, q):
        return (_attention(encoding, impl, params, q, k, v, pos, seg) ** 2).sum()

    np.testing.assert_allclose(_attention(encoding, "flash_bias", params, q, k, v, pos, seg),
                               _attention(encoding, "dense", params, q, k, v, pos, seg),
                               **TOL[jnp.float32])
    got = jax.grad(functools.partial(loss, "flash_bias"), argnums=(0, 1))(params, q)
    want = jax.grad(functools.partial(loss, "dense"), argnums=(0, 1))(params, q)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(jnp.abs(b).max()))


def test_fox_through_row_and_column_terms_matches_dense_attention():
    """FoX's forget-gate term c_i - c_j as the kernel's u and w: the output and the
    gradients of q, k, v, the layer's input and the gate's parameters equal dense
    attention's (packed documents with padding, float32 at full matmul precision)."""
    q, k, v, *_, pos, _, seg = _inputs(lq=48, lk=48, heads=4)
    encoding = encoders.get("fox")
    params = encoding.init(jax.random.key(3), Dims(64, 4, 16, 48))
    x = jax.random.normal(jax.random.key(4), (2, 48, 64))

    def loss(impl, params, q, k, v, x):
        out = multi_head_attention(q, k, v, encoding=encoding, params=params, q_pos=pos,
                                   k_pos=pos, q_seg=seg, k_seg=seg, causal=True, x=x,
                                   impl=impl, block_size=16)
        return jnp.sum(jnp.sin(out)), out

    with jax.default_matmul_precision("highest"):
        (_, got_out), got = jax.value_and_grad(functools.partial(loss, "flash_bias"),
                                               argnums=range(5), has_aux=True)(params, q, k, v, x)
        (_, want_out), want = jax.value_and_grad(functools.partial(loss, "dense"),
                                                 argnums=range(5), has_aux=True)(params, q, k, v, x)
    np.testing.assert_allclose(got_out, want_out, **TOL[jnp.float32])
    assert set(got[0]) == {"gate_weight", "gate_bias"}
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want),
                            strict=True):
        scale = max(float(jnp.abs(b).max()), 1.0)
        np.testing.assert_allclose(a / scale, b / scale, rtol=1e-4, atol=1e-5,
                                   err_msg=jax.tree_util.keystr(path))


def test_table_of_each_encoding_is_its_bias_at_each_distance():
    """bias_table(r) equals bias at positions whose distance is r, inside the radius."""
    positions = jnp.arange(-9, 10)
    for name in TABLE_ENCODINGS:
        encoding = encoders.get(name).for_model(False)
        params = encoding.init(jax.random.key(0), Dims(64, 4, 16, 64))
        radius = encoding.table_radius or 9
        table = encoding.bias_table(params, 4, radius)
        bias = encoding.bias(params, jnp.zeros((1,), jnp.int32), positions, 4)[:, 0]
        np.testing.assert_allclose(table[:, radius - 9: radius + 10], bias, rtol=1e-6,
                                   err_msg=name)


def test_seeds_under_vmap_match_each_seed_alone():
    q, k, v, *_ = _inputs(lq=32, lk=32, heads=2)
    _, _, _, _, _, _, _, pos, _, seg = _inputs(lq=32, lk=32, heads=2)
    encoding = encoders.get("t5").for_model(True)
    params = jax.vmap(lambda key: encoding.init(key, Dims(64, 2, 16, 32)))(
        jax.random.split(jax.random.key(1), 2))

    def one(params):
        return jax.grad(lambda p: (_attention(encoding, "flash_bias", p, q, k, v, pos, seg)
                                   ** 2).sum())(params)

    batched = jax.vmap(one)(params)
    for seed in range(2):
        alone = one(jax.tree.map(lambda x, s=seed: x[s], params))
        np.testing.assert_allclose(batched["table"][seed], alone["table"], rtol=1e-5,
                                   atol=1e-6)


def test_no_length_by_length_array_exists_outside_the_kernel():
    """The forward and backward of the attention hold no [..., L, L] array: the kernel's
    blocks are 16 x 16, so L x L appears nowhere in the jaxpr's text."""
    length = 48
    q, k, v, *_ = _inputs(lq=length, lk=length, heads=4)
    _, _, _, _, _, _, _, pos, _, seg = _inputs(lq=length, lk=length, heads=4)
    encoding = encoders.get("t5").for_model(True)
    params = encoding.init(jax.random.key(3), Dims(64, 4, 16, length))
    grad = jax.grad(lambda p, q: (_attention(encoding, "flash_bias", p, q, k, v, pos, seg)
                                  ** 2).sum(), argnums=(0, 1))
    text = str(jax.make_jaxpr(grad)(params, q))
    assert "pallas_call" in text
    assert f"{length},{length}]" not in text
    dense = str(jax.make_jaxpr(lambda p, q: _attention(encoding, "dense", p, q, k, v, pos,
                                                       seg))(params, q))
    assert f"{length},{length}]" in dense  # the check would see one


@pytest.mark.parametrize("name", ["fire", "dape", "cope", "path", "shaw"])
def test_encodings_without_a_table_are_refused_by_name(name):
    """One line: the encoding, the site not in the kernel's form, and the kernels that
    carry it."""
    with pytest.raises(ConfigError, match=f"'{name}' cannot run with attention='flash_bias' "
                       r"\(its [a-z_/]+ site[^()]*\):.* use attention=dense or "
                       rf"chunked\b.* for '{name}'$"):
        check_compatible(encoders.get(name).for_model(True), "flash_bias", True)


def _one_step(one_sgd_step, encoding: str, attention: str, **train):
    return one_sgd_step(f"encoding={encoding},size=smoke,seq_len=32,batch_size=4,"
                        f"attention={attention}", train=train)


@pytest.mark.parametrize("encoding", ["t5", "fox"])
def test_a_train_step_on_the_kernel_is_the_dense_step(one_sgd_step, encoding):
    """The jitted train step (state donated) with attention=flash_bias gives the loss and
    the new parameters of attention=dense (packed documents: segment masks and one row of
    positions for the batch)."""
    loss, params = _one_step(one_sgd_step, encoding, "flash_bias")
    want_loss, want = _one_step(one_sgd_step, encoding, "dense")
    assert loss == pytest.approx(want_loss, rel=1e-5)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_auto_chooses_the_kernel_on_a_gpu_where_the_bias_would_be_length_by_length():
    """On a GPU, above dense_max_len, an encoding that declares a table or row and column
    terms runs flash_bias where chunked ran; cuDNN keeps the lengths below, and the others
    (no form, a sink logit, a CPU) keep their kernels."""
    bf16, f32 = jnp.bfloat16, jnp.float32
    t5, fox, fire, rope = (encoders.get(n).for_model(True) for n in ("t5", "fox", "fire", "rope"))
    assert auto_impl(t5, 1024, 1024, "gpu", bf16) == "fused"
    assert auto_impl(t5, 1025, 1024, "gpu", bf16) == "flash_bias"
    assert auto_impl(t5, 1025, 1024, "gpu", f32) == "flash_bias"
    assert auto_impl(fox, 1024, 1024, "gpu", bf16) == "dense"  # cuDNN cannot carry FoX
    assert auto_impl(fox, 1025, 1024, "gpu", bf16) == "flash_bias"
    assert auto_impl(fire, 1025, 1024, "gpu", bf16) == "chunked"  # no table
    assert auto_impl(rope, 1 << 15, 1024, "gpu", bf16) == "fused"  # no bias: cuDNN throughout
    assert auto_impl(t5, 1025, 1024, "gpu", bf16, sink=True) == "chunked"
    assert auto_impl(t5, 1025, 1024, "cpu", bf16) == "chunked"


def test_list_attention_names_the_kernel_its_form_and_its_encodings():
    listing = discover.listing("attention")
    block = listing.split("flash_bias\n", 1)[1].split("\nauto\n", 1)[0]
    assert "bias: only as a table over k_pos - q_pos (Encoding.bias_table)" in block
    assert ("content_score: only as row and column terms u_i + w_j "
            "(Encoding.bias_rows_columns)") in block
    assert "Pallas" in block
    fits = block.split("encodings:", 1)[1].replace("\n", " ")
    assert {"t5", "alibi", "kerple_log", "fox"} <= {name.strip() for name in fits.split(",")}
    assert "fire" not in fits


def test_a_table_with_no_parameters_behind_it_skips_its_gradient(monkeypatch):
    """table_grad=False (ALiBi's slopes, no table at all) leaves dT out of the backward and
    every other gradient as it was; the dispatcher asks for dT exactly where the encoding has
    parameters."""
    q, k, v, table, u, w, qp, kp, qs, ks = _inputs()
    cotangent = jax.random.normal(jax.random.key(7), q.shape[:3] + (v.shape[-1],))

    def grads(table_grad):
        def loss(q, k, v, table):
            out = flash_bias(q, k, v, table, u, w, qp, kp, qs, ks, causal=True, scale=0.25,
                             block_q=16, block_k=16, table_grad=table_grad)
            return (out * cotangent).sum()
        return jax.grad(loss, argnums=range(4))(q, k, v, table)

    with_table, without = grads(True), grads(False)
    assert float(jnp.abs(with_table[3]).max()) > 0 and not jnp.any(without[3])
    for got, want in zip(without[:3], with_table[:3], strict=True):
        np.testing.assert_array_equal(got, want)

    asked = []
    real = flash_bias_module.flash_bias
    monkeypatch.setattr(flash_bias_module, "flash_bias",
                        lambda *a, **kw: asked.append(kw["table_grad"]) or real(*a, **kw))
    q, k, v, *_ = _inputs(lq=32, lk=32, heads=4)
    _, _, _, _, _, _, _, pos, _, seg = _inputs(lq=32, lk=32, heads=4)
    for name in ("alibi", "t5"):
        encoding = encoders.get(name).for_model(True)
        params = encoding.init(jax.random.key(3), Dims(64, 4, 16, 32))
        _attention(encoding, "flash_bias", params, q, k, v, pos, seg)
    assert asked == [False, True]


@pytest.mark.parametrize("encoding, drawn", [("alibi", {"randomize_positions": 256}),
                                             ("kerple_log", {"pose": 512})])
def test_positions_drawn_past_the_row_train_as_on_dense_attention(one_sgd_step, encoding,
                                                                    drawn):
    """Randomized and PoSE positions reach past the 32-token row (to 255 and 511): the
    kernel's distance table covers the model's position reach, so the step is dense's."""
    loss, params = _one_step(one_sgd_step, encoding, "flash_bias", **drawn)
    want_loss, want = _one_step(one_sgd_step, encoding, "dense", **drawn)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_a_setting_that_adds_a_per_pair_score_is_named_in_the_refusal():
    """RoPE fits the kernel at its defaults; ReRoPE's window gives it a per-pair score. The
    refusal names the setting (not 'rope', which its list of fitting encodings holds), and
    under posjax extrapolate names --rope_scaling, the flag the user gave."""
    rerope = encoders.get("rope", rerope_window=8)
    with pytest.raises(ConfigError, match=r"^encoding 'rope' with rerope_window=8 cannot run "
                       r"with attention='flash_bias' \(its rel_score site\).* fit at their "
                       r"defaults: .*rope.*, or drop rerope_window=8$"):
        check_compatible(rerope, "flash_bias", True)
    with pytest.raises(ConfigError, match=r"^encoding 'alibi' cannot run with "
                       r"attention='linear' .* for 'alibi'$"):  # no setting to blame
        check_compatible(encoders.get("alibi"), "linear", True)
    rope = encoders.get("rope")
    for spec in ("rerope", "sinks:4:8"):
        with pytest.raises(ConfigError, match=rf"^--rope_scaling={spec} gives rope a score "
                           r"attention='flash_bias' \(the run's model.attention, or "
                           r"--attention\) cannot carry \(its rel_score site\): score with "
                           r"--attention=dense\|chunked\|auto, use one of .*yarn.*, or drop "
                           r"--rope_scaling$"):
            methods.check_kernel(methods.apply_methods(rope, spec, 32, 64), spec, "flash_bias")
    methods.check_kernel(methods.apply_methods(rope, "yarn:2", 32, 64), "yarn:2", "flash_bias")
    methods.check_kernel(methods.apply_methods(rope, "rerope", 32, 64), "rerope", "auto")


def test_default_positions_put_the_queries_at_the_last_keys():
    """Without positions, query i of Lq < Lk sits at token Lk - Lq + i, where the causal
    mask puts it: the same output as those positions given."""
    q, k, v, table, *_ = _inputs(lq=16, lk=48)
    rows = lambda start, n: jnp.tile(jnp.arange(start, start + n), (2, 1))  # noqa: E731
    with jax.default_matmul_precision("highest"):
        got = flash_bias(q, k, v, table, causal=True, scale=0.25, block_q=16, block_k=16)
        want = dense_reference(q, k, v, table, jnp.zeros((2, 3, 16)), jnp.zeros((2, 3, 48)),
                               rows(32, 16), rows(0, 48), jnp.ones((2, 16), jnp.int32),
                               jnp.ones((2, 48), jnp.int32), causal=True, scale=0.25)
    np.testing.assert_allclose(got, want, **TOL[jnp.float32])


def test_positions_farther_apart_than_the_table_are_refused_and_position_reach_fits_them():
    """Positions with gaps (stride 3) spread past the sequence's length: the table, sized by
    the length, clipped them and ALiBi's output was 0.24 off, with no word."""
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 40, 2, 8)), jnp.float32) for _ in range(3))
    pos = 3 * jnp.arange(40)[None]
    kwargs = dict(encoding=encoders.get("alibi"), params={}, q_pos=pos, k_pos=pos, q_seg=None,
                  k_seg=None, causal=True, block_size=16)
    with pytest.raises(ValueError, match=r"up to distance 39 .* lie 117 apart: pass "
                                         r"position_reach=118"):
        multi_head_attention(q, k, v, impl="flash_bias", **kwargs)
    with jax.default_matmul_precision("highest"):
        out = multi_head_attention(q, k, v, impl="flash_bias", position_reach=120, **kwargs)
        dense = multi_head_attention(q, k, v, impl="dense", **kwargs)
    np.testing.assert_allclose(np.asarray(out), np.asarray(dense), rtol=1e-5, atol=1e-5)
    # concrete positions captured by a jitted function are checked too: jnp on them inside
    # the trace was a tracer, and int() of it raised TracerBoolConversionError
    jitted = jax.jit(lambda q, k, v: multi_head_attention(q, k, v, impl="flash_bias",
                                                          **kwargs))
    with pytest.raises(ValueError, match=r"lie 117 apart: pass position_reach=118"):
        jitted(q, k, v)


def test_rows_far_apart_are_checked_each_against_its_own_reach():
    """Row 0 at positions 0..8 and row 1 at 100..108 were refused as 108 apart, where each
    row's queries meet only its own keys, at most 8 away."""
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.standard_normal((2, 9, 2, 8)), jnp.float32) for _ in range(3))
    pos = jnp.stack([jnp.arange(9), 100 + jnp.arange(9)])
    kwargs = dict(encoding=encoders.get("alibi"), params={}, q_pos=pos, k_pos=pos, q_seg=None,
                  k_seg=None, causal=True, block_size=16)
    with jax.default_matmul_precision("highest"):
        out = multi_head_attention(q, k, v, impl="flash_bias", **kwargs)
        dense = multi_head_attention(q, k, v, impl="dense", **kwargs)
    np.testing.assert_allclose(np.asarray(out), np.asarray(dense), rtol=1e-5, atol=1e-5)


def test_a_window_of_zero_is_no_window_as_for_the_other_kernels():
    """window=0 masked every key: the output was all zeros."""
    q, k, v, table, *_ = _inputs(lq=20, lk=20, heads=2)
    once = functools.partial(flash_bias, q, k, v, table, causal=True, scale=0.25, block_q=16,
                             block_k=16)
    np.testing.assert_array_equal(np.asarray(once(window=0)), np.asarray(once(window=None)))


@pytest.mark.parametrize("change, message", [
    (dict(table=jnp.zeros((2, 7))), r"the table is \[H=4, W\] or \[B=2, H=4, W\]; got \(2, 7\)"),
    (dict(table=jnp.zeros((3, 4, 7))), r"the table is .*; got \(3, 4, 7\)"),
    (dict(table=jnp.zeros((4, 8))), r"the table's last axis is 2R \+ 1 entries, got 8"),
    (dict(k=jnp.zeros((2, 9, 2, 16))), r"k and v must be \[B=2, Lk, H=4, D\] .*repeat grouped"),
    (dict(v=jnp.zeros((2, 9, 4, 16), jnp.bfloat16)), r"q, k and v must share one dtype; got "
                                                      r"float32, float32, bfloat16"),
    (dict(w=jnp.ones((2, 9, 4))), r"w is \[B=2, H=4, L=9\]; got \(2, 9, 4\)"),
    (dict(u=jnp.ones((2, 4, 6))), r"u is \[B=2, H=4, L=9\]; got \(2, 4, 6\)"),
    (dict(q_pos=jnp.zeros((2, 9, 2), jnp.int32)), r"q_pos is \[B=2 or 1, L=9\] .*\(2, 9, 2\)"),
    (dict(block_q=0), r"block_q and block_k are at least 1; got 0, 64"),
])
def test_inputs_of_the_wrong_shape_are_refused_in_one_line(change, message):
    """Each ran: a table or k/v with fewer heads silently read the last one's for the rest,
    w in [B, L, H] was 2.4 off, and block_q=0 was a ZeroDivisionError."""
    q = jnp.zeros((2, 9, 4, 16))
    args = dict(q=q, k=q, v=q, table=jnp.zeros((4, 7)))
    args.update(change)
    with pytest.raises(ValueError, match=rf"^flash_bias: {message}"):
        flash_bias(**args, causal=True, scale=0.25)
