"""aten.sigmoid (and the other unary kernels' ops): large magnitudes, odd sizes; and the
runtime's silu · mul fusion (sigmoid, mul, mul as torch exports the Llama MLP's gate)."""

import torch
from torch.export import Dim

from op_harness import OpCase


class Unary(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def wide(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 30


class SiluGate(torch.nn.Module):
    """silu(x) * y spelled as the Llama export has it; `order` permutes the mul operands."""

    def __init__(self, order="x*s*y"):
        super().__init__()
        self.order = order

    def forward(self, x, y):
        s = torch.sigmoid(x)
        if self.order == "x*s*y":
            return x * s * y
        return y * (s * x)  # "y*(s*x)"


class SiluGateReused(torch.nn.Module):
    """x * sigmoid(x) is read twice: the runtime must leave it unfused."""

    def forward(self, x, y):
        t = x * torch.sigmoid(x)
        return t * y + t


FUSED = "silu_mul (fused)"
seq = Dim("seq", min=1, max=19)

CASES = [
    OpCase("sigmoid-wide-range", Unary(torch.sigmoid), (wide(3, 37),)),
    OpCase("sigmoid-1", Unary(torch.sigmoid), (wide(1),)),
    OpCase("sigmoid-4d", Unary(torch.sigmoid), (wide(2, 3, 5, 7),)),
    OpCase("silu-mul-fused", SiluGate(), (wide(3, 37), wide(3, 37, seed=1)), expect_ops=(FUSED,), expect_no_ops=("aten.sigmoid.default",)),
    OpCase("silu-mul-fused-operands-swapped", SiluGate("y*(s*x)"), (wide(5, 11), wide(5, 11, seed=1)), expect_ops=(FUSED,)),
    OpCase(
        "silu-mul-fused-dynamic-seq",
        SiluGate(),
        (wide(1, 7, 48), wide(1, 7, 48, seed=1)),
        more_runs=[(wide(1, 1, 48, seed=2), wide(1, 1, 48, seed=3)), (wide(1, 19, 48, seed=4), wide(1, 19, 48, seed=5))],
        dynamic_shapes=({1: seq}, {1: seq}),
        expect_ops=(FUSED,),
    ),
    OpCase("silu-mul-broadcast-unfused", SiluGate(), (wide(3, 37), wide(37, seed=1)), expect_no_ops=(FUSED,)),
    OpCase("silu-mul-reused-unfused", SiluGateReused(), (wide(4, 9), wide(4, 9, seed=1)), expect_no_ops=(FUSED,)),
]
