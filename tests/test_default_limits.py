"""Under WebGPU's default limits only (`request_device(limits="default")`), on wgpu-native:
the limits are enforced, the embedding cases match PyTorch with their tables split by row
blocks and the wide linears' cases with their weights stored by blocks of outputs,
Llama-3.2-1B's embedding and a slice of its geometry fit (and run stored by blocks under
64 MiB bindings, read piece by piece), and the tiny Llama matches eager PyTorch token for token (every op case
runs under them in test_ops_native)."""

import asyncio
import os
import pickle
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

import graph_programs
from llama_fixtures import check_run, check_trace, llama_1b_slice_trace, tiny_llama_trace
import torch
from executorch.examples.models.llama.source_transformation.quantize import QuantizedGroupEmbedding
from torch.export import Dim

from op_harness import OpCase, all_cases, check_case, encode_inputs, export_case
from pywebgpu.gpu import DEFAULT_LIMITS, ShaderError
from pywebgpu.ops import embedding, row_blocks
from pywebgpu.ops.linear import q4gsw
from pywebgpu.runtime import ModelTooLargeError, load
from test_ranged_file import ranged

pytestmark = [pytest.mark.native, pytest.mark.usefixtures("default_limits_device")]


# A kernel of 512 invocations a workgroup: above the default 256. (wgpu-native does not
# check workgroup memory against its limit; Chromium does: e2e_tests/test_default_limits_browser.py.)
OVER_INVOCATIONS = """
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(512)
fn main(@builtin(local_invocation_index) i: u32) {
  out[i] = f32(i);
}
"""


def test_device_enforces_the_default_limits(default_limits_device):
    device = default_limits_device
    assert device.limits == DEFAULT_LIMITS
    raw = device.raw.limits
    assert raw["max-compute-workgroup-storage-size"] == 16 * 1024
    assert raw["max-storage-buffer-binding-size"] == 128 * 1024 * 1024
    with pytest.raises(ShaderError, match="over_invocations"):
        asyncio.run(device.compute_pipeline(OVER_INVOCATIONS, label="over_invocations"))


def run_case(case):
    runs = [encode_inputs(inputs) for inputs in case.runs]
    return asyncio.run(graph_programs.run_graph(export_case(case), runs, case.kernel_set, case.hidden_features, case.batched, case.upgrade_before_run))


def splitting_tables(monkeypatch, binding_bytes=None):
    """Make every table over `binding_bytes` split (as over a device's binding limit; None:
    the device's own limits); returns the list of the row blocks each embedding is built with."""
    if binding_bytes is not None:
        monkeypatch.setattr(row_blocks, "binding_bytes", lambda device: binding_bytes)
    made = []

    def noted(*args):
        made.append(row_blocks.row_blocks(*args))
        return made[-1]

    monkeypatch.setattr(embedding, "row_blocks", noted)
    return made


@pytest.mark.parametrize("case", [c for c in all_cases() if c.id.startswith("embedding")], ids=lambda c: c.id)
def test_embedding_split_by_row_blocks(case, monkeypatch):
    made = splitting_tables(monkeypatch, 256)
    check_case(case, run_case(case))
    assert made and all(len(blocks) > 1 for blocks in made)


class _Limits:
    """A device's stand-in for row_blocks.binding_bytes: only its limits."""

    def __init__(self, binding_bytes):
        self.limits = {"maxStorageBufferBindingSize": binding_bytes, "maxBufferSize": binding_bytes}


def splitting_linears(monkeypatch, smallest=True):
    """Note the output blocks of every 4-bit linear built (returns their list), with
    `smallest` each that can be stored by blocks in blocks of the fewest outputs allowed
    (q4gsw.BLOCK_OUTPUTS)."""
    made = []

    def noted(rows, row_bytes, device, multiple=1):
        limits = _Limits(multiple * max(row_bytes)) if smallest else device
        made.append(row_blocks.row_blocks(rows, row_bytes, limits, multiple))
        return made[-1]

    monkeypatch.setattr(q4gsw, "row_blocks", noted)
    return made


# Linears of more outputs than a block, over every kernel of both sets (GEMVs, GEMMs, split
# K, an RMSNorm folded in, bias, a residual, an exact GGUF linear's offsets and second
# plane, 8-bit activations).
SPLIT_LINEAR_CASES = (
    "linear-q4gsw-gemv-wide-n16420-cpu",
    "linear-q4gsw-gemv-wide-n16420-gpu",
    "linear-q4gsw-m67-n132-cpu",
    "linear-q4gsw-m67-n132-gpu",
    "linear-q4gsw-norm-then-wide-cpu",
    "linear-q4gsw-norm-then-wide-gpu",
    "linear-q4gsw-norm-then-wide-k2080-gpu",
    "linear-q4gsw-split-k-bias-gpu",
    "linear-q4gsw-split-k-after-norm-gpu",
    "linear-q4gsw-gemm-wide-bias-gpu",
    "linear-q4gsw-gemm-wide-split-k-bias-gpu",
    "linear-q4gsw-m131-n1100-upgraded-cpu",
    "linear-dq8ca-gs64-m67-gpu",
    "exact-wide-cpu",
    "exact-wide-gpu",
    "exact-norm-wide-2planes-cpu",
    "exact-norm-wide-2planes-gpu",
)


