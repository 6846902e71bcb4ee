"""select_copy.int, slice_copy.Tensor and index.Tensor: negative dims and indices, steps,
open and out-of-range slice bounds, odd and prime sizes, int32 index tensors, dynamic sizes."""

import torch
from torch.export import Dim

from op_harness import OpCase


def r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def ids(*values):
    return torch.tensor(values, dtype=torch.int64)


class Select(torch.nn.Module):
    def __init__(self, dim, index):
        super().__init__()
        self.dim, self.index = dim, index

    def forward(self, x):
        return x.select(self.dim, self.index) * 1.0  # the mul keeps the op inside the graph


class Slices(torch.nn.Module):
    """Several slices at once: steps, negative bounds, bounds beyond the size."""

    def forward(self, x):
        return x[1:, ::2] * 1.0, x[:, -4:-1, 3:] * 1.0, x[..., 2:100:3] * 1.0, x[:-1, 1::4, -2] * 1.0


class DropLast(torch.nn.Module):
    """A slice end computed from a dynamic size (x.shape[1] - 1 is a SymInt), open ends and
    a negative index on a dynamic dim."""

    def forward(self, x):
        return x[:, : x.shape[1] - 1] * 1.0, x[:, 1:] * 1.0, x[:, -1] * 1.0


class DynamicStep(torch.nn.Module):
    def forward(self, x):
        return x[:, 1::3] * 1.0


class Window(torch.nn.Module):
    """An end from a dynamic size, and an end from another input's size that may pass the
    end of x (clamped, as PyTorch does)."""

    def forward(self, x, y):
        return x[:, 1 : x.shape[1] - 1] * 1.0, x[:, : y.shape[0]] * 1.0


class IndexDim(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x, index):
        return x[(slice(None),) * self.dim + (index,)] * 1.0


class ConstantIndex(torch.nn.Module):
    def forward(self, x):
        return x[:, torch.tensor([4, 0, -1, 2])] * 1.0


class SlicedIndex(torch.nn.Module):
    """An int32 tensor sliced on the GPU (the copy kernel on int32 data) before indexing.
    `index` comes first: the delegate orders its inputs by first use."""

    def forward(self, index, x):
        return x[index[1::2]] * 1.0


# min=3: at 2 the slices would have size 1, which export specializes away.
seq = Dim("seq", min=3, max=19)

CASES = [
    OpCase("select-dim0", Select(0, 2), (r(5, 7),)),
    OpCase("select-neg-dim-neg-index", Select(-2, -3), (r(3, 11, 7),)),
    OpCase("select-last-dim", Select(2, 0), (r(2, 3, 13),)),
    OpCase("select-4d", Select(1, 4), (r(2, 5, 3, 7),)),
    OpCase("slice-steps-bounds", Slices(), (r(7, 13, 11),)),
    OpCase(
        "slice-dynamic",
        DropLast(),
        (r(3, 9, 5),),
        more_runs=[(r(3, 3, 5, seed=1),), (r(3, 19, 5, seed=2),), (r(3, 4, 5, seed=3),)],
        dynamic_shapes=({1: seq},),
    ),
    OpCase(
        "slice-dynamic-step",
        DynamicStep(),
        (r(2, 10, 3),),
        more_runs=[(r(2, 5, 3, seed=1),), (r(2, 19, 3, seed=2),), (r(2, 8, 3, seed=3),)],
        dynamic_shapes=({1: Dim("n", min=5, max=19)},),
    ),
    OpCase(
        "slice-dynamic-window",
        Window(),
        (r(2, 11, 3), r(5)),
        more_runs=[
            (r(2, 19, 3, seed=1), r(13, seed=2)),
            (r(2, 4, 3, seed=3), r(3, seed=4)),
            (r(2, 5, 3, seed=5), r(16, seed=6)),
        ],
        dynamic_shapes=({1: Dim("n", min=4, max=19)}, {0: Dim("m", min=2, max=16)}),
    ),
    OpCase("index-dim0", IndexDim(0), (r(7, 5), ids(0, -1, 3, 3, -7))),
    OpCase("index-dim1", IndexDim(1), (r(3, 11, 2), ids(10, -11, 5))),
    OpCase("index-last-dim", IndexDim(2), (r(2, 3, 13), ids(12, 0, -2, 7, 1, 6, 6))),
    OpCase("index-constant", ConstantIndex(), (r(3, 5),)),
    OpCase("index-sliced-int32", SlicedIndex(), (ids(0, -1, 5, 2, -9, 8, 3), r(9, 4))),
    OpCase(
        "index-dynamic",
        IndexDim(1),
        (r(3, 9, 4), ids(1, -2, 8, 0)),
        more_runs=[
            (r(3, 17, 4, seed=1), ids(16, -17, 3, 3, 3, 9, 0, 1, 2, 5, 4)),
            (r(3, 2, 4, seed=2), ids(-1)),
        ],
        dynamic_shapes=({1: Dim("n", min=2, max=17)}, {0: Dim("k", min=1, max=11)}),
    ),
]
