"""aten.add/sub/mul/div.Tensor: broadcasting, odd and prime sizes, scalars, alpha, dynamic sizes."""

import torch
from torch.export import Dim

from op_harness import OpCase


class Binary(torch.nn.Module):
    def __init__(self, op, alpha=None):
        super().__init__()
        self.op, self.alpha = op, alpha

    def forward(self, a, b):
        if self.alpha is not None:
            return getattr(torch, self.op)(a, b, alpha=self.alpha)
        return getattr(torch, self.op)(a, b)


class WithConstant(torch.nn.Module):
    """A tensor-scalar op: the scalar becomes a 0-d constant tensor in the graph."""

    def forward(self, a):
        return a * 2.5 + 1.0


class ArgumentsUsedOutOfOrder(torch.nn.Module):
    """The graph lists inputs in order of first use (b before a here); the runtime must
    still take them in the method's argument order."""

    def forward(self, a, b):
        doubled = b * 2.0
        return doubled + a[0], a - 1.0


def r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def positive(*shape, seed=1):
    return r(*shape, seed=seed).abs() + 0.5


seq = Dim("seq", min=1, max=17)

CASES = [
    OpCase("add-same-7", Binary("add"), (r(7), r(7, seed=1))),
    OpCase("add-bcast-rows", Binary("add"), (r(3, 13), r(13, seed=1))),
    OpCase("add-alpha", Binary("add", alpha=0.5), (r(5, 11), r(5, 11, seed=1))),
    OpCase("sub-bcast-3d", Binary("sub"), (r(2, 1, 7), r(5, 1, seed=1))),
    OpCase("sub-alpha-neg", Binary("sub", alpha=-2), (r(31), r(1, seed=1))),
    OpCase("mul-bcast-cols", Binary("mul"), (r(17, 3), r(17, 1, seed=1))),
    OpCase("mul-4d", Binary("mul"), (r(2, 3, 5, 7), r(1, 3, 1, 7, seed=1))),
    OpCase("div-same", Binary("div"), (r(19, 23), positive(19, 23))),
    OpCase("div-bcast", Binary("div"), (r(4, 29), positive(29))),
    OpCase("scalar-constants", WithConstant(), (r(6, 5),)),
    OpCase("args-used-out-of-order", ArgumentsUsedOutOfOrder(), (r(3, 7), r(7, seed=1))),
    OpCase(
        "add-dynamic-seq",
        Binary("add"),
        (r(1, 9, 16), r(16, seed=1)),
        more_runs=[(r(1, 1, 16, seed=2), r(16, seed=3)), (r(1, 17, 16, seed=4), r(16, seed=5))],
        dynamic_shapes=({1: seq}, None),
    ),
]
