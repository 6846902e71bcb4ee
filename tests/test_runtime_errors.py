"""The runtime refuses what it cannot run at load time, with the op's name, and refuses
inputs that do not fit the exported bounds."""

import asyncio
import json

import pytest
import torch

from op_harness import export_case
from pte_fixtures import with_inline_vk_graph
from op_cases.binary import CASES as BINARY_CASES
from pywebgpu.gpu import GPUError, request_device
from pywebgpu.llm.logits_top_k import LogitsTopK
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

    case = next(c for c in ATTENTION_CASES if c.id == "sdpa-kv-gqa2-gpu")  # a 16-row cache

    def inputs(position, length):
        return [x.numpy() for x in step(position, length, 4, 2, 8, seed=position)]

    async def main():
        graph = await load(await request_device(), export_case(case), kernel_set="gpu")
        for position, length in ((0, 5), (5, 1), (15, 1)):
            await graph.execute(*inputs(position, length))
        await graph.execute(*inputs(16, 1))

    with pytest.raises(OpError, match=r"sdpa_with_kv_cache.*positions \[16, 17\) exceed the cache's 16"):
        asyncio.run(main())


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
        top_k = LogitsTopK(await load(await request_device(), export_case(case)))
        await top_k.build()
        await top_k.execute(*(x.numpy() for x in case.inputs))
        await top_k.submit(*(x.numpy() for x in case.inputs), token_from_last_run=True)

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


# A manifest as export_tools writes it (fields LanguageModel reads), for a .pte that does
# not exist: every refusal below comes from the manifest's check, before the .pte is read.
VALID_MANIFEST = {
    "format": "pywebgpu.llama-export",
    "format_version": 1,
    "pte": {"file": "absent.pte", "bytes": 8, "sha256": "0" * 64},
    "model": {"vocab_size": 100, "max_prefill_tokens": 31, "max_context_len": 64},
    "tokenizer": {"file": "absent.tokenizer.json", "add_bos": False},
    "special_tokens": {"bos": None, "eos": [{"id": 2, "text": "</s>"}]},
    "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}",
}

DELETE = object()


def _changed(path: str, value):
    """VALID_MANIFEST with the field at dotted `path` set to `value` (DELETE: removed)."""
    manifest = json.loads(json.dumps(VALID_MANIFEST))
    *parents, key = path.split(".")
    target = manifest
    for parent in parents:
        target = target[parent]
    if value is DELETE:
        del target[key]
    else:
        target[key] = value
    return manifest


