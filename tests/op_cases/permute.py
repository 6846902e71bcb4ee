"""permute_copy: transposes, negative dims, 4-d attention-style reshuffles, 6 dims, dynamic sizes."""

import torch
from torch.export import Dim

from op_harness import OpCase


def r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Permute(torch.nn.Module):
    def __init__(self, *dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return x.permute(*self.dims) * 1.0  # the mul keeps the op inside the graph


class Transpose(torch.nn.Module):
    def __init__(self, a, b):
        super().__init__()
        self.a, self.b = a, b

    def forward(self, x):
        return x.transpose(self.a, self.b) * 1.0


CASES = [
    OpCase("permute-2d", Permute(1, 0), (r(13, 7),)),
    OpCase("permute-3d-rotate", Permute(2, 0, 1), (r(3, 5, 7),)),
    OpCase("permute-neg-dims", Permute(-1, -3, -2), (r(2, 11, 3),)),
    OpCase("permute-heads", Permute(0, 2, 1, 3), (r(1, 5, 3, 8),)),
    OpCase("permute-4d-reverse", Permute(3, 2, 1, 0), (r(2, 3, 5, 7),)),
    OpCase("permute-6d", Permute(5, 0, 4, 2, 1, 3), (r(2, 3, 1, 2, 5, 3),)),
    OpCase("transpose-neg", Transpose(-1, 0), (r(3, 4, 17),)),
    OpCase(
        "permute-dynamic",
        Permute(0, 2, 1, 3),
        (r(1, 6, 3, 4),),
        more_runs=[(r(1, 1, 3, 4, seed=1),), (r(1, 13, 3, 4, seed=2),)],
        dynamic_shapes=({1: Dim("seq", min=1, max=13)},),
    ),
]
