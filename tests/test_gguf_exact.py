"""The exact GGUF export: every weight of the `.pte` is llama.cpp's value, bit for bit.

The two small GGUFs of gguf_exact_fixtures cover every supported type, each exported
once per session. The `.pte`'s weights are rebuilt here from its
constants alone (the Vulkan delegate's packing, read with `pywebgpu.pte`) and compared
with `gguf.quants.dequantize` of the file; the eager module's logits with an fp32 Llama
on those dequantized weights.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from export_tools import ExportError, GGUFSource, build_eager
from gguf_exact_fixtures import MAX_CONTEXT_LEN, MAX_SEQ_LEN, MODELS, exact_gguf_export
from gguf_files import write_typed_gguf
from test_export_tools import (
    CONTINUATION,
    PROMPT,
    eager_logits_by_steps,
    meta_reference_weights,
    random_meta_weights,
    reference_logits,
    rotate_interleaved,
    vulkan_op_names,
)

@pytest.fixture(scope="session", params=sorted(MODELS))
def model_name(request):
    return request.param


@pytest.fixture(scope="session")
def exact_export(model_name, tmp_path_factory):
    return exact_gguf_export(str(tmp_path_factory.getbasetemp()), model_name)


# --------------------------------------------------------------------------- the .pte's weights


def _constant(program, value) -> np.ndarray:
    dtype = {"float32": np.float32, "uint8": np.uint8}[value.dtype]
    data = program.source.read(value.constant.offset, value.constant.size)
    return np.frombuffer(data, dtype=dtype).reshape(value.dims)


def _unpack_4bit(packed: np.ndarray, columns: int) -> np.ndarray:
    """The Vulkan delegate's 4-bit packing: byte j of a row holds values 2j (low nibble)
    and 2j + 1 (high nibble), each + 8; rows padded. -> int [rows, columns]."""
    values = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
    return values[:, :columns].astype(np.int32) - 8


def pte_weights(pte_path: Path) -> list[tuple[str, np.ndarray]]:
    """Every weight matrix of the program, rebuilt by following its graph: the sums of
    4-bit planes (linear_q4gsw / embedding_q4gsw), group-offset terms (aten.linear over
    group sums / aten.embedding broadcast over groups) and fp32 linears that feed one
    output, as ("linear" | "embedding", f32 [rows, columns]), in the graph's f32 order."""
    from pywebgpu.pte import load_program

    program = load_program(pte_path.read_bytes())
    graph = program.vulkan_graph()
    values = graph.values
    alias: dict[int, int] = {}  # a view of an untracked value -> the value
    group_sums: dict[int, tuple[int, int]] = {}  # sum value -> (input, group size)
    terms: dict[int, tuple[str, int, np.ndarray]] = {}  # value -> (kind, input, weight)
    consumed: set[int] = set()

    def root(value_id: int) -> int:
        while value_id in alias:
            value_id = alias[value_id]
        return value_id

    for op in graph.chain:
        args = op.args
        if op.name == "et_vk.linear_q4gsw.default":
            x, weight, scales, out = args[0], values[args[1]], values[args[2]], args[-1]
            rows, columns = values[out].dims[-1], values[x].dims[-1]
            groups = _constant(program, scales).T[:rows]
            plane = _unpack_4bit(_constant(program, weight), columns).astype(np.float32)
            terms[out] = ("linear", root(x), np.repeat(groups, columns // groups.shape[1], axis=1) * plane)
        elif op.name == "et_vk.embedding_q4gsw.default":
            weight, scales, tokens, out = values[args[0]], values[args[1]], args[3], args[-1]
            columns = values[out].dims[-1]
            groups = _constant(program, scales)
            plane = _unpack_4bit(_constant(program, weight), columns).astype(np.float32)
            terms[out] = ("embedding", root(tokens), np.repeat(groups, columns // groups.shape[1], axis=1) * plane)
        elif op.name == "aten.embedding.default" and values[args[0]].constant is not None:
            terms[args[-1]] = ("embedding", root(args[1]), _constant(program, values[args[0]]).copy())
        elif op.name == "aten.sum.dim_IntList" and args[0] not in terms:
            group_sums[args[-1]] = (root(args[0]), values[args[0]].dims[-1])
        elif op.name == "aten.linear.default" and values[args[1]].constant is not None:
            weight = _constant(program, values[args[1]])
            x = root(args[0])
            if x in group_sums:
                x, group_size = group_sums[x]
                weight = np.repeat(weight, group_size, axis=1)
            terms[args[-1]] = ("linear", x, weight.copy())
        elif op.name == "aten.view_copy.default":
            if args[0] in terms:
                terms[args[-1]] = terms[args[0]]
                consumed.add(args[0])
            elif args[0] in group_sums:
                group_sums[args[-1]] = group_sums[args[0]]
            else:
                alias[args[-1]] = args[0]
        elif op.name == "aten.add.Tensor" and terms.get(args[0], ())[:2] == terms.get(args[1], (None,))[:2]:
            (kind, x, first), (_, _, second) = terms[args[0]], terms[args[1]]
            if second.shape != first.shape:  # an offset row, broadcast over each group
                second = np.repeat(second, first.shape[1] // second.shape[1], axis=1)
            terms[args[-1]] = (kind, x, (first + second).astype(np.float32))
            consumed.update(args[:2])
    finals = {id(term[2]): term for value_id, term in terms.items() if value_id not in consumed}
    return [(kind, weight) for kind, _, weight in finals.values()]


def test_every_pte_weight_is_the_gguf_value(exact_export):
    result, seen, geometry, _ = exact_export
    expected = {
        "embedding": [seen["tok_embeddings.weight"].numpy()],
        "linear": [tensor.numpy() for key, tensor in seen.items() if tensor.ndim == 2 and key != "tok_embeddings.weight"],
    }
    found = pte_weights(result.pte_path)
    assert sorted(kind for kind, _ in found) == sorted(kind for kind, tensors in expected.items() for _ in tensors)
    for kind, weight in found:
        matches = [
            index
            for index, reference in enumerate(expected[kind])
            # Equal f32 values: bit for bit but for the sign of zeros (llama.cpp's d·0 is
            # -0 where d < 0, a sum of planes +0).
            if reference.shape == weight.shape and np.isfinite(weight).all() and np.array_equal(reference, weight)
        ]
        assert matches, f"a {kind} weight {weight.shape} of the .pte is no GGUF tensor's value"
        expected[kind].pop(matches[0])
    assert not any(expected.values())


def test_exact_graph_ops_and_manifest(exact_export):
    import gguf

    result, _, _, gguf_path = exact_export
    ops = vulkan_op_names(result.pte_path)
    assert {"et_vk.linear_q4gsw.default", "aten.sum.dim_IntList",
            "aten.linear.default", "et_vk.embedding_q4gsw.default", "aten.embedding.default"} <= ops  # fmt: skip
    counts: dict[str, int] = {}
    float_linears = set()  # the roles of the GGUF's float matrices but the embedding, by llama.cpp's names
    roles = {"attn_q": "attention.wq", "attn_k": "attention.wk", "attn_v": "attention.wv", "attn_output": "attention.wo",
             "ffn_gate": "feed_forward.w1", "ffn_down": "feed_forward.w2", "ffn_up": "feed_forward.w3", "output": "output"}  # fmt: skip
    for tensor in gguf.GGUFReader(gguf_path).tensors:
        counts[tensor.tensor_type.name] = counts.get(tensor.tensor_type.name, 0) + 1
        if tensor.tensor_type.name in ("F32", "F16", "BF16") and len(tensor.shape) == 2 and tensor.name != "token_embd.weight":
            float_linears.add(roles[tensor.name.removesuffix(".weight").split(".")[-1]])
    quantization = result.manifest["quantization"]
    group_sizes = [16, 32] if "Q6_K" in counts else 32
    assert quantization == {"mode": "gguf", "exact": True, "gguf_types": dict(sorted(counts.items())),
                            "group_size": group_sizes, "float_linears": sorted(float_linears), "float_dtype": "float32"}  # fmt: skip
    assert ("attention.wo" in float_linears) == ("F16" in counts)  # the k_quants mix's F16 matrix


def test_exact_eager_matches_dequantized_reference(exact_export):
    result, seen, geometry, _ = exact_export
    tokens = PROMPT + CONTINUATION
    reference = reference_logits(meta_reference_weights(seen, geometry["n_layers"]), geometry, tokens, rotate_interleaved)
    reference = reference[len(PROMPT) - 1 :]
    eager = eager_logits_by_steps(result.eager, tokens, prefill=len(PROMPT))
    torch.testing.assert_close(eager, reference, atol=1e-4, rtol=1e-4)
    assert torch.equal(eager.argmax(-1), reference.argmax(-1))


def test_unsupported_gguf_type_is_refused_by_name(tmp_path):
    geometry, _, _ = MODELS["classic"]
    path = tmp_path / "q5_0.gguf"
    write_typed_gguf(path, geometry, random_meta_weights(geometry, seed=7),
                     {"default": "Q4_1", "layers.1.attention.wq.weight": "Q5_0"}, seed=8)  # fmt: skip
    with pytest.raises(ExportError) as error:
        build_eager(GGUFSource(path), max_seq_len=MAX_SEQ_LEN, max_context_len=MAX_CONTEXT_LEN)
    message = str(error.value)
    for part in ("'blk.1.attn_q.weight'", "type Q5_0", "Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K", "--requantize"):
        assert part in message, message

