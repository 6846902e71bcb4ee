"""A tiny 4-bit Llama .pte on wgpu-native: prefill + 10 decode steps match eager PyTorch."""

import asyncio

import pytest

import graph_programs
from llama_fixtures import check_trace, tiny_llama_trace

pytestmark = pytest.mark.native


def test_tiny_llama_prefill_and_decode(tmp_path_factory):
    trace = tiny_llama_trace(str(tmp_path_factory.getbasetemp()))
    answer = asyncio.run(graph_programs.run_graph(trace.pte, trace.runs))
    assert "silu_mul (fused)" in answer["ops"], answer["ops"]  # the MLP gate runs fused
    assert "linear_q4gsw + add (fused)" in answer["ops"], answer["ops"]  # and the residual adds
    check_trace(trace, answer["results"])
