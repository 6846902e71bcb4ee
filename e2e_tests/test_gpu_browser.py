"""The GPU layer in headless Chromium (Pyodide → navigator.gpu): the same programs as the
native tests, plus the Web Worker path and JS ArrayBuffer uploads."""

import json
from pathlib import Path

import pytest
import torch

import gpu_programs
from gpu_cases import BINARY_CASES, as_tensor, case_id, case_inputs, reference
from topk_cases import DRAW_CASES, TOP_K_CASES, case_logits, check_draws, check_top_k, draw_points, expected_top_k
from widen_cases import WIDEN_COUNTS, check_widened, widen_case
from test_gpu_native import check_batched_submits, check_gpu_timer, expected_pattern_sha256


@pytest.fixture
def programs(python_page):
    python_page.load_module("gpu_programs", Path(gpu_programs.__file__).read_text())
    return python_page


def test_adapter_is_webgpu_in_the_page(programs):
    summary = programs.call("gpu_programs", "adapter_summary")
    assert summary["backend"] == "browser"
    assert "swiftshader" in summary["description"]
    assert summary["limits"]["maxStorageBufferBindingSize"] >= 128 * 1024 * 1024


def test_binary_broadcast_matches_torch(programs):
    # One page round trip for all cases keeps the browser suite fast.
    for case in BINARY_CASES:
        a, b = case_inputs(case)
        out, shape = programs.call(
            "gpu_programs", "binary", case[0], a.numpy().tobytes(), list(a.shape), b.numpy().tobytes(), list(b.shape)
        )
        want = reference(case, a, b)
        assert tuple(shape) == tuple(want.shape), case_id(case)
        torch.testing.assert_close(as_tensor(out, shape).double(), want, atol=1e-6, rtol=1e-6, msg=case_id(case))


def test_readback_64_mib(programs):
    n_bytes = 64 * 1024 * 1024
    assert programs.call("gpu_programs", "big_readback", n_bytes) == {
        "size": n_bytes,
        "sha256": expected_pattern_sha256(n_bytes),
    }


def test_invalid_wgsl_raises_naming_the_kernel(programs):
    result = programs.call("gpu_programs", "invalid_kernel")
    assert result["type"] == "ShaderError"
    assert "broken_kernel" in result["message"] and "undefined_thing" in result["message"]
    # Dawn also reports the failed shader module on the console; that one is expected.
    programs.problems.take()


def test_concurrent_requests_share_one_pipeline(programs):
    # Asked for at once, one kernel with one constant is built once, another constant
    # apart; each pipeline runs with its own value.
    result = programs.call("gpu_programs", "concurrent_pipelines")
    assert result == {"same_kernel_pipelines": 1, "other_is_distinct": True, "written": [1.5, 1.5, 1.5, 2.5]}


def test_out_of_range_write_is_refused(programs):
    assert "overflows buffer 'small'" in programs.call("gpu_programs", "write_out_of_range")


@pytest.mark.parametrize("from_js", [False, True], ids=["python-bytes", "js-buffer"])
def test_write_buffer_ranges_writes_each_range_in_order(programs, from_js):
    written, error = programs.call("gpu_programs", "write_ranges", from_js)
    assert written == gpu_programs.expected_write_ranges()
    assert error == "write to buffer 'ranges': range [1020, 1028) is outside the 1024-byte source"


def test_fetched_array_buffer_goes_straight_to_the_gpu(python_page):
    """Weights path: fetch() → JS ArrayBuffer → writeBuffer with byte offsets, no Python copy."""
    data = torch.arange(1024, dtype=torch.float32)
    (python_page.server.files_dir / "weights.bin").write_bytes(data.numpy().tobytes())
    result = python_page.run(
        """
import js, json, hashlib
from pywebgpu.gpu import request_device
device = await request_device()
response = await js.fetch("/files/weights.bin")
array_buffer = await response.arrayBuffer()
buffer = device.create_buffer(512, label="slice")
device.write_buffer(buffer, array_buffer, data_offset=1024, size=512)
typed = js.Float32Array.new(array_buffer)
second = device.create_buffer(64, label="typed")
device.write_buffer(second, typed, data_offset=64, size=64)
json.dumps([bytes(await device.read_buffer(buffer)).hex(), bytes(await device.read_buffer(second)).hex()])
"""
    )
    sliced, typed = json.loads(result)
    raw = data.numpy().tobytes()
    assert bytes.fromhex(sliced) == raw[1024:1536]
    assert bytes.fromhex(typed) == raw[64:128]


