"""posjax.bench.profile: a trace's op times attributed to what each op computes and where."""

import jax
import jax.numpy as jnp
import pytest

from posjax.bench import profile


def _matmul_then_sine(a, b):
    product = a @ b
    waves = jnp.sin(a)
    return product, waves


@pytest.fixture(scope="module")
def compiled():
    a = jnp.ones((256, 256))
    return jax.jit(_matmul_then_sine).lower(a, a).compile(), a


def test_ops_are_classed_by_what_they_compute_and_placed_at_their_source_line(compiled):
    program, _ = compiled
    ops = profile.hlo_ops(program.as_text(), root=str(__file__).rsplit("/", 2)[0])
    by_category = {op.category: op for op in ops.values() if op.category != "copy/layout"}
    assert by_category["matmul"].source.startswith("tests/test_profile.py:11")
    assert by_category["transcendental"].source.startswith("tests/test_profile.py:12")
    assert "(_matmul_then_sine)" in by_category["transcendental"].source


def test_breakdown_sums_the_traced_op_time_per_call(compiled):
    program, a = compiled
    result = profile.breakdown(program.as_text(), lambda: program(a, a), calls=2)
    assert result["calls"] == 2
    assert {"matmul", "transcendental"} <= set(result["by_category"])
    assert result["op_s"] == pytest.approx(sum(result["by_category"].values()))
    assert 0 < result["op_s"] < 10 * result["wall_s"]
    assert sum(s["seconds"] for s in result["by_source"]) == pytest.approx(result["op_s"])


def test_a_tuple_shape_is_skipped_to_find_the_opcode():
    assert profile._opcode("(f32[2]{0}, s32[]) tuple(%a, %b), metadata={}") == "tuple"
    assert profile._opcode("f32[4,8]{1,0} dot(%a, %b), lhs_contracting_dims={1}") == "dot"


class _Event:
    def __init__(self, name, start, end, stats=()):
        self.name, self.start_ns, self.end_ns, self.stats = name, start, end, stats


def test_a_loop_keeps_only_its_own_time_without_its_body():
    ops = {"while": None, "body_dot": None}
    events = [_Event("while", 0, 100), _Event("body_dot", 10, 40), _Event("body_dot", 50, 90),
              _Event("ThreadpoolListener::StartRegion", 0, 0)]
    pieces = profile._self_intervals(events, ops)
    assert profile._union_seconds(pieces["while"]) == pytest.approx(30e-9)
    assert profile._union_seconds(pieces["body_dot"]) == pytest.approx(70e-9)


def test_an_accelerator_kernel_counts_for_the_op_in_its_hlo_op_stat():
    """A GPU kernel is named by its library (a cuBLAS gemm), its op is in the `hlo_op` stat,
    or by its fusion with "." written "_"; an event of no op of this program is left out."""
    ops = {"dot.3": None, "fusion.1": None, "loop_add_fusion.2": None}
    events = [_Event("sm90_xmma_gemm_bf16", 0, 40, [("hlo_op", "dot.3")]),
              _Event("fusion.1", 40, 50),
              _Event("loop_add_fusion_2", 50, 55),
              _Event("memcpy", 55, 60, [("hlo_op", "another_program_op")])]
    pieces = profile._self_intervals(events, ops)
    assert set(pieces) == {"dot.3", "fusion.1", "loop_add_fusion.2"}
    assert profile._union_seconds(pieces["dot.3"]) == pytest.approx(40e-9)
    assert profile._union_seconds(pieces["loop_add_fusion.2"]) == pytest.approx(5e-9)


def test_an_op_split_over_two_threads_counts_its_time_once():
    assert profile._union_seconds([(0, 50), (10, 60), (100, 110)]) == pytest.approx(70e-9)
