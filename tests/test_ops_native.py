"""Every op case (tests/op_cases/) on wgpu-native against PyTorch, on a device with
WebGPU's default limits only: the cases' kernels and buffers do not depend on the limits,
so this is also their run on the adapter's own."""

import asyncio

import pytest

import graph_programs
from op_harness import all_cases, check_case, encode_inputs, export_case

pytestmark = [pytest.mark.native, pytest.mark.usefixtures("default_limits_device")]


@pytest.mark.parametrize("case", all_cases(), ids=lambda c: c.id)
def test_op(case):
    data = export_case(case)
    runs = [encode_inputs(inputs) for inputs in case.runs]
    answer = asyncio.run(graph_programs.run_graph(data, runs, case.kernel_set, case.hidden_features, case.batched, case.upgrade_before_run))
    check_case(case, answer)
