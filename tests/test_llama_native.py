"""A tiny 4-bit Llama .pte on wgpu-native: prefill + 10 decode steps match eager PyTorch."""

import asyncio

import pytest

import graph_programs
from llama_fixtures import FUSED_OPS, check_decode_resizes, check_trace, tiny_llama_trace

pytestmark = pytest.mark.native


# Both kernel sets whatever the adapter: the GPU one runs decode's norm inside the GEMV.
@pytest.mark.parametrize("kernel_set", ["cpu", "gpu"])
def test_tiny_llama_prefill_and_decode(tmp_path_factory, kernel_set):
    trace = tiny_llama_trace(str(tmp_path_factory.getbasetemp()))
    answer = asyncio.run(graph_programs.run_graph(trace.pte, trace.runs, kernel_set))
    assert set(FUSED_OPS[kernel_set]) <= set(answer["ops"]), answer["ops"]
    check_trace(trace, answer["results"])
    if kernel_set == "gpu":
        check_decode_resizes(answer["resized"])
