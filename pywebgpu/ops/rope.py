"""et_vk.apply_rotary_emb: rotary position embedding of q and k on interleaved pairs
(Meta / llama2.c layout), fused by the Vulkan partitioner from Llama's apply_rotary_emb
(kernel: wgsl/rotary_emb.wgsl)."""

from __future__ import annotations

from ..runtime.values import Tensor, ValueList
from .registry import OpHandler, linear_grid, pack_u32, register

WORKGROUP_SIZE = 256


@register("et_vk.apply_rotary_emb.default")
class ApplyRotaryEmb(OpHandler):
    """Args: xq [B, S, Hq, D], xk [B, S, Hk, D], freqs_cos [S, D/2], freqs_sin [S, D/2],
    then the outputs (xq_out, xk_out): a ValueList of both as exported, or two tensors."""

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

    async def build(self):
        self.params = self.params_buffer(32)
        self.pipeline = await self.make_pipeline("rotary_emb")
        self.group = self.graph.device.bind_group(
            self.pipeline,
            [self.xq_out.buffer, self.xk_out.buffer, self.xq.buffer, self.xk.buffer, self.cos.buffer, self.sin.buffer, self.params],
        )

    def resize(self):
        q_sizes, k_sizes = self.xq.sizes, self.xk.sizes
        seq_len, head_dim = q_sizes[1], q_sizes[-1]
        if k_sizes[:2] != q_sizes[:2] or k_sizes[-1] != head_dim:
            self.fail(f"xq {list(q_sizes)} and xk {list(k_sizes)} differ in batch, sequence or head dim")
        expected = (seq_len, head_dim // 2)
        if self.cos.sizes != expected or self.sin.sizes != expected:
            self.fail(f"freqs_cos {list(self.cos.sizes)} / freqs_sin {list(self.sin.sizes)} should be {list(expected)}")
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
        self.grid = linear_grid(self.pairs, WORKGROUP_SIZE)

    def record(self, recorder):
        if self.pairs:
            recorder.dispatch(self.pipeline, self.group, *self.grid)