@pytest.mark.parametrize("case", [c for c in all_cases() if c.id in SPLIT_LINEAR_CASES], ids=lambda c: c.id)
def test_linear_split_by_output_blocks(case, monkeypatch):
    made = splitting_linears(monkeypatch)
    check_case(case, run_case(case))
    assert any(len(blocks) > 1 for blocks in made), made
    assert all(first % q4gsw.BLOCK_OUTPUTS == 0 for blocks in made for first, _ in blocks)


def test_every_split_linear_case_exists():
    assert len([c for c in all_cases() if c.id in SPLIT_LINEAR_CASES]) == len(SPLIT_LINEAR_CASES)


# Llama-3.2-1B's embedding geometry: vocabulary 128,256, dim 2048, 4-bit groups of 32.
LLAMA_1B_VOCAB, LLAMA_1B_DIM = 128256, 2048


@pytest.fixture(scope="module")
def llama_1b_embedding():
    """Its 4-bit embedding as export_llama's `-E 4,32` makes it (QuantizedGroupEmbedding),
    with random packed weights and scales (no float table made first), looking up ids at
    both ends of the table and around row 65,536 (where a 64 MiB block ends)."""
    module = QuantizedGroupEmbedding(
        "cpu", LLAMA_1B_VOCAB, LLAMA_1B_DIM, group_size=32, dtype=torch.float32, packed=True, bitwidth=4,
        scales_precision=torch.float32,
    )
    generator = torch.Generator().manual_seed(0)
    module.weight.copy_(torch.randint(0, 256, module.weight.shape, dtype=torch.uint8, generator=generator))
    module.scales.copy_(torch.rand(module.scales.shape, generator=generator) / 8 + 1 / 64)
    ids = torch.tensor([[0, LLAMA_1B_VOCAB - 1, 65535, 65536, 100000, 7, 65537]])
    more = torch.randint(0, LLAMA_1B_VOCAB, (1, 16), generator=generator)
    return OpCase(
        "llama-3.2-1b-embedding-q4gsw", module, (ids,), more_runs=[(more,), (ids[:, 3:4],)],
        dynamic_shapes=({1: Dim("seq", min=1, max=16)},), reference_dtype=torch.float32,
    )


def test_llama_1b_embedding_under_default_limits(llama_1b_embedding, monkeypatch):
    """Its packed table (131,334,144 bytes) fits one 128 MiB binding: stored whole."""
    made = splitting_tables(monkeypatch)
    check_case(llama_1b_embedding, run_case(llama_1b_embedding))
    assert made == [[(0, LLAMA_1B_VOCAB)]]


def test_llama_1b_embedding_split_by_row_blocks(llama_1b_embedding, monkeypatch):
    """Under 64 MiB bindings its table is stored as two blocks of rows."""
    made = splitting_tables(monkeypatch, 64 * 1024 * 1024)
    check_case(llama_1b_embedding, run_case(llama_1b_embedding))
    assert made == [[(0, 65536), (65536, LLAMA_1B_VOCAB - 65536)]]


def test_model_too_large_is_refused_before_any_upload(default_limits_device):
    """A linear's output (2 rows of 16,420 floats) above the binding limit, where its 4-bit
    weight (525,440 bytes) would be stored by blocks: the load is refused naming both
    numbers, and no buffer was made."""
    (case,) = [c for c in all_cases() if c.id == "linear-q4gsw-gemv-wide-n16420-gpu"]
    device = default_limits_device
    limits, allocated = device.limits, device.allocated_bytes
    device.limits = {**limits, "maxStorageBufferBindingSize": 100_000}
    try:
        with pytest.raises(ModelTooLargeError, match=f"activations0 needs {4 * 2 * 16420:,} bytes in one buffer, above the adapter's maxStorageBufferBindingSize of 100,000"):
            asyncio.run(load(device, export_case(case)))
    finally:
        device.limits = limits
    assert device.allocated_bytes == allocated


@pytest.mark.parametrize("kernel_set", ["cpu", "gpu"])
def test_tiny_llama(tmp_path_factory, kernel_set):
    trace = tiny_llama_trace(str(tmp_path_factory.getbasetemp()), False, kernel_set)
    answer = asyncio.run(graph_programs.run_graph(trace.pte, trace.runs, kernel_set))
    check_run(trace, kernel_set, answer)


def test_llama_1b_slice(tmp_path_factory):
    """Llama-3.2-1B's embedding and LM head around one of its layers, under the default
    limits: prefill and greedy decode steps against eager PyTorch."""
    trace = llama_1b_slice_trace(str(tmp_path_factory.getbasetemp()))
    answer = asyncio.run(graph_programs.run_graph(trace.pte, trace.runs, "gpu"))
    check_trace(trace, answer["results"])


