"""aten.sum.dim_IntList over the last dim (the Vulkan partitioner delegates no other; keepdim both ways, dynamic rows), aten.linear
with float32 weights (with and without a bias, several leading dims), and the broadcast
add [.., G, gs] + [.., G, 1] that the exact GGUF embedding makes."""

import torch
from torch.export import Dim

from op_harness import OpCase


class SumLast(torch.nn.Module):
    def __init__(self, dims, keepdim=False):
        super().__init__()
        self.dims, self.keepdim = dims, keepdim

    def forward(self, x):
        return x.sum(self.dims, keepdim=self.keepdim)


class GroupSums(torch.nn.Module):
    """x's last dim regrouped by `group_size`, each group summed (the exact GGUF linear's
    offset term reads these)."""

    def __init__(self, group_size):
        super().__init__()
        self.group_size = group_size

    def forward(self, x):
        return x.view(*x.shape[:-1], x.shape[-1] // self.group_size, self.group_size).sum(-1)


class LinearF32(torch.nn.Module):
    def __init__(self, k, n, bias, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.linear = torch.nn.Linear(k, n, bias=bias)

    def forward(self, x):
        return self.linear(x)


class AddGroupColumn(torch.nn.Module):
    """x [.., G, gs] plus a constant [.., G, 1] broadcast over each group."""

    def __init__(self, groups, seed):
        super().__init__()
        self.register_buffer("column", r(groups, 1, seed=seed))

    def forward(self, x):
        return x + self.column


def r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


seq = Dim("seq", min=1, max=19)

CASES = [
    OpCase("sum-last", SumLast([-1]), (r(3, 5, 7),)),
    OpCase("sum-last-keepdim", SumLast([2], keepdim=True), (r(3, 5, 7, seed=1),)),
    OpCase("sum-last-4d", SumLast([3]), (r(2, 4, 3, 33, seed=2),)),
    OpCase("sum-last-4d-keepdim", SumLast([-1], keepdim=True), (r(2, 4, 3, 33, seed=3),)),
    OpCase("sum-long-row", SumLast([-1]), (r(2, 1001, seed=4),)),
    OpCase(
        "sum-group-sums-dynamic",
        GroupSums(32),
        (r(1, 5, 96, seed=5),),
        more_runs=[(r(1, 1, 96, seed=6),), (r(1, 19, 96, seed=7),)],
        dynamic_shapes=({1: seq},),
        expect_ops=("aten.sum.dim_IntList",),
    ),
    OpCase("linear-f32", LinearF32(24, 7, bias=False, seed=8), (r(5, 24, seed=9),), expect_ops=("aten.linear.default",)),
    OpCase("linear-f32-bias-3d", LinearF32(12, 9, bias=True, seed=10), (r(2, 3, 12, seed=11),)),
    OpCase(
        "linear-f32-dynamic",
        LinearF32(6, 13, bias=False, seed=12),
        (r(1, 4, 6, seed=13),),
        more_runs=[(r(1, 1, 6, seed=14),), (r(1, 19, 6, seed=15),)],
        dynamic_shapes=({1: seq},),
    ),
    OpCase("add-group-column", AddGroupColumn(3, seed=16), (r(2, 3, 32, seed=17),)),
]
