"""aten._softmax / aten._log_softmax: every dim (negative too), rows longer than the
workgroup, large magnitudes (stability), dynamic sequence length."""

import torch
from torch.export import Dim

from op_harness import OpCase


class Softmax(torch.nn.Module):
    def __init__(self, dim, log=False):
        super().__init__()
        self.dim, self.log = dim, log

    def forward(self, x):
        return torch.log_softmax(x, self.dim) if self.log else torch.softmax(x, self.dim)


def r(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


seq = Dim("seq", min=1, max=23)

CASES = [
    OpCase("softmax-last", Softmax(-1), (r(3, 5, 7),)),
    OpCase("softmax-middle-neg", Softmax(-2), (r(3, 5, 7, seed=1),)),
    OpCase("softmax-first", Softmax(0), (r(11, 3, 2, seed=2),)),
    OpCase("softmax-4d-dim2", Softmax(2), (r(2, 3, 13, 5, seed=3),)),
    OpCase("softmax-1d-prime-long", Softmax(0), (r(997, seed=4, scale=3.0),)),
    OpCase("softmax-large-values", Softmax(-1), (r(4, 300, seed=5, scale=100.0),)),
    OpCase("softmax-length-1", Softmax(1), (r(5, 1, 3, seed=6),)),
    OpCase("log-softmax-last", Softmax(-1, log=True), (r(6, 29, seed=7, scale=10.0),)),
    OpCase("log-softmax-first", Softmax(0, log=True), (r(17, 4, seed=8),)),
    OpCase(
        "softmax-dynamic-seq",
        Softmax(-1),
        (r(1, 4, 9, 9, seed=9),),
        more_runs=[(r(1, 4, 1, 1, seed=10),), (r(1, 4, 23, 23, seed=11),)],
        dynamic_shapes=({2: seq, 3: seq},),
    ),
]
