"""Exact GGUF linears as the exporter writes them (issue 46): a symmetric 4-bit plane
(dequantize_affine + linear, which the Vulkan partitioner makes et_vk.linear_q4gsw), an
offset term linear(sum(view(x, [..., G, gs]), -1), C) with C f32 [N, G], and for the
2-plane types a second 4-bit plane added. The runtime folds the offset term into the
4-bit linear (runtime/fusion/offsets.py) and the second plane into a residual-fused
linear. Goldens: the same module in eager PyTorch in float64, i.e. x times the
dequantized weights plus C times x's group sums; the fused op lists hold no sum, f32
linear or add. N is a multiple of 4 but not of 8: with other N, ExecuTorch 1.5.1's
reference linear_q4gsw (run while lowering) fails on the scales it pads to 4 columns."""

import dataclasses

import torch
import torchao.quantization.quant_primitives  # noqa: F401  (registers torchao.dequantize_affine)
from torch.export import Dim

import executorch.backends.vulkan.custom_ops_lib  # noqa: F401  (registers et_vk ops)
from op_cases.norm import RMSNorm
from op_harness import OpCase, in_both_kernel_sets, without_subgroups

OFFSETS_FUSED = "linear_q4gsw + offsets (fused)"
RESIDUAL_OFFSETS_FUSED = "linear_q4gsw + add + offsets (fused)"
UNFUSED = ("aten.sum.dim_IntList", "aten.linear.default", "aten.add.Tensor", "aten.view_copy.default")


def r(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


class ExactLinear(torch.nn.Module):
    """A GGUF linear of `planes` symmetric 4-bit planes (int4 values, f32 scale per group)
    plus offsets C [N, G] times x's group sums."""

    def __init__(self, k, n, group_size, planes=1, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        groups = k // group_size
        self.group_size = group_size
        for plane in range(planes):
            self.register_buffer(f"q{plane}", torch.randint(-8, 8, (n, k), dtype=torch.int8, generator=g))
            self.register_buffer(f"s{plane}", torch.rand(n, groups, generator=g) * 0.1 + 0.01)
        self.register_buffer("z", torch.zeros(n, groups, dtype=torch.int8))
        self.register_buffer("c", torch.randn(n, groups, generator=g) * 0.1)
        self.planes = planes

    def plane(self, x, i):
        q, scales = getattr(self, f"q{i}"), getattr(self, f"s{i}")
        if scales.dtype == torch.float32:  # the exported form, which the partitioner makes linear_q4gsw
            weight = torch.ops.torchao.dequantize_affine(q, [1, self.group_size], scales, self.z, torch.int8, -8, 7)
        else:  # the float64 golden: the weights dequantized by hand (torchao has no float64)
            weight = q.to(scales.dtype) * scales.repeat_interleave(self.group_size, dim=1)
        return torch.nn.functional.linear(x, weight)

    def forward(self, x):
        groups = x.shape[-1] // self.group_size
        y = self.plane(x, 0)
        y = y + torch.nn.functional.linear(x.view(*x.shape[:-1], groups, self.group_size).sum(-1), self.c)
        for i in range(1, self.planes):
            y = y + self.plane(x, i)
        return y


class PlusResidual(torch.nn.Module):
    """h + linear(x): a Llama block's residual add."""

    def __init__(self, linear):
        super().__init__()
        self.linear = linear

    def forward(self, x, h):
        return h + self.linear(x)


class Qkv(torch.nn.Module):
    """Three exact linears of one x (attention's projections)."""

    def __init__(self, k, widths, group_size, seed):
        super().__init__()
        self.linears = torch.nn.ModuleList(ExactLinear(k, n, group_size, seed=seed + i) for i, n in enumerate(widths))

    def forward(self, x):
        return tuple(linear(x) for linear in self.linears)


class Mlp(torch.nn.Module):
    """h + down(silu(gate(x)) * up(x)), exact linears."""

    def __init__(self, dim, hidden, group_size, seed):
        super().__init__()
        self.gate = ExactLinear(dim, hidden, group_size, seed=seed)
        self.up = ExactLinear(dim, hidden, group_size, seed=seed + 1)
        self.down = ExactLinear(hidden, dim, group_size, seed=seed + 2)

    def forward(self, x):
        return x + self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))


class NormLinear(torch.nn.Module):
    def __init__(self, width, linear, seed):
        super().__init__()
        self.norm, self.linear = RMSNorm(width, 1e-5, seed=seed), linear

    def forward(self, x):
        return self.linear(self.norm(x))


seq = Dim("seq", min=1, max=72)


def exact(case_id, module, inputs, expect_ops=(OFFSETS_FUSED,), expect_no_ops=UNFUSED, **kwargs):
    """The case in both kernel sets, expecting `expect_ops` and none of the unfused ops."""
    case = OpCase(case_id, module, inputs, expect_ops=expect_ops, expect_no_ops=expect_no_ops, **kwargs)
    return in_both_kernel_sets(case)


def rows(k, *counts, seed=0):
    """Runs of x [1, M, K] for each M of `counts` (dynamic rows: decode M = 1, prefill more)."""
    return [(r(1, m, k, seed=seed + i),) for i, m in enumerate(counts)]


