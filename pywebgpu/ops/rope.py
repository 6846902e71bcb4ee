"""et_vk.apply_rotary_emb: rotary position embedding of q and k on interleaved pairs
(Meta / llama2.c layout), fused by the Vulkan partitioner from Llama's apply_rotary_emb
(kernel: wgsl/rotary_emb.wgsl).

The kernel reads the cos/sin rows from a first row held in a uniform buffer: 0 for the
op as exported, whose tables are the rows of this call; the position for
`RotaryEmbAtPosition`, which the runtime's fusion makes of the op and the slices that cut
those rows out of the whole tables at the position. That one reads the rows at the
position on the GPU (the SymInt's buffer), so that decode steps do not resize it. Where
the kernels for GPUs run, fusion goes on to put it inside the attention that reads its
outputs (ops/attention/, RopeSdpaWithKvCache)."""

from __future__ import annotations

from ..gpu import UNIFORM_USAGE
from ..values import SymInt, Tensor, ValueList
from .dims import element_grid
from .registry import OpHandler, pack_u32, register


@register("et_vk.apply_rotary_emb.default")
class ApplyRotaryEmb(OpHandler):
    """Args: xq [B, S, Hq, D], xk [B, S, Hk, D], freqs_cos [S, D/2], freqs_sin [S, D/2],
    then the outputs (xq_out, xk_out): a ValueList of both as exported, or two tensors."""

    RESIZED = ("grid", "pairs")

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        self.xq, self.xk, self.cos, self.sin = (self.tensor(i) for i in range(4))
        outputs = self.value(4) if len(args) == 5 else None
        if isinstance(outputs, ValueList) and len(outputs.items) == 2:
            out_ids = outputs.items
        elif len(args) == 6:
            out_ids = args[4:]
        else:
            self.fail("expected (xq, xk, freqs_cos, freqs_sin) then a list of 2 outputs or 2 output tensors")
        self.xq_out, self.xk_out = (graph.values[i] for i in out_ids)
        if not (isinstance(self.xq_out, Tensor) and isinstance(self.xk_out, Tensor)):
            self.fail("the outputs must be tensors")
        for tensor in (self.xq, self.xk, self.cos, self.sin, self.xq_out, self.xk_out):
            if tensor.dtype != "float32":
                self.fail(f"{tensor.label} is {tensor.dtype}; only float32 is supported")
        if len(self.xq.max_sizes) < 3 or len(self.xk.max_sizes) != len(self.xq.max_sizes):
            self.fail(f"xq {list(self.xq.max_sizes)} and xk {list(self.xk.max_sizes)} must be [B, S, ..., D]")
        if len(self.cos.max_sizes) != 2 or self.sin.max_sizes != self.cos.max_sizes:
            self.fail(f"freqs_cos {list(self.cos.max_sizes)} and freqs_sin {list(self.sin.max_sizes)} must be [S, D/2]")
        if self.xq.max_sizes[-1] % 2 or self.xq.max_sizes[-1] != self.xk.max_sizes[-1]:
            self.fail("xq and xk need the same even head dim")

    def first_row_buffer(self):
        """The uniform buffer holding the first table row to read (an i32)."""
        return self.graph.device.create_buffer_with_data(bytes(16), UNIFORM_USAGE, label=f"{self.name}#{self.index}.first_row")

    async def build(self):
        self.params = self.params_buffer(32)
        self.pipeline = await self.make_pipeline("rotary_emb")
        self.group = self.graph.device.bind_group(
            self.pipeline,
            [
                self.xq_out.buffer,
                self.xk_out.buffer,
                self.xq.buffer,
                self.xk.buffer,
                self.cos.buffer,
                self.sin.buffer,
                self.params,
                self.first_row_buffer(),
            ],
        )

    def check_tables(self, seq_len: int, half_dim: int):
        expected = (seq_len, half_dim)
        if self.cos.sizes != expected or self.sin.sizes != expected:
            self.fail(f"freqs_cos {list(self.cos.sizes)} / freqs_sin {list(self.sin.sizes)} should be {list(expected)}")

    def resize(self):
        q_sizes, k_sizes = self.xq.sizes, self.xk.sizes
        seq_len, head_dim = q_sizes[1], q_sizes[-1]
        if k_sizes[:2] != q_sizes[:2] or k_sizes[-1] != head_dim:
            self.fail(f"xq {list(q_sizes)} and xk {list(k_sizes)} differ in batch, sequence or head dim")
        self.check_tables(seq_len, head_dim // 2)
        self.set_sizes(self.xq_out, q_sizes)
        self.set_sizes(self.xk_out, k_sizes)
        tokens = q_sizes[0] * seq_len
        q_pairs, k_pairs = self.xq.numel // 2, self.xk.numel // 2
        self.write_params(
            self.params,
            pack_u32(
                q_pairs, k_pairs, q_pairs // max(tokens, 1), k_pairs // max(tokens, 1), head_dim // 2, max(seq_len, 1), 0, 0
            ),
        )
        self.pairs = q_pairs + k_pairs
        self.grid = element_grid(self.pairs)

    def record(self, recorder):
        if self.pairs:
            recorder.dispatch(self.pipeline, self.group, *self.grid)


class RotaryEmbAtPosition(ApplyRotaryEmb):
    """apply_rotary_emb of the rows [start, start + length) of whole RoPE tables, read at
    `start` on the GPU: what fusion (runtime/fusion/rope.py) makes of the op and the
    slice_copy ops that cut its freqs_cos / freqs_sin out of the tables.

    Args: xq, xk, cos table [rows, D/2], sin table, start (Int or SymInt), length (a
    SymInt: the slices' end - start), xq_out, xk_out. The grid does not depend on
    `start`, so the op serves every start whose rows lie inside the tables."""

    def __init__(self, graph, index, name, args):
        xq, xk, cos_table, sin_table, self.start_id, self.length_id, *out_ids = args
        super().__init__(graph, index, name, (xq, xk, cos_table, sin_table, *out_ids))
        self.args = args  # every value it reads, for the runtime's tracking
        if not isinstance(graph.values[self.length_id], SymInt):
            self.fail(f"value {self.length_id} (the rows' count) should be a SymInt")

    def first_row_buffer(self):
        return self.graph.int_on_gpu(self.start_id)

    def check_tables(self, seq_len: int, half_dim: int):
        rows, width = self.cos.sizes
        if self.sin.sizes != self.cos.sizes or width != half_dim:
            self.fail(f"tables freqs_cos {list(self.cos.sizes)} / freqs_sin {list(self.sin.sizes)} should be [rows, {half_dim}]")
        start, length = self.graph.int_value(self.start_id, self), self.graph.int_value(self.length_id, self)
        if length != seq_len:
            self.fail(f"the tables' slice [{start}, {start + length}) has {length} rows for {seq_len} tokens")
        if not 0 <= start <= rows - seq_len:
            self.fail(f"positions [{start}, {start + seq_len}) are outside the RoPE tables' {rows} rows")
        if isinstance(self.graph.values[self.start_id], SymInt):
            self.gpu_int_ranges = {self.start_id: (0, rows - seq_len)}
