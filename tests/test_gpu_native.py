"""The GPU layer on wgpu-native: kernels against PyTorch, big readbacks, clear errors."""

import asyncio
import hashlib

import pytest
import torch

import gpu_programs
from gpu_cases import BINARY_CASES, as_tensor, case_id, case_inputs, reference
from topk_cases import DRAW_CASES, TOP_K_CASES, case_logits, check_draws, check_top_k, draw_points, expected_top_k
from widen_cases import WIDEN_COUNTS, check_widened, widen_case

pytestmark = pytest.mark.native


# One loop of the module's own: other tests' asyncio.run() leaves no current loop behind.
_loop = asyncio.new_event_loop()


def run(coro):
    return _loop.run_until_complete(coro)


def expected_pattern_sha256(n_bytes):
    words = torch.arange(n_bytes // 4, dtype=torch.int64) * 2654435761 % (1 << 32)
    return hashlib.sha256(words.to(torch.int64).numpy().astype("<u4").tobytes()).hexdigest()


def test_adapter_has_real_limits_and_features():
    summary = run(gpu_programs.adapter_summary())
    assert summary["backend"] == "native"
    assert summary["limits"]["maxStorageBufferBindingSize"] >= 128 * 1024 * 1024
    assert set(summary["features"]) <= {"shader-f16", "subgroups", "timestamp-query"}


@pytest.mark.parametrize("case", BINARY_CASES, ids=case_id)
def test_binary_broadcast_matches_torch(case):
    a, b = case_inputs(case)
    out, shape = run(gpu_programs.binary(case[0], a.numpy().tobytes(), list(a.shape), b.numpy().tobytes(), list(b.shape)))
    want = reference(case, a, b)
    assert tuple(shape) == tuple(want.shape)
    torch.testing.assert_close(as_tensor(out, shape).double(), want, atol=1e-6, rtol=1e-6)


def test_readback_64_mib():
    n_bytes = 64 * 1024 * 1024
    result = run(gpu_programs.big_readback(n_bytes))
    assert result == {"size": n_bytes, "sha256": expected_pattern_sha256(n_bytes)}


def test_invalid_wgsl_raises_naming_the_kernel():
    result = run(gpu_programs.invalid_kernel())
    assert result["type"] == "ShaderError"
    assert "broken_kernel" in result["message"] and "undefined_thing" in result["message"]


def test_concurrent_requests_share_one_pipeline():
    # Asked for at once, one kernel with one constant is built once, another constant
    # apart; each pipeline runs with its own value.
    result = run(gpu_programs.concurrent_pipelines())
    assert result == {"same_kernel_pipelines": 1, "other_is_distinct": True, "written": [1.5, 1.5, 1.5, 2.5]}


def test_out_of_range_write_is_refused():
    message = run(gpu_programs.write_out_of_range())
    assert "overflows buffer 'small'" in message


def test_write_buffer_ranges_writes_each_range_in_order():
    written, error = run(gpu_programs.write_ranges(False))
    assert written == gpu_programs.expected_write_ranges()
    assert error == "write to buffer 'ranges': range [1020, 1028) is outside the 1024-byte source"


def check_gpu_timer(result, features):
    """Timed submits: GPU time positive, within the wall time around it, and eight fills
    (over two passes) take longer than one. Without timestamp queries: a clear error."""
    if "timestamp-query" not in features:
        assert "timestamp-query" in result["error"]
        return
    one, eight = result["runs"]
    for run_ in (one, eight):
        assert 0 < run_["gpu_s"] <= run_["wall_s"], run_
    assert eight["gpu_s"] > one["gpu_s"], result


def test_gpu_timer_times_submits():
    check_gpu_timer(run(gpu_programs.gpu_timer()), run(gpu_programs.adapter_summary())["features"])


def test_synchronize_waits_for_submitted_work():
    assert run(gpu_programs.synchronize_after_work()) == [2.0, 4.0]


def test_resubmit_replaced_commands():
    assert run(gpu_programs.resubmit_replaced()) == [0.0, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 100.0]


def check_batched_submits(result):
    """Each batched read sees the write made just before its submit, the write after the
    batch lands last, and the batch refuses what would break its order."""
    assert result["reads"] == [[10.0 * run + i for i in range(4)] for run in range(3)] + [[-1.0, -2.0, -3.0, -4.0]]
    assert result["refused"] == ["changing a submitted recorder", "reading back"]


def test_batched_submits_see_the_writes_made_before_each():
    check_batched_submits(run(gpu_programs.batched_submits()))


@pytest.mark.parametrize("kernel_set", ["gpu", "cpu"])
@pytest.mark.parametrize("case", TOP_K_CASES, ids=str)
def test_top_k_matches_torch(case, kernel_set):
    n, k, penalty, ids, layout = case
    logits = case_logits(n, layout=layout)
    got = run(gpu_programs.top_k(logits.numpy().tobytes(), k, penalty, list(ids), kernel_set))
    check_top_k(got, expected_top_k(logits, k, penalty, ids))


@pytest.mark.parametrize("kernel_set", ["gpu", "cpu"])
@pytest.mark.parametrize("case", DRAW_CASES, ids=str)
def test_top_k_draws_match_torch(case, kernel_set):
    n, k, temperature, top_p = case
    logits = case_logits(n)
    points = draw_points(logits, k, temperature, top_p)
    got = run(gpu_programs.top_k_draws(logits.numpy().tobytes(), k, temperature, top_p, points, kernel_set))
    check_draws(got, logits, k, temperature, top_p, points)


def test_top_k_draws_nothing_from_nan_logits():
    logits = torch.full((3000,), float("nan"))
    assert run(gpu_programs.top_k_draws(logits.numpy().tobytes(), 8, 1.0, 1.0, [0.5])) == [None]


@pytest.mark.parametrize("count", WIDEN_COUNTS)
def test_widen_f16_matches_torch(count):
    halves = widen_case(count)
    check_widened(run(gpu_programs.widen_f16(halves.numpy().tobytes(), count)), halves)