def dynamic(k, first, *more, seed=0):
    """Runs of `rows` with dynamic M; the first (the export's example) of more than one row."""
    runs = rows(k, first, *more, seed=seed)
    return {"inputs": runs[0], "more_runs": runs[1:], "dynamic_shapes": ({1: seq},)}


CASES = [
    # One plane (Q4_1-like), 3 groups: M = 1 (the GEMVs), 5, 19 and 72 (gemv_rows, the GEMMs).
    *exact("exact-q4-1plane", ExactLinear(96, 20, 32, seed=1), **dynamic(96, 5, 1, 19, 72, seed=2)),
    # Two planes (Q8_0-like): two dispatches, the first plane's linear (with the offsets) adding
    # the second's output as a residual; the second's output view stays (a view shares its
    # source's buffer: no dispatch).
    *exact(
        "exact-2planes", ExactLinear(128, 28, 64, planes=2, seed=3), expect_ops=(RESIDUAL_OFFSETS_FUSED,),
        expect_no_ops=UNFUSED[:-1], **dynamic(128, 7, 1, 40, seed=4),
    ),
    # Groups of 16 (gemv_rows one word a step, also for one row), 2-d x.
    *exact("exact-group16", ExactLinear(48, 12, 16, seed=5), (r(9, 48, seed=6),)),
    # Groups of 16 in decode and few rows (the GPUs' GEMVs), one and two planes (Q6_K).
    *exact("exact-group16-decode", ExactLinear(64, 20, 16, seed=31), **dynamic(64, 4, 1, 3, seed=32)),
    *exact(
        "exact-group16-2planes", ExactLinear(64, 20, 16, planes=2, seed=33), expect_ops=(RESIDUAL_OFFSETS_FUSED,),
        expect_no_ops=UNFUSED[:-1], **dynamic(64, 4, 1, 3, seed=34),
    ),
    # K past a GPU GEMV's stage of 2,048 values, groups of 96 straddling stages.
    *exact("exact-k2304-group96", ExactLinear(2304, 12, 96, seed=7), **dynamic(2304, 6, 1, seed=8)),
    # A Llama block's residual add moves into the linear with its offsets.
    *exact(
        "exact-residual", PlusResidual(ExactLinear(64, 12, 32, seed=9)), (r(1, 3, 64, seed=10), r(1, 3, 12, seed=11)),
        expect_ops=(RESIDUAL_OFFSETS_FUSED,),
    ),
    # q, k, v of one x: one concatenated linear with the offsets of each.
    *exact("exact-qkv", Qkv(64, (20, 12, 12), 32, seed=12), expect_ops=("linear_q4gsw x3 (fused)",), **dynamic(64, 9, 1, seed=13)),
    # The MLP: gate|up concatenated with offsets, silu · mul and the residual fused.
    *exact("exact-mlp", Mlp(64, 96, 32, seed=14), expect_ops=(), **dynamic(64, 11, 1, seed=15)),
    # An RMSNorm before an exact linear (the LM head's), one dispatch in decode.
    *exact("exact-norm", NormLinear(64, ExactLinear(64, 20, 32, seed=16), seed=17), expect_ops=(), **dynamic(64, 8, 1, seed=18)),
    # The norm applied by a GEMV that writes several outputs, in groups of 32 and of 16.
    *exact("exact-norm-qkv", NormLinear(64, Qkv(64, (20, 12, 12), 32, seed=41), seed=42), expect_ops=(), **dynamic(64, 8, 1, seed=43)),
    *exact("exact-norm-group16", NormLinear(64, ExactLinear(64, 20, 16, seed=44), seed=45), expect_ops=(), **dynamic(64, 8, 1, seed=46)),
    # Wider than a block of outputs (test_default_limits stores them by blocks): one plane,
    # and an RMSNorm then two planes (the exact bundled model's LM head).
    *exact("exact-wide", ExactLinear(64, 200, 32, seed=51), **dynamic(64, 5, 1, 72, seed=52)),
    *exact(
        "exact-norm-wide-2planes", NormLinear(64, ExactLinear(64, 200, 32, planes=2, seed=53), seed=54),
        expect_ops=(RESIDUAL_OFFSETS_FUSED,), expect_no_ops=UNFUSED[:-1], **dynamic(64, 6, 1, seed=55),
    ),
    # An LM head's width with the norm applied: gemv_coop4 on GPUs for 3 rows and 1 (72 words
    # a row: two words a lane, then a partial step), and its tail block.
    *[
        dataclasses.replace(case, expect_kernels=((0, "gemv_coop4"), (1, "gemv_coop4"))) if case.kernel_set == "gpu" else case
        for case in exact(
            "exact-norm-lm-head-width", NormLinear(576, ExactLinear(576, 16420, 32, seed=56), seed=57), expect_ops=(),
            **dynamic(576, 3, 1, seed=58),
        )
    ],
]
CASES.append(without_subgroups(dataclasses.replace(CASES[0], kernel_set="cpu")))