# Adds a [2, 3] tensor and a broadcast [3] one on the GPU, inside the worker (with
# gpu_programs' run_binary, its source sent first).
HELLO_KERNEL = Path(gpu_programs.__file__).read_text() + """
import array, json
from pywebgpu.gpu import request_device

device = await request_device()
a = device.create_buffer_with_data(array.array("f", [float(i) for i in range(6)]), label="a")
b = device.create_buffer_with_data(array.array("f", [10.0, 20.0, 30.0]), label="b")
out, shape = await run_binary(device, "add", a, (2, 3), b, (3,))
json.dumps({"adapter": device.adapter.description, "shape": shape,
            "sum": array.array("f", bytes(await device.read_buffer(out))).tolist()})
"""


def test_python_in_a_module_worker(python_page):
    """web/worker.mjs boots Pyodide + pywebgpu in a module Web Worker, where navigator.gpu works."""
    report = python_page.page.evaluate(
        """(code) => new Promise((resolve, reject) => {
            const worker = new Worker("/worker.mjs", { type: "module" });
            worker.onmessage = ({ data }) => {
                if (data.type === "status") return;
                worker.terminate();
                if (data.type === "boot-error" || data.error) reject(new Error(data.error));
                else resolve(JSON.parse(data.result));
            };
            worker.postMessage({ id: 1, code });
        })""",
        HELLO_KERNEL,
    )
    assert "swiftshader" in report["adapter"]
    assert report["shape"] == [2, 3]
    assert report["sum"] == [10, 21, 32, 13, 24, 35]


def test_gpu_timer_times_submits(programs):
    features = programs.call("gpu_programs", "adapter_summary")["features"]
    check_gpu_timer(programs.call("gpu_programs", "gpu_timer"), features)


def test_synchronize_waits_for_submitted_work(programs):
    assert programs.call("gpu_programs", "synchronize_after_work") == [2.0, 4.0]


def test_resubmit_replaced_commands(programs):
    # The JS array of a resubmitted list is patched; the small write before is held and
    # handed over in the same call, which also reads the result back.
    assert programs.call("gpu_programs", "resubmit_replaced") == [0.0, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 100.0]


def test_batched_submits_see_the_writes_made_before_each(programs):
    # One JS call for the three submits: the first one's write held, the later ones'
    # uploaded and copied in-stream, the three reads in one readback.
    check_batched_submits(programs.call("gpu_programs", "batched_submits"))


@pytest.mark.parametrize("kernel_set", ["gpu", "cpu"])
def test_top_k_matches_torch(programs, kernel_set):
    for n, k, penalty, ids, layout in TOP_K_CASES:
        logits = case_logits(n, layout=layout)
        got = programs.call("gpu_programs", "top_k", logits.numpy().tobytes(), k, penalty, list(ids), kernel_set)
        check_top_k(got, expected_top_k(logits, k, penalty, ids))


@pytest.mark.parametrize("kernel_set", ["gpu", "cpu"])
def test_top_k_draws_match_torch(programs, kernel_set):
    for n, k, temperature, top_p in DRAW_CASES:
        logits = case_logits(n)
        points = draw_points(logits, k, temperature, top_p)
        got = programs.call("gpu_programs", "top_k_draws", logits.numpy().tobytes(), k, temperature, top_p, points, kernel_set)
        check_draws(got, logits, k, temperature, top_p, points)


def test_widen_f16_matches_torch(programs):
    for count in WIDEN_COUNTS:
        halves = widen_case(count)
        check_widened(programs.call("gpu_programs", "widen_f16", halves.numpy().tobytes(), count), halves)
