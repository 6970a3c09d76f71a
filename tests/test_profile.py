"""benchlib.profile: a trace's op times attributed to what each op computes and where."""

import jax
import jax.numpy as jnp
import pytest

from benchlib import profile


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


def test_a_cpu_profile_names_the_ops_that_fill_its_time_and_ranks_them(compiled):
    program, a = compiled
    result = profile.breakdown(program.as_text(), lambda: program(a, a), calls=2)
    # how much of the span the ops fill depends on the machine's load (a CI run beside other
    # work measured 0.78), so only that it is measured, inside the span
    assert 0 < result["device_busy_s"] <= result["device_span_s"] + 1e-9
    assert 0 < result["attributed_share"] <= 1
    shares = [op["share"] for op in result["top_ops"]]
    assert shares == sorted(shares, reverse=True)
    assert 0 < sum(shares) <= result["attributed_share"] + 1e-9 <= 1 + 1e-9
    assert {"matmul", "transcendental"} <= {op["category"] for op in result["top_ops"]}


def _kernel(name, start, end, module="jit_step"):
    """A GPU kernel as a CUDA graph reports it: every kernel's `hlo_op` is the graph's."""
    return _Event(name, start, end, [("hlo_op", "command_buffer_1"), ("hlo_module", module)])


def test_gpu_kernels_in_a_cuda_graph_count_for_their_fusions_and_custom_calls():
    """A fusion's kernel by its name; cuBLAS (one kernel, after its workspace memset) and
    cuDNN (a run of distinct kernels) by their custom calls in order; another program's
    kernel by its own name."""
    gemm = "__cublas$lt$matmul"
    ops = {"loop_add_fusion.2": profile.Op("elementwise", "a.py:1"),
           "custom-call.1": profile.Op("matmul", "b.py:2", gemm),
           "custom-call.7": profile.Op("matmul", "b.py:2", gemm),
           "fmha_bwd.3": profile.Op("attention", "c.py:4", "__cudnn$fmhaScaleBiasSoftmaxBackward")}
    kernels = [_kernel("loop_add_fusion_2", 0, 10),
               _kernel("Memset 0", 10, 11), _kernel("nvjet_sm90_tst_128x128_TNT", 11, 30),
               _kernel("nvjet_sm90_tst_128x128_NNT", 30, 48),
               _kernel("void cudnn::fusion::compute_dot_do_o<true, 64>", 50, 55),
               _kernel("cudnn_generated_fort_native_sdpa_sm90_flash_bprop", 55, 90),
               _kernel("void cudnn::fusion::convert_dq_to_16bits<true>", 90, 95),
               _kernel("wrapped_add", 200, 201, module="jit_add")]
    spans, extra = profile.kernel_spans(kernels, ops, "jit_step")
    owner = {start: name for start, _, name in spans}
    assert owner == {0: "loop_add_fusion.2", 10: "custom-call.1", 11: "custom-call.1",
                     30: "custom-call.7", 50: "fmha_bwd.3", 55: "fmha_bwd.3", 90: "fmha_bwd.3",
                     200: "wrapped_add"}
    assert extra == {"wrapped_add": profile.Op("kernel", "jit_add")}
    result = profile.summary(spans, ops, extra, calls=1, top=3)
    assert result["device_span_s"] == pytest.approx(95e-9)
    assert result["attributed_share"] == pytest.approx(93 / 95)
    assert [op["op"] for op in result["top_ops"]] == ["fmha_bwd", "custom-call", "loop_add_fusion"]
    assert result["top_ops"][1] == {
        "op": "custom-call", "category": "matmul", "source": "b.py:2",
        "seconds": pytest.approx(38e-9), "share": pytest.approx(38 / 95), "ops": 2,
        "largest": "custom-call.1"}


def test_calls_are_cut_at_the_widest_gaps_and_overlap_is_shared():
    spans = [(0, 10, "a"), (12, 20, "b"), (100, 110, "a"), (105, 115, "b"), (300, 301, "a")]
    assert profile.executions(spans, 3) == [(0, 20), (100, 115), (300, 301)]
    shared = profile.shared_seconds(spans[2:4])
    assert shared == {"a": pytest.approx(7.5e-9), "b": pytest.approx(7.5e-9)}


def test_a_custom_call_keeps_its_target_and_a_fused_attention_is_classed_so():
    text = "\n".join([
        "HloModule jit_step, is_scheduled=true", "",
        "ENTRY %main.9 (p: bf16[2,8]) -> bf16[2,8] {",
        '  %p = bf16[2,8]{1,0} parameter(0)',
        '  ROOT %fmha.1 = bf16[2,8]{1,0} custom-call(%p), '
        'custom_call_target="__cudnn$fmhaScaleBiasSoftmax", metadata={op_name="attn"}',
        "}"])
    assert profile.module_name(text) == "jit_step"
    assert profile.hlo_ops(text)["fmha.1"] == profile.Op("attention", "attn",
                                                         "__cudnn$fmhaScaleBiasSoftmax")
