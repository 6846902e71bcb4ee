"""et_vk.apply_rotary_emb (fused from Llama's apply_rotary_emb): interleaved pairs,
grouped-query head counts, odd pair counts, real RoPE tables, dynamic sequence length."""

import torch
from torch.export import Dim

from op_harness import OpCase


def rotate(x, cos, sin):
    x_r, x_i = x.reshape(x.shape[:-1] + (-1, 2)).unbind(-1)
    out_r = x_r * cos - x_i * sin
    out_i = x_r * sin + x_i * cos
    return torch.stack([out_r, out_i], dim=-1).flatten(3)


class Rope(torch.nn.Module):
    """Llama's apply_rotary_emb (examples/models/llama/rope.py) without its float32
    casts, which export drops for float32 inputs, so the float64 reference stays float64."""

    def forward(self, xq, xk, freqs_cos, freqs_sin):
        shape = [1, xq.shape[1], 1, xq.shape[-1] // 2]  # reshape_for_broadcast
        cos, sin = freqs_cos.view(shape), freqs_sin.view(shape)
        return rotate(xq, cos, sin), rotate(xk, cos, sin)


def r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def tables(head_dim, start, length, theta=10000.0):
    """Llama's RoPE tables (precompute_freqs_cis) at positions [start, start + length)."""
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim)
    angles = torch.outer(torch.arange(start, start + length).float(), freqs)
    return torch.cos(angles), torch.sin(angles)


def rope_inputs(seq, q_heads, kv_heads, head_dim, start=0, seed=0):
    return (r(1, seq, q_heads, head_dim, seed=seed), r(1, seq, kv_heads, head_dim, seed=seed + 1), *tables(head_dim, start, seq))


seq = Dim("seq", min=1, max=13)
dynamic = ({1: seq}, {1: seq}, {0: seq}, {0: seq})

CASES = [
    OpCase("rope-gqa2-hd8", Rope(), rope_inputs(5, 4, 2, 8)),
    OpCase("rope-gqa3-odd-pairs", Rope(), (r(1, 7, 3, 10, seed=2), r(1, 7, 1, 10, seed=3), r(7, 5, seed=4), r(7, 5, seed=5))),
    OpCase("rope-mha-hd64-late-positions", Rope(), rope_inputs(3, 5, 5, 64, start=1000, seed=6)),
    OpCase("rope-single-token", Rope(), rope_inputs(1, 9, 3, 64, start=17, seed=8)),
    OpCase(
        "rope-dynamic-seq",
        Rope(),
        rope_inputs(6, 6, 2, 32, seed=10),
        more_runs=[rope_inputs(1, 6, 2, 32, start=6, seed=12), rope_inputs(13, 6, 2, 32, start=7, seed=14)],
        dynamic_shapes=dynamic,
    ),
]


class RopeAtPosition(torch.nn.Module):
    """Llama's RoPE with its tables cut at rows [input_pos, input_pos + S), as the Llama
    export does: the runtime fuses the slices into the op, which then reads the tables at
    the position on the GPU. Inputs: xq, xk, input_pos int64 [1]."""

    def __init__(self, head_dim, rows):
        super().__init__()
        cos, sin = tables(head_dim, 0, rows)
        self.register_buffer("freqs_cos", cos)
        self.register_buffer("freqs_sin", sin)

    def forward(self, xq, xk, input_pos):
        start = input_pos[0].item()
        torch._check(start >= 0)
        torch._check(start < self.freqs_cos.size(0))
        seq_len = xq.shape[1]
        torch._check(start + seq_len <= self.freqs_cos.size(0))
        return Rope()(xq, xk, self.freqs_cos.narrow(0, start, seq_len), self.freqs_sin.narrow(0, start, seq_len))


def at_position(seq, start, seed):
    return (r(1, seq, 6, 16, seed=seed), r(1, seq, 2, 16, seed=seed + 1), torch.tensor([start]))


CASES.append(
    OpCase(
        "rope-tables-at-position",
        RopeAtPosition(16, 24),
        at_position(5, 0, seed=20),
        # Decode steps (the fused op is not resized), then a longer call and back.
        more_runs=[at_position(1, 5, seed=22), at_position(1, 6, seed=24), at_position(4, 20, seed=26), at_position(1, 23, seed=28)],
        dynamic_shapes=({1: Dim("seq", min=1, max=8)}, {1: Dim("seq", min=1, max=8)}, None),
        expect_ops=("apply_rotary_emb at position (fused)",),
        expect_no_ops=("aten.slice_copy.Tensor",),
    )
)


class RopeBetween(RopeAtPosition):
    """RoPE with its tables cut at rows [start, end), both given: the slices end at a
    position of their own rather than at start + a length, so the fused op's rows are
    counted as end - start on the host. Inputs: xq, xk, bounds int64 [2]."""

    def forward(self, xq, xk, bounds):
        start, end = bounds[0].item(), bounds[1].item()
        torch._check(start >= 0)
        torch._check(start < end)
        torch._check(end <= self.freqs_cos.size(0))
        torch._check(end - start == xq.shape[1])
        return Rope()(xq, xk, self.freqs_cos[start:end], self.freqs_sin[start:end])


def between(seq, start, seed):
    return (r(1, seq, 6, 16, seed=seed), r(1, seq, 2, 16, seed=seed + 1), torch.tensor([start, start + seq]))


CASES.append(
    OpCase(
        "rope-tables-between-positions",
        RopeBetween(16, 24),
        between(5, 0, seed=30),
        more_runs=[between(1, 5, seed=32), between(4, 20, seed=34)],
        dynamic_shapes=({1: Dim("seq", min=1, max=8)}, {1: Dim("seq", min=1, max=8)}, None),
        expect_ops=("apply_rotary_emb at position (fused)", "sub"),
        expect_no_ops=("aten.slice_copy.Tensor",),
    )
)
