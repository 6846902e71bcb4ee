"""view_copy (with dynamic sizes), clone, squeeze/unsqueeze, _to_copy."""

import torch
from torch.export import Dim

from op_harness import OpCase


def r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class View(torch.nn.Module):
    def __init__(self, *shape):
        super().__init__()
        self.shape = shape

    def forward(self, x):
        return (x * 1.0).view(*self.shape)  # the mul keeps the view inside the graph


class DynamicView(torch.nn.Module):
    """[1, S, 4*8] → [1, S, 4, 8] with S symbolic: sizes come from sym_size at run time."""

    def forward(self, x):
        return (x + 1.0).view(1, x.shape[1], 4, 8)


class Clone(torch.nn.Module):
    def forward(self, x):
        return torch.sigmoid(x).clone() + 0.0


class SqueezeUnsqueeze(torch.nn.Module):
    def forward(self, x):
        y = torch.sigmoid(x)
        return y.unsqueeze(-1).unsqueeze(0), y.unsqueeze(1).squeeze(1), (y.unsqueeze(2) * 2.0).squeeze(-1)


class ToCopy(torch.nn.Module):
    def forward(self, x):
        return (x * 2.0).to(torch.float32, copy=True)


CASES = [
    OpCase("view-flatten", View(-1), (r(3, 5, 7),)),
    OpCase("view-split", View(5, 3, 7), (r(15, 7),)),
    OpCase(
        "view-dynamic",
        DynamicView(),
        (r(1, 6, 32),),
        more_runs=[(r(1, 1, 32, seed=1),), (r(1, 11, 32, seed=2),)],
        dynamic_shapes=({1: Dim("seq", min=1, max=11)},),
    ),
    OpCase("clone", Clone(), (r(13, 3),)),
    OpCase("squeeze-unsqueeze", SqueezeUnsqueeze(), (r(3, 5),)),
    OpCase("to-copy", ToCopy(), (r(2, 9),)),
]
