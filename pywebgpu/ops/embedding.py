"""Embedding lookups (kernels: wgsl/embedding.wgsl, wgsl/embedding_q4gsw.wgsl).

- `aten.embedding(weight f32 [V, D], indices, padding_idx, scale_grad_by_freq, sparse)`;
  the last three only matter for training and are ignored.
- `et_vk.embedding_q4gsw(weights uint8 [V, D/2], scales f32 [V, D/group_size] (or [V]),
  group_size, indices, is_linear_weight)` (`-E 4,32`): 4-bit symmetric per-group weights
  kept packed; `is_linear_weight` picks the nibble order (low nibble first, as 4-bit
  linears pack, which is what current exporters always emit).

Indices are int32 (the runtime narrows int64 token ids). The output is
[*indices.shape, D]. A token id outside [0, V) yields a row of zeros: PyTorch would
raise, and a GPU kernel cannot, but it must not read out of bounds either.

A table larger than one storage binding is stored by row blocks (row_blocks.py), one
dispatch a block, each writing the rows of the ids in its block (the first block also the
zero rows of ids outside [0, V)).
"""

from __future__ import annotations

from .dims import element_grid
from .registry import OpHandler, pack_u32, register
from .row_blocks import row_blocks, store_row_blocks

WORD_VALUES = 8  # 4-bit values per u32 word


class EmbeddingBase(OpHandler):
    RESIZED = ("grid", "tokens")

    def parse(self, indices: int):
        self.indices, self.out = self.tensor(indices), self.tensor(len(self.args) - 1)
        if self.indices.dtype != "int32":
            self.fail(f"indices {self.indices.label} are {self.indices.dtype}; int32 expected")
        if self.out.dtype != "float32":
            self.fail(f"output {self.out.label} is {self.out.dtype}; only float32 is supported")
        self.dim = self.out.max_sizes[-1]

    def split_tables(self, tables, row_bytes):
        """Store `tables` (constants of self.vocab rows, of `row_bytes[i]` bytes in table i)
        by the row blocks the device's limits ask for (one block: as the graph uploads them)."""
        self.tables, self.row_bytes = tables, row_bytes
        self.blocks = row_blocks(self.vocab, row_bytes, self.graph.device)

    def stored_constants(self) -> set:
        return {t.id for t in self.tables} if len(self.blocks) > 1 else set()

    async def build_blocks(self, kernel: str, constants: dict | None = None):
        """The pipeline, and a parameter buffer and bind group per row block."""
        self.pipeline = await self.make_pipeline(kernel, constants)
        if len(self.blocks) == 1:
            parts = [[t.buffer for t in self.tables]]
        else:
            stored = [store_row_blocks(self, t, self.blocks, size) for t, size in zip(self.tables, self.row_bytes)]
            parts = [list(block) for block in zip(*stored)]
        self.params = [self.params_buffer(32) for _ in self.blocks]
        self.groups = [
            self.graph.device.bind_group(self.pipeline, [self.out.buffer, *tables, self.indices.buffer, params])
            for tables, params in zip(parts, self.params)
        ]

    def set_output_sizes(self) -> int:
        """Set the output's live sizes from the indices'; returns the number of tokens."""
        self.set_sizes(self.out, (*self.indices.sizes, self.dim))
        return self.indices.numel

    def write_block_params(self, *fields):
        """Each block's parameters: its first row and rows, then `fields` (32 bytes)."""
        for params, (first, rows) in zip(self.params, self.blocks):
            self.write_params(params, pack_u32(first, rows, *fields).ljust(32, b"\0"))

    def record(self, recorder):
        if self.tokens:
            for group in self.groups:
                recorder.dispatch(self.pipeline, group, *self.grid)


@register("aten.embedding.default")
class Embedding(EmbeddingBase):
    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 6:
            self.fail(f"expected 6 arguments (weight, indices, padding_idx, scale_grad_by_freq, sparse, out), got {len(args)}")
        self.weight = self.tensor(0)
        self.parse(indices=1)
        if self.weight.dtype != "float32" or len(self.weight.max_sizes) != 2 or self.weight.max_sizes[1] != self.dim:
            self.fail(f"weight {self.weight.label} should be float32 [V, {self.dim}], got {self.weight.dtype}{list(self.weight.max_sizes)}")
        self.vocab = self.weight.max_sizes[0]
        self.split_tables([self.weight], [4 * self.dim])

    async def build(self):
        await self.build_blocks("embedding")

    def resize(self):
        self.tokens = self.set_output_sizes()
        self.write_block_params(self.tokens, self.dim, self.vocab)
        self.grid = element_grid(self.tokens * self.dim)


@register("et_vk.embedding_q4gsw.default")
class EmbeddingQ4gsw(EmbeddingBase):
    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 6:
            self.fail(f"expected 6 arguments (weights, scales, group_size, indices, is_linear_weight, out), got {len(args)}")
        self.weights, self.scales = self.tensor(0), self.tensor(1)
        self.group_size = self.int_arg(2)
        self.parse(indices=3)
        self.linear_order = self.value(4)
        if not isinstance(self.linear_order, bool):
            self.fail(f"is_linear_weight should be a bool, got {type(self.linear_order).__name__}")
        if self.weights.dtype != "uint8" or len(self.weights.max_sizes) != 2:
            self.fail(f"weights {self.weights.label} should be uint8 [V, D/2], got {self.weights.dtype}{list(self.weights.max_sizes)}")
        self.vocab, row_bytes = self.weights.max_sizes
        if self.group_size <= 0 or self.group_size % WORD_VALUES or self.dim % self.group_size:
            self.fail(f"group size {self.group_size} must be a positive multiple of {WORD_VALUES} dividing D={self.dim}")
        if 2 * row_bytes != self.dim or row_bytes % 4:
            self.fail(f"weights {list(self.weights.max_sizes)} do not hold word-aligned rows of D={self.dim} 4-bit values")
        scale_sizes = self.scales.max_sizes
        self.groups_per_row = scale_sizes[1] if len(scale_sizes) == 2 else 1
        if (
            self.scales.dtype != "float32"
            or len(scale_sizes) not in (1, 2)
            or scale_sizes[0] != self.vocab
            or self.groups_per_row != self.dim // self.group_size
        ):
            self.fail(
                f"scales {self.scales.label} should be float32 [{self.vocab}, {self.dim // self.group_size}], "
                f"got {self.scales.dtype}{list(scale_sizes)}"
            )
        self.weight_row_words = row_bytes // 4
        self.split_tables([self.weights, self.scales], [row_bytes, 4 * self.groups_per_row])

    async def build(self):
        await self.build_blocks("embedding_q4gsw", {"LINEAR_ORDER": self.linear_order})

    def resize(self):
        self.tokens = self.set_output_sizes()
        self.write_block_params(
            self.tokens, self.dim, self.vocab, self.weight_row_words, self.groups_per_row, self.group_size
        )
        self.grid = element_grid(self.tokens * self.dim // WORD_VALUES)
