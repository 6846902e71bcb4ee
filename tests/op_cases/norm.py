"""et_vk.rms_norm (fused from Llama's RMSNorm): odd and prime widths, widths above the
workgroup size, several eps values, many rows, dynamic sequence length; each case with the
kernels for CPU adapters and with those for GPUs."""

import torch
from torch.export import Dim

from op_harness import OpCase, in_both_kernel_sets


class RMSNorm(torch.nn.Module):
    """Llama's RMSNorm (examples/models/llama/norm.py) without its float32 casts, which
    export drops for float32 inputs anyway, so the float64 reference stays float64."""

    def __init__(self, width, eps, seed=0):
        super().__init__()
        self.eps = eps
        generator = torch.Generator().manual_seed(seed)
        self.weight = torch.nn.Parameter(1.0 + 0.5 * torch.randn(width, generator=generator))

    def forward(self, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


def r(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


seq = Dim("seq", min=1, max=19)

NORM_CASES = [
    OpCase("rms-norm-37", RMSNorm(37, 1e-5), (r(1, 5, 37),)),
    OpCase("rms-norm-1-wide", RMSNorm(2048, 1e-6), (r(1, 1, 2048, scale=4.0),)),
    OpCase("rms-norm-prime-257", RMSNorm(257, 1e-6, seed=1), (r(3, 7, 257, seed=1),)),
    OpCase("rms-norm-2d-tiny-values", RMSNorm(64, 1e-2, seed=2), (r(13, 64, seed=2, scale=1e-2),)),
    OpCase("rms-norm-width-1", RMSNorm(1, 1e-5, seed=3), (r(6, 1, seed=3),)),
    OpCase(
        "rms-norm-dynamic-seq",
        RMSNorm(96, 1e-5, seed=4),
        (r(1, 7, 96, seed=4),),
        more_runs=[(r(1, 1, 96, seed=5),), (r(1, 19, 96, seed=6),), (r(1, 2, 96, seed=7),)],
        dynamic_shapes=({1: seq},),
    ),
]

CASES = [both for case in NORM_CASES for both in in_both_kernel_sets(case)]