def test_llama_1b_slice_stored_by_blocks_from_pieces(tmp_path_factory, monkeypatch):
    """Under 64 MiB bindings its embedding and its LM head (128,256 outputs of 1,024 bytes)
    are each stored as two blocks; its .pte (235 MB) read by 16 MiB pieces
    (test_ranged_file.ranged), the host's peak of Python allocations during the load and
    the run within four pieces."""
    tables = splitting_tables(monkeypatch, 64 * 1024 * 1024)
    linears = splitting_linears(monkeypatch, smallest=False)
    trace = llama_1b_slice_trace(str(tmp_path_factory.getbasetemp()))
    piece_bytes = 16 << 20
    tracemalloc.start()
    try:
        answer = asyncio.run(graph_programs.run_graph(ranged(trace.pte, piece_bytes), trace.runs, "gpu"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    check_trace(trace, answer["results"])
    print(f"peak of Python allocations {peak:,} bytes, file {len(trace.pte):,}")
    assert len(trace.pte) > 10 * piece_bytes and peak < 4 * piece_bytes, (peak, len(trace.pte))
    assert tables == [[(0, 65536), (65536, LLAMA_1B_VOCAB - 65536)]]
    assert [(0, 65536), (65536, LLAMA_1B_VOCAB - 65536)] in linears
    assert all(len(blocks) == 1 for blocks in linears if blocks[-1][0] + blocks[-1][1] != LLAMA_1B_VOCAB)


# The op cases whose kernels run quad operations (attention's cpu and tiled kernels,
# gemv, gemv_rows' quads), run under each subgroup size an adapter may report.
QUAD_CASES = (
    "sdpa-kv-gqa2-cpu",
    "rope-sdpa-kv-cpu-decode-split-cpu",
    "sdpa-kv-llama-heads-rows-upgraded-cpu",
    "sdpa-kv-tiled-hd128-gpu",
    "linear-q4gsw-gemv-k576-bias-gpu",
    "linear-q4gsw-m131-n1100-upgraded-cpu",
)

# Run in a process of its own, since lavapipe takes its SIMD width (the subgroup size
# times 32 bits) from LP_NATIVE_VECTOR_WIDTH when it starts: the subgroup size a kernel
# sees, then each job's run_graph answer, pickled.
SUBGROUP_RUNNER = """
import array, asyncio, pickle, sys
sys.path.insert(0, "tests")
import graph_programs
from pywebgpu.gpu import request_device

PROBE = '''
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(subgroup_size) size: u32, @builtin(local_invocation_index) i: u32) {
  if (i == 0u) { out[0] = size; }
}
'''

async def main(jobs):
    device = graph_programs._device = await request_device(limits="default")
    out = device.create_buffer(16, label="subgroup_size")
    probe = await device.compute_pipeline(PROBE, label="subgroup_size_probe")
    recorder = device.record()
    recorder.dispatch(probe, device.bind_group(probe, [out]), 1)
    device.submit(recorder)
    size = array.array("I", bytes(await device.read_buffer(out)))[0]
    return size, [await graph_programs.run_graph(*job) for job in jobs]

jobs = pickle.load(open(sys.argv[1], "rb"))
pickle.dump(asyncio.run(main(jobs)), open(sys.argv[2], "wb"))
"""


@pytest.mark.parametrize("subgroup_size", [4, 8, 16, 32, 64, 128])
def test_quad_kernels_under_every_subgroup_size(tmp_path, tmp_path_factory, subgroup_size):
    """The quad kernels and the tiny Llama (both kernel sets) on lavapipe forced to each
    subgroup size WebGPU allows, against PyTorch."""
    cases = [c for c in all_cases() if c.id in QUAD_CASES]
    assert len(cases) == len(QUAD_CASES)
    traces = {k: tiny_llama_trace(str(tmp_path_factory.getbasetemp()), False, k) for k in ("cpu", "gpu")}
    jobs = [(export_case(c), [encode_inputs(i) for i in c.runs], c.kernel_set, c.hidden_features, c.batched, c.upgrade_before_run) for c in cases]
    jobs += [(trace.pte, trace.runs, kernel_set) for kernel_set, trace in traces.items()]
    (tmp_path / "jobs.pickle").write_bytes(pickle.dumps(jobs))
    env = {**os.environ, "LP_NATIVE_VECTOR_WIDTH": str(32 * subgroup_size)}
    subprocess.run(
        [sys.executable, "-c", SUBGROUP_RUNNER, str(tmp_path / "jobs.pickle"), str(tmp_path / "answers.pickle")],
        env=env, check=True, cwd=Path(__file__).parent.parent, timeout=1200,
    )
    seen, answers = pickle.loads((tmp_path / "answers.pickle").read_bytes())
    assert seen == subgroup_size
    for case, answer in zip(cases, answers):
        check_case(case, answer)
    for (kernel_set, trace), answer in zip(traces.items(), answers[len(cases):]):
        check_run(trace, kernel_set, answer)
