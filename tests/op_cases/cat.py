"""cat: every dim (negative too), several inputs of different sizes along the dim, the same
tensor twice, int32 tensors, dynamic sizes."""

import torch
from torch.export import Dim

from op_harness import OpCase


def r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Cat(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, *xs):
        return torch.cat(xs, self.dim) * 1.0  # the mul keeps the op inside the graph


class CatSelf(torch.nn.Module):
    def forward(self, x):
        y = x * 2.0
        return torch.cat([y, x, y], 1)


class CatIndices(torch.nn.Module):
    """Two int64 index inputs (int32 on the GPU) joined, then used to index. The indices
    come first: the delegate orders its inputs by first use."""

    def forward(self, a, b, x):
        return x[torch.cat([a, b])] * 1.0


seq = Dim("seq", min=1, max=15)

CASES = [
    OpCase("cat-dim0", Cat(0), (r(3, 5), r(4, 5, seed=1))),
    OpCase("cat-dim1-three", Cat(1), (r(2, 3, 4), r(2, 7, 4, seed=1), r(2, 1, 4, seed=2))),
    OpCase("cat-neg-dim", Cat(-1), (r(3, 5), r(3, 2, seed=1))),
    OpCase("cat-neg-middle", Cat(-2), (r(2, 5, 3), r(2, 11, 3, seed=1))),
    OpCase("cat-4d-last", Cat(3), (r(1, 2, 3, 13), r(1, 2, 3, 1, seed=1), r(1, 2, 3, 4, seed=2))),
    OpCase("cat-same-tensor", CatSelf(), (r(3, 7),)),
    OpCase("cat-int32", CatIndices(), (torch.tensor([0, -1, 5]), torch.tensor([2, -9]), r(9, 4))),
    OpCase(
        "cat-dynamic",
        Cat(1),
        (r(1, 5, 8), r(1, 3, 8, seed=1)),
        more_runs=[(r(1, 1, 8, seed=2), r(1, 15, 8, seed=3)), (r(1, 15, 8, seed=4), r(1, 2, 8, seed=5))],
        dynamic_shapes=(({1: seq}, {1: Dim("new", min=1, max=15)}),),  # one spec: forward(*xs)
    ),
    OpCase(
        "cat-dynamic-other-dim",
        Cat(-1),
        (r(1, 5, 8), r(1, 5, 3, seed=1)),
        more_runs=[(r(1, 1, 8, seed=2), r(1, 1, 3, seed=3)), (r(1, 15, 8, seed=4), r(1, 15, 3, seed=5))],
        dynamic_shapes=(({1: seq}, {1: seq}),),
    ),
]
