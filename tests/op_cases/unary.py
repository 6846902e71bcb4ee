"""aten.sigmoid (and the other unary kernels' ops): large magnitudes, odd sizes."""

import torch

from op_harness import OpCase


class Unary(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def wide(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 30


CASES = [
    OpCase("sigmoid-wide-range", Unary(torch.sigmoid), (wide(3, 37),)),
    OpCase("sigmoid-1", Unary(torch.sigmoid), (wide(1),)),
    OpCase("sigmoid-4d", Unary(torch.sigmoid), (wide(2, 3, 5, 7),)),
]
