"""The exact GGUF exports (gguf_exact_fixtures) on wgpu-native: both kernel sets' logits
within 1e-4 of the eager exact module, token for token."""

import asyncio

import pytest

import graph_programs
from gguf_exact_fixtures import MODELS
from gguf_exact_traces import check_exact_run, exact_gguf_trace

pytestmark = pytest.mark.native


@pytest.mark.parametrize("model_name", sorted(MODELS))
@pytest.mark.parametrize("kernel_set", ["cpu", "gpu"])
def test_exact_pte_on_wgpu_native(model_name, tmp_path_factory, kernel_set):
    trace = exact_gguf_trace(str(tmp_path_factory.getbasetemp()), model_name)
    answer = asyncio.run(graph_programs.run_graph(trace.pte, trace.runs, kernel_set))
    check_exact_run(trace, answer["results"])
