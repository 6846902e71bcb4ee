"""The runtime refuses what it cannot run at load time, with the op's name, and refuses
inputs that do not fit the exported bounds."""

import asyncio

import pytest
import torch

from op_harness import export_case
from op_cases.binary import CASES as BINARY_CASES
from pywebgpu.gpu import GPUError, request_device
from pywebgpu.ops.registry import OpError
from pywebgpu.runtime import HostTensor, load

pytestmark = pytest.mark.native

DYNAMIC_ADD = next(c for c in BINARY_CASES if c.id == "add-dynamic-seq")


def test_unknown_op_fails_at_load_naming_it():
    data = export_case(DYNAMIC_ADD)
    assert data.count(b"aten.add.Tensor") == 1
    renamed = data.replace(b"aten.add.Tensor", b"aten.zzz.Tensor")

    async def main():
        await load(await request_device(), renamed)

    with pytest.raises(OpError, match=r"'aten\.zzz\.Tensor' is not supported"):
        asyncio.run(main())


def test_input_beyond_the_exported_bound_is_refused():
    data = export_case(DYNAMIC_ADD)

    async def main():
        graph = await load(await request_device(), data)
        too_long = torch.zeros(1, 18, 16)
        await graph.execute(too_long.numpy(), torch.zeros(16).numpy())

    with pytest.raises(GPUError, match=r"input 0: shape \[1, 18, 16\] does not fit the exported bound \[1, 17, 16\]"):
        asyncio.run(main())


def test_wrong_number_of_inputs_is_refused():
    data = export_case(DYNAMIC_ADD)

    async def main():
        graph = await load(await request_device(), data)
        await graph.execute(HostTensor((1, 1, 16), [0.0] * 16))

    with pytest.raises(GPUError, match="takes 2 inputs, got 1"):
        asyncio.run(main())