@pytest.mark.parametrize(
    "manifest, message",
    [
        ("{not json", r"the model's manifest .*model\.json is not valid JSON \(Expecting property name"),
        ({"architectures": ["LlamaForCausalLM"]}, r"model\.json is not a model manifest of pywebgpu's export tools: its 'format' is None"),
        ([1, 2], r"its 'format' is None, not 'pywebgpu\.llama-export'"),
        (_changed("format_version", 2), r"is format version 2; this pywebgpu reads version 1"),
        (_changed("format_version", "1"), r"'format_version' must be a positive integer, not '1'"),
        (_changed("tokenizer", None), r"the model's manifest .* names no tokenizer"),
        (_changed("tokenizer.file", ""), r"'tokenizer\.file' must be a file name, not ''"),
        (_changed("pte", DELETE), r"has no 'pte\.file'"),
        (_changed("pte.bytes", "8"), r"'pte\.bytes' must be a positive integer, not '8'"),
        (_changed("pte.bytes", True), r"'pte\.bytes' must be a positive integer, not True"),
        (_changed("pte.sha256", "ABC"), r"'pte\.sha256' must be 64 lowercase hex digits, not 'ABC'"),
        (_changed("pte.chunk_sha256", ["0" * 64]), r"has no 'pte\.chunk_bytes'"),
        (_changed("pte.chunk_bytes", 4), r"has no 'pte\.chunk_sha256'"),
        (
            _changed("pte", {**VALID_MANIFEST["pte"], "chunk_bytes": 4, "chunk_sha256": ["0" * 64]}),
            r"'pte\.chunk_sha256' must be a list of 2 sha256s \(64 lowercase hex digits each\), one per 4 bytes of the \.pte, not \['0+'\]",
        ),
        (_changed("pte", {**VALID_MANIFEST["pte"], "chunk_bytes": 8, "chunk_sha256": ["0" * 63]}), r"must be a list of 1 sha256s"),
        (_changed("model.vocab_size", DELETE), r"has no 'model\.vocab_size'"),
        (_changed("model.max_context_len", 0), r"'model\.max_context_len' must be a positive integer, not 0"),
        (_changed("special_tokens.eos", []), r"'special_tokens\.eos' must be a list of tokens, not \[\]"),
        (_changed("special_tokens.eos", [{"id": 100}]), r"'special_tokens\.eos\[0\]\.id' must be a token id below the vocabulary's 100, not 100"),
        (_changed("special_tokens.eos", [2]), r"'special_tokens\.eos\[0\]\.id' must be a token id .*, not None"),
        (_changed("chat_template", 7), r"'chat_template' must be a Jinja template string, not 7"),
        (_changed("chat_template", DELETE), r"the model's manifest .*model\.json has no 'chat_template' \(the chat needs"),
        (_changed("chat_template", None), r"the model's manifest .*model\.json has no 'chat_template'"),
        (_changed("chat_template", ""), r"the model's manifest .*model\.json has no 'chat_template'"),
        (_changed("chat_template", "{{ messages }}"), r"'chat_template': unsupported chat template: only ChatML and Llama 3"),
    ],
)
def test_a_bad_manifest_is_refused_before_the_download(tmp_path, manifest, message):
    """The manifest is checked before the .pte is read (it does not exist here); the error
    names the field and what is wrong with it."""
    from pywebgpu.llm import LanguageModel, ModelFileError

    path = tmp_path / "model.json"
    path.write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    with pytest.raises(ModelFileError, match=message):
        asyncio.run(LanguageModel.load(str(path)))


@pytest.mark.parametrize("chunks", [False, True], ids=["whole-sha256", "chunk-sha256s"])
def test_a_good_manifest_passes_its_check(tmp_path, chunks):
    """The manifest above passes (with chunk sha256s too), so the refusals above are the
    fields' own: the load goes on to read the .pte, which does not exist."""
    from pywebgpu.llm import LanguageModel

    manifest = VALID_MANIFEST
    if chunks:
        manifest = _changed("pte", {**VALID_MANIFEST["pte"], "chunk_bytes": 4, "chunk_sha256": ["0" * 64, "f" * 64]})
    path = tmp_path / "model.json"
    path.write_text(json.dumps(manifest))
    with pytest.raises(FileNotFoundError, match="absent.pte"):
        asyncio.run(LanguageModel.load(str(path)))


def test_a_4bit_linear_whose_outputs_are_no_multiple_of_4_is_refused_at_load():
    """ExecuTorch writes 4-bit linears of N % 4 == 0 only (its scales padded to 4 columns);
    the kernels read 4 outputs' scales at once, so a program claiming N = 10 of those
    12 rows is refused naming the op, not run with misaligned scales."""
    from op_cases.linear import CASES as LINEAR_CASES

    case = next(c for c in LINEAR_CASES if c.id.startswith("linear-q4gsw-gemv-k64-n12"))

    def claim_10_outputs(graph):
        (linear,) = [op for op in graph.chain if op.name == "et_vk.linear_q4gsw.default"]
        out = graph.values[linear.args[-1]].value
        assert list(out.dims) == [1, 12]
        out.dims = [1, 10]

    crafted = with_inline_vk_graph(export_case(case), claim_10_outputs)

    async def main():
        await load(await request_device(), crafted)

    with pytest.raises(OpError, match=r"et_vk\.linear_q4gsw.*N=10 and the scales' row of 12 must be multiples of 4"):
        asyncio.run(main())
