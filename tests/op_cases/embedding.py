"""Embedding lookups: aten.embedding (f32 table) and et_vk.embedding_q4gsw (4-bit table),
the latter quantized the way ExecuTorch's Llama exporter does for `-E 4,<gs>`
(EmbeddingQuantHandler → quantized_decomposed.embedding_4bit, which the Vulkan partitioner
fuses and repacks to the linear nibble order, is_linear_weight=True), and through torchao
IntxWeightOnlyConfig on the embedding (torchao dequantize_affine + embedding, same fusion).

Goldens: float64 for the f32 table; the quantized modules only run in float32, so their
own float32 outputs (a dequantize and a gather: exact in float32). Token ids are int64,
as a Llama program takes them; 1- and 2-d index tensors; prime vocabularies and dims.
Out-of-range ids give zeros on the GPU where PyTorch raises, so no case uses them.
"""

import torch
from executorch.examples.models.llama.source_transformation.quantize import EmbeddingQuantHandler
from torch.export import Dim
from torchao.quantization.granularity import PerGroup
from torchao.quantization.quant_api import IntxWeightOnlyConfig, quantize_

from op_harness import OpCase


class Lookup(torch.nn.Module):
    def __init__(self, vocab, dim, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.table = torch.nn.Embedding(vocab, dim)

    def forward(self, ids):
        return self.table(ids)


def embedding_4bit(vocab, dim, group_size=32, seed=0):
    """As export_llama's `-E 4,<group_size>` quantizes (without HQQ, for determinism)."""
    return EmbeddingQuantHandler(
        Lookup(vocab, dim, seed), device="cpu", bitwidth=4, group_size=group_size, packed=True, quantize_with_hqq=False
    ).quantized_model()


def embedding_4bit_torchao(vocab, dim, group_size=32, seed=0):
    module = Lookup(vocab, dim, seed)
    quantize_(
        module,
        IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(group_size)),
        filter_fn=lambda m, fqn: isinstance(m, torch.nn.Embedding),
    )
    return module


def ids(vocab, *shape, seed=0):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def edge_ids(vocab):
    return torch.tensor([[0, vocab - 1, 1, vocab - 2, 0]])


seq = Dim("seq", min=1, max=40)


def q4(case_id, module, inputs, **kwargs):
    return OpCase(case_id, module, inputs, reference_dtype=torch.float32, **kwargs)


CASES = [
    OpCase("embedding-v31-d64", Lookup(31, 64), (edge_ids(31),)),
    OpCase("embedding-odd-dim-2d-ids", Lookup(97, 37, seed=1), (ids(97, 3, 5),)),
    OpCase(
        "embedding-dynamic-seq",
        Lookup(53, 24, seed=2),
        (ids(53, 1, 7),),
        more_runs=[(ids(53, 1, 1, seed=1),), (ids(53, 1, 40, seed=2),), (ids(53, 1, 3, seed=3),)],
        dynamic_shapes=({1: seq},),
    ),
    q4("embedding-q4gsw-v31-d64", embedding_4bit(31, 64), (edge_ids(31),)),
    q4("embedding-q4gsw-gs64-2d-ids", embedding_4bit(97, 192, group_size=64, seed=1), (ids(97, 3, 5),)),
    q4("embedding-q4gsw-gs128", embedding_4bit(61, 256, group_size=128, seed=2), (ids(61, 1, 11),)),
    q4(
        "embedding-q4gsw-dynamic-seq",
        embedding_4bit(101, 96, seed=3),
        (ids(101, 1, 7),),
        more_runs=[(ids(101, 1, 1, seed=1),), (ids(101, 1, 40, seed=2),), (ids(101, 1, 3, seed=3),)],
        dynamic_shapes=({1: seq},),
    ),
    q4("embedding-q4gsw-torchao", embedding_4bit_torchao(67, 160, seed=4), (ids(67, 1, 9),)),
]
