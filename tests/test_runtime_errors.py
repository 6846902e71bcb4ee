"""The runtime refuses what it cannot run at load time, with the op's name, and refuses
inputs that do not fit the exported bounds."""

import asyncio
import json

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


def test_position_past_the_kv_cache_is_refused_by_attention_reading_it_on_the_gpu():
    """With the kernels for GPUs, decode steps within the attention's grid are not resized;
    a position past the cache still is, and fails naming the op."""
    from op_cases.attention import CASES as ATTENTION_CASES, step
    from pywebgpu.ops import registry

    case = next(c for c in ATTENTION_CASES if c.id == "sdpa-kv-gqa2-gpu")  # a 16-row cache

    def inputs(position, length):
        return [x.numpy() for x in step(position, length, 4, 2, 8, seed=position)]

    async def main():
        graph = await load(await request_device(), export_case(case))
        for position, length in ((0, 5), (5, 1), (15, 1)):
            await graph.execute(*inputs(position, length))
        await graph.execute(*inputs(16, 1))

    registry.FORCE_KERNEL_SET = "gpu"
    try:
        with pytest.raises(OpError, match=r"sdpa_with_kv_cache.*positions \[16, 17\) exceed the cache's 16"):
            asyncio.run(main())
    finally:
        registry.FORCE_KERNEL_SET = None


def test_position_past_the_rope_tables_is_refused_by_rope_reading_them_on_the_gpu():
    """RoPE fused with its tables' slices reads the rows at the position on the GPU and is
    not resized by decode steps; a position whose rows leave the tables fails naming the op
    (left unfused, the slice would have clamped and the op seen too few rows)."""
    from op_cases.rope import CASES as ROPE_CASES, at_position

    case = next(c for c in ROPE_CASES if c.id == "rope-tables-at-position")  # 24-row tables

    async def main():
        graph = await load(await request_device(), export_case(case))
        for seq, start in ((5, 0), (1, 5), (1, 23)):
            await graph.execute(*(x.numpy() for x in at_position(seq, start, seed=start)))
        await graph.execute(*(x.numpy() for x in at_position(1, 24, seed=24)))

    with pytest.raises(OpError, match=r"apply_rotary_emb at position.*positions \[24, 25\) are outside the RoPE tables' 24 rows"):
        asyncio.run(main())


class _PositionFirst(torch.nn.Module):
    """RoPE at a position whose first input is the position (read on the host)."""

    def __init__(self):
        super().__init__()
        from op_cases.rope import RopeAtPosition

        self.rope = RopeAtPosition(16, 24)

    def forward(self, input_pos, xq, xk):
        return self.rope(xq, xk, input_pos)


def test_an_input_read_on_the_host_is_not_fed_from_the_last_run():
    """Feeding input 0 from the last run's top-1 on the GPU leaves its values unknown to
    the host: refused when an op reads them there (select_as_symint, here the position)."""
    from op_cases.rope import at_position
    from op_harness import OpCase

    xq, xk, _ = at_position(1, 0, seed=3)
    case = OpCase("position-first", _PositionFirst(), (torch.tensor([2]), xq, xk))

    async def main():
        graph = await load(await request_device(), export_case(case))
        await graph.build_top_k()
        await graph.execute_top_k(*(x.numpy() for x in case.inputs))
        await graph.submit_top_k(*(x.numpy() for x in case.inputs), token_from_last_run=True)

    with pytest.raises(GPUError, match="cannot be fed on the GPU: an op reads the token input on the host"):
        asyncio.run(main())


def test_index_out_of_range_is_refused_when_only_the_indices_change():
    """Index tensors given by the caller are checked on the host each time their data
    changes, not only when their shape does (an input whose data alone changed resizes
    only the ops that read it on the host)."""
    from op_cases.indexing import CASES as INDEXING_CASES

    case = next(c for c in INDEXING_CASES if c.id == "index-dim0")  # x [7, 5], 5 indices

    async def main():
        graph = await load(await request_device(), export_case(case))
        x = torch.randn(7, 5).numpy()
        ids = torch.tensor([0, -1, 3, 3, -7], dtype=torch.int32)
        await graph.execute(x, ids.numpy())
        await graph.execute(x, torch.tensor([1, 2, 3, 4, 7], dtype=torch.int32).numpy())

    with pytest.raises(OpError, match=r"aten\.index\.Tensor: index 7 out of range for dim 0 of size 7"):
        asyncio.run(main())


def test_manifest_without_a_tokenizer_is_refused_before_the_download(tmp_path):
    """The manifest is checked before the .pte is read: here the .pte does not exist, and
    the error names what the manifest lacks."""
    from pywebgpu.llm import LanguageModel
    from pywebgpu.llm.model import ModelFileError

    manifest = tmp_path / "model.json"
    manifest.write_text(json.dumps({"pte": {"file": "absent.pte", "bytes": 8, "sha256": "0" * 64}}))
    with pytest.raises(ModelFileError, match="the model's manifest names no tokenizer"):
        asyncio.run(LanguageModel.load(str(manifest)))
