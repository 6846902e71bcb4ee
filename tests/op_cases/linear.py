"""4-bit group-quantized linears, quantized the way ExecuTorch's Llama exporter does it:
`-qmode 4w` = torchao IntxWeightOnlyConfig(int4, PerGroup(gs)) → et_vk.linear_q4gsw;
`-qmode 8da4w` = Int8DynamicActivationIntxWeightConfig(int4, PerGroup(gs)) →
torchao.choose_qparams_affine + et_vk.linear_dq8ca_q4gsw.

The goldens are the eager quantized modules in float32 (torchao's quantized tensors do not
run in float64). Shapes: the exporter needs K % 4 == 0 and, for now, N % 4 == 0 (with
N % 4 != 0 the Vulkan fusion pass crashes in et_vk.linear_q4gsw's reference impl: the
scales are padded to a multiple of 4 columns but the reference views them unpadded), so N
varies over multiples of 4 that are not multiples of 8 or of the 64-wide GEMM tile. M is
prime where it can be. With the kernels for GPUs up to 4 rows run a GEMV, more the tiled
GEMM; with those for CPU adapters one row runs `gemv`, more `gemv_rows` (blocks of 8 rows;
after the graph's upgrades, 16 from 64 rows on), as do single rows whose groups are not a
multiple of 32 values.
"""

import dataclasses

import torch
from torch.export import Dim
from torchao.quantization.granularity import PerGroup
from torchao.quantization.quant_api import (
    Int8DynamicActivationIntxWeightConfig,
    IntxWeightOnlyConfig,
    quantize_,
)

from op_cases.norm import RMSNorm
from op_harness import OpCase, in_both_kernel_sets, without_subgroups


def linear_4w(k, n, group_size=32, bias=False, seed=0):
    torch.manual_seed(seed)
    linear = torch.nn.Linear(k, n, bias=bias)
    quantize_(linear, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(group_size)))
    return linear


def linear_8da4w(k, n, group_size=32, bias=False, seed=0):
    torch.manual_seed(seed)
    linear = torch.nn.Linear(k, n, bias=bias)
    quantize_(
        linear, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(group_size))
    )
    return linear


def r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def rows_at_the_edges(k):
    """Rows whose quantization parameters hit the corner cases: all zero (scale = eps),
    all positive (zero point -128), all negative (zero point 127), one outlier."""
    spike = torch.zeros(k)
    spike[3] = 50.0
    return torch.stack([torch.zeros(k), r(k, seed=1).abs() + 0.1, -(r(k, seed=2).abs() + 0.1), spike, r(k, seed=3)])


def q4(case_id, module, inputs, **kwargs):
    return OpCase(case_id, module, inputs, reference_dtype=torch.float32, **kwargs)


def both_kernel_sets(case_id, module, inputs, **kwargs):
    """The case run with the kernels for CPU adapters and with those for GPUs."""
    return in_both_kernel_sets(q4(case_id, module, inputs, **kwargs))


def gpu_kernels(case_id, module, inputs, **kwargs):
    """The case run with the kernels for GPUs only (what only they do: split K)."""
    return q4(f"{case_id}-gpu", module, inputs, kernel_set="gpu", **kwargs)


class LinearPlusResidual(torch.nn.Module):
    """A Llama block's residual add of a linear's output: `linear(x) + residual` (or the
    operands swapped), which the runtime runs as one fused dispatch; with `reuse`, the
    linear's output is read again and must stay unfused."""

    def __init__(self, linear, swapped=False, reuse=False):
        super().__init__()
        self.linear, self.swapped, self.reuse = linear, swapped, reuse

    def forward(self, x, residual):
        y = self.linear(x)
        out = residual + y if self.swapped else y + residual
        return (out, y * 2.0) if self.reuse else out


class SharedInput(torch.nn.Module):
    """Linears that read one x, like attention's q, k and v projections: the runtime runs
    them as one dispatch (up to 3 at a time) writing each output to its own tensor."""

    def __init__(self, *linears):
        super().__init__()
        self.linears = torch.nn.ModuleList(linears)

    def forward(self, x):
        outputs = [linear(x) for linear in self.linears]
        # Readers of the first output before the other linears run, as RoPE reads q.
        return (outputs[0] * 2.0, *outputs[1:])


class Mlp(torch.nn.Module):
    """The Llama MLP, down(silu(gate(x)) * up(x)) (+ x): the runtime runs gate and up as
    one linear whose output the down projection reads as silu(gate) * up; with `reuse`,
    the gate's output is read again and only gate and up are fused."""

    def __init__(self, dim, hidden, bias=False, residual=True, reuse=False, down_group_size=32, seed=0):
        super().__init__()
        self.gate = linear_4w(dim, hidden, bias=bias, seed=seed)
        self.up = linear_4w(dim, hidden, bias=bias, seed=seed + 1)
        self.down = linear_4w(hidden, dim, group_size=down_group_size, seed=seed + 2)
        self.residual, self.reuse = residual, reuse

    def forward(self, x):
        gate = self.gate(x)
        out = self.down(torch.nn.functional.silu(gate) * self.up(x))
        out = out + x if self.residual else out
        return (out, gate + 1.0) if self.reuse else out


class NormThen(torch.nn.Module):
    """A Llama RMSNorm whose output only `block` (linears) reads: the runtime runs the
    norm and the linear as one op, one dispatch where the linear runs a GPU GEMV."""

    def __init__(self, width, block, eps=1e-5, seed=0):
        super().__init__()
        self.norm, self.block = RMSNorm(width, eps, seed=seed), block

    def forward(self, x):
        return self.block(self.norm(x))


RESIDUAL_FUSED = "linear_q4gsw + add (fused)"
# The Llama MLP by kernel set (runtime/fusion/): with the kernels for GPUs the down
# projection reads silu(gate) * up off the fused gate|up linear; with those for CPU
# adapters the fused gate|up linear writes silu(gate) * up, which the down projection
# reads as any x.
GATE_UP_SILU_FUSED = "linear_q4gsw gate|up + silu_mul (fused)"
MLP_FUSED = {
    "gpu": ("linear_q4gsw gate|up (fused)", "silu_mul + linear_q4gsw + add (fused)"),
    "cpu": (GATE_UP_SILU_FUSED, RESIDUAL_FUSED),
}
MLP_FUSED_NO_RESIDUAL = {
    "gpu": ("linear_q4gsw gate|up (fused)", "silu_mul + linear_q4gsw (fused)"),
    "cpu": (GATE_UP_SILU_FUSED, "et_vk.linear_q4gsw.default"),
}


def mlp_cases(case_id, module, inputs, fused=MLP_FUSED, expect_no_ops=(), **kwargs):
    """both_kernel_sets of an MLP, each expecting its set's ops (`fused`) and none of those
    only the other set makes, nor a silu · mul of its own."""
    cases = []
    for case in both_kernel_sets(case_id, module, inputs, **kwargs):
        ops = fused[case.kernel_set]
        others = [op for kernel_set, other in fused.items() if kernel_set != case.kernel_set for op in other]
        avoided = (*expect_no_ops, "silu_mul (fused)", *(op for op in others if op not in ops))
        cases.append(dataclasses.replace(case, expect_ops=ops, expect_no_ops=avoided))
    return cases

seq = Dim("seq", min=1, max=80)
long_seq = Dim("long_seq", min=1, max=136)
# Rows of x: not a multiple of gemv_rows' 8, one (gemv), more than 64.
DYNAMIC_SEQ = q4(
    "linear-q4gsw-dynamic-seq",
    linear_4w(128, 76, bias=True, seed=6),
    (r(1, 9, 128),),
    more_runs=[(r(1, 1, 128, seed=1),), (r(1, 80, 128, seed=2),), (r(1, 3, 128, seed=3),)],
    dynamic_shapes=({1: seq},),
)

MLP_ODD_HIDDEN = mlp_cases(
    "linear-q4gsw-mlp-hidden40",
    Mlp(64, 40, down_group_size=8, seed=23),
    (r(1, 3, 64, seed=13),),
    more_runs=[(r(1, 1, 64, seed=14),), (r(1, 70, 64, seed=15),)],
    dynamic_shapes=({1: seq},),
)


def upgraded(case_id, module, inputs, upgrade_before_run=0, expect_kernels=None, **kwargs):
    """The case run with the kernels for CPU adapters, the graph's upgrades built before
    run `upgrade_before_run` (GraphRuntime.build_upgrades, as a chat starts it after a reply
    in the browser): from linear.UPGRADE_MIN_M (64) rows of x on, gemv_rows' 16-row
    kernel (`gemv_rows16`; every run of 64 or more rows after the upgrade must run it,
    unless `expect_kernels` says otherwise)."""
    case = q4(f"{case_id}-upgraded-cpu", module, inputs, kernel_set="cpu", upgrade_before_run=upgrade_before_run, **kwargs)
    if expect_kernels is None:
        rows = [x.shape[:-1].numel() for x, *_ in case.runs]
        expect_kernels = tuple((run, "gemv_rows16") for run, m in enumerate(rows) if run >= upgrade_before_run and m >= 64)
    return dataclasses.replace(case, expect_kernels=expect_kernels)


# Rows of x before and after the upgrade: 70 (8-row kernel), 80 (16 rows: 5 blocks), 9 (8
# rows), one (gemv), 70 again (the shape state kept for 70 rows dropped by the upgrade).
UPGRADED_SEQ = upgraded(
    "linear-q4gsw-dynamic-seq",
    linear_4w(128, 76, bias=True, seed=50),
    (r(1, 70, 128, seed=50),),
    more_runs=[(r(1, 80, 128, seed=51),), (r(1, 9, 128, seed=52),), (r(1, 1, 128, seed=53),), (r(1, 70, 128, seed=54),)],
    dynamic_shapes=({1: seq},),
    upgrade_before_run=1,
    expect_kernels=((0, "gemv_rows"), (1, "gemv_rows16"), (2, "gemv_rows"), (3, "gemv"), (4, "gemv_rows16")),
    # Without subgroups single rows run gemv_rows too.
    expect_kernels_without_subgroups=((0, "gemv_rows"), (1, "gemv_rows16"), (2, "gemv_rows"), (3, "gemv_rows"), (4, "gemv_rows16")),
)

CASES = [
    # -qmode 4w: et_vk.linear_q4gsw
    *both_kernel_sets("linear-q4gsw-gemv-k64-n12", linear_4w(64, 12), (r(1, 64),)),
    *both_kernel_sets("linear-q4gsw-gemv-3rows-bias", linear_4w(96, 20, bias=True), (r(3, 96),)),
    # K / 8 = 72 words: several strides of gemv_coop's 32-thread team, the last one partial.
    *both_kernel_sets("linear-q4gsw-gemv-k576-bias", linear_4w(576, 44, bias=True, seed=7), (r(1, 2, 576),)),
    # N past linear.COOP4_MIN_N (an LM head's kernel on GPUs), not a multiple of its blocks.
    *both_kernel_sets("linear-q4gsw-gemv-wide-n16420", linear_4w(64, 16420, bias=True, seed=10), (r(1, 2, 64),)),
    *both_kernel_sets("linear-q4gsw-m7-bias", linear_4w(96, 20, bias=True, seed=1), (r(7, 96),)),
    *both_kernel_sets("linear-q4gsw-m67-n132", linear_4w(160, 132, seed=2), (r(67, 160),)),
    *both_kernel_sets("linear-q4gsw-gs8-k72", linear_4w(72, 44, group_size=8, seed=3), (r(2, 5, 72),)),
    # Groups smaller than gemv's chunks and gemv_rows' steps of 32 values (CPU adapters:
    # gemv_rows runs them a word per step, one row or more).
    *both_kernel_sets("linear-q4gsw-gs16-gemv-k80", linear_4w(80, 28, group_size=16, seed=39), (r(1, 80),)),
    *both_kernel_sets("linear-q4gsw-gs64-3d", linear_4w(192, 44, group_size=64, seed=4), (r(3, 5, 192),)),
    *both_kernel_sets("linear-q4gsw-gs128-gemv-bias", linear_4w(256, 36, group_size=128, bias=True, seed=5), (r(1, 1, 256),)),
    *both_kernel_sets("linear-q4gsw-gs128-m13", linear_4w(256, 36, group_size=128, seed=5), (r(1, 13, 256),)),
    *in_both_kernel_sets(DYNAMIC_SEQ),
    # Adapters without subgroups: gemv_rows loads every row's x itself, and runs single rows.
    without_subgroups(DYNAMIC_SEQ),
    # The residual add folded into the linear, decode and prefill shapes; not where the
    # residual broadcasts or the linear's output has another reader.
    *both_kernel_sets(
        "linear-q4gsw-residual-fused",
        LinearPlusResidual(linear_4w(96, 44, bias=True, seed=8)),
        (r(1, 5, 96), r(1, 5, 44, seed=1)),
        more_runs=[(r(1, 1, 96, seed=2), r(1, 1, 44, seed=3)), (r(1, 70, 96, seed=4), r(1, 70, 44, seed=5))],
        dynamic_shapes=({1: seq}, {1: seq}),
        expect_ops=(RESIDUAL_FUSED,),
        expect_no_ops=("aten.add.Tensor",),
    ),
    *both_kernel_sets(
        "linear-q4gsw-residual-swapped-fused",
        LinearPlusResidual(linear_4w(64, 20, seed=9), swapped=True),
        (r(3, 64), r(3, 20, seed=1)),
        expect_ops=(RESIDUAL_FUSED,),
    ),
    q4("linear-q4gsw-residual-broadcast-unfused", LinearPlusResidual(linear_4w(64, 20, seed=9)), (r(3, 64), r(20, seed=1)), expect_no_ops=(RESIDUAL_FUSED,)),
    q4(
        "linear-q4gsw-residual-reused-unfused",
        LinearPlusResidual(linear_4w(64, 20, seed=9), reuse=True),
        (r(3, 64), r(3, 20, seed=1)),
        expect_no_ops=(RESIDUAL_FUSED,),
    ),
    # Linears of one x as one dispatch: q/k/v-like widths (the first output's width not a
    # multiple of 8, so 4-output blocks straddle two outputs), decode and prefill rows.
    *both_kernel_sets(
        "linear-q4gsw-shared-input-x3",
        SharedInput(linear_4w(96, 36, seed=11), linear_4w(96, 12, seed=12), linear_4w(96, 20, seed=13)),
        (r(1, 5, 96),),
        more_runs=[(r(1, 1, 96, seed=1),), (r(1, 70, 96, seed=2),)],
        dynamic_shapes=({1: seq},),
        expect_ops=("linear_q4gsw x3 (fused)",),
        expect_no_ops=("et_vk.linear_q4gsw.default",),
    ),
    # Four linears: three fused, the fourth alone; biases concatenated too.
    *both_kernel_sets(
        "linear-q4gsw-shared-input-x4-bias",
        SharedInput(*(linear_4w(64, 20 + 8 * i, bias=True, seed=14 + i) for i in range(4))),
        (r(3, 64),),
        expect_ops=("linear_q4gsw x3 (fused)", "et_vk.linear_q4gsw.default"),
    ),
    *mlp_cases(
        "linear-q4gsw-mlp-fused",
        Mlp(64, 160, seed=20),
        (r(1, 5, 64),),
        more_runs=[(r(1, 1, 64, seed=1),), (r(1, 70, 64, seed=2),)],
        dynamic_shapes=({1: seq},),
        expect_no_ops=("aten.add.Tensor",),
    ),
    # A hidden width that is no multiple of 16: on CPU adapters the last quads of threads
    # computing silu(gate) * up are partial (threads past the gate's rows stay in them);
    # decode and prefill rows, and single rows through gemv_rows where there are no
    # subgroups.
    *MLP_ODD_HIDDEN,
    without_subgroups(MLP_ODD_HIDDEN[0]),
    *mlp_cases(
        "linear-q4gsw-mlp-bias-no-residual-fused",
        Mlp(96, 64, bias=True, residual=False, seed=21),
        (r(2, 96),),
        fused=MLP_FUSED_NO_RESIDUAL,
    ),
    q4(
        "linear-q4gsw-mlp-gate-reused",
        Mlp(64, 96, reuse=True, seed=22),
        (r(3, 64),),
        expect_ops=("linear_q4gsw x2 (fused)", "silu_mul (fused)"),
        expect_no_ops=MLP_FUSED["gpu"],
    ),
    # RMSNorm folded into the linear that reads it: decode rows (one dispatch with the GPU
    # kernels: up to 4 rows), prefill rows (the norm's dispatch, then the linear's).
    *both_kernel_sets(
        "linear-q4gsw-norm-then-linear",
        NormThen(96, linear_4w(96, 36, bias=True, seed=30), seed=30),
        (r(1, 3, 96, seed=3),),
        more_runs=[(r(1, 1, 96, seed=4),), (r(1, 70, 96, seed=5),)],
        dynamic_shapes=({1: seq},),
        expect_ops=("rms_norm + linear_q4gsw (fused)",),
        expect_no_ops=("et_vk.rms_norm.default",),
    ),
    *both_kernel_sets(
        "linear-q4gsw-norm-then-x3",
        NormThen(64, SharedInput(linear_4w(64, 36, seed=31), linear_4w(64, 12, seed=32), linear_4w(64, 20, seed=33)), eps=1e-6, seed=31),
        (r(1, 9, 64, seed=7),),
        more_runs=[(r(1, 1, 64, seed=6),)],
        dynamic_shapes=({1: seq},),
        expect_ops=("rms_norm + linear_q4gsw x3 (fused)",),
    ),
    *mlp_cases(
        "linear-q4gsw-norm-then-mlp",
        NormThen(64, Mlp(64, 160, residual=False, seed=34), seed=34),
        (r(1, 6, 64, seed=9),),
        more_runs=[(r(1, 1, 64, seed=8),)],
        dynamic_shapes=({1: seq},),
        fused={
            "gpu": ("rms_norm + linear_q4gsw gate|up (fused)", "silu_mul + linear_q4gsw (fused)"),
            "cpu": ("rms_norm + linear_q4gsw gate|up + silu_mul (fused)", "et_vk.linear_q4gsw.default"),
        },
    ),
    # q/k/v at a 3B's width: gemv_coop4 with the norm, three outputs and a partial tail
    # block.
    gpu_kernels(
        "linear-q4gsw-norm-then-x3-coop4",
        NormThen(64, SharedInput(linear_4w(64, 3072, seed=60), linear_4w(64, 1028, seed=61), linear_4w(64, 1028, seed=62)), seed=60),
        (r(1, 3, 64, seed=11),),
        more_runs=[(r(1, 1, 64, seed=12),)],
        dynamic_shapes=({1: seq},),
        expect_ops=("rms_norm + linear_q4gsw x3 (fused)",),
        expect_kernels=((0, "gemv_coop4"), (1, "gemv_coop4")),
    ),
    # An LM head's width: gemv_coop4 with the norm applied, and its tail block.
    *both_kernel_sets(
        "linear-q4gsw-norm-then-wide",
        NormThen(64, linear_4w(64, 16420, seed=35), seed=35),
        (r(1, 64, seed=10) * 3.0,),
        expect_ops=("rms_norm + linear_q4gsw (fused)",),
    ),
    # x rows longer than the GPU decode kernels stage at a time (2,048 values): several
    # stages, the last one partial, for each kernel and x transform.
    *both_kernel_sets("linear-q4gsw-gemv-k4160", linear_4w(4160, 24, seed=36), (r(1, 4160),)),
    *both_kernel_sets(
        "linear-q4gsw-norm-then-wide-k2080",
        NormThen(2080, linear_4w(2080, 16400, seed=37), seed=37),
        (r(1, 2080, seed=11),),
        expect_ops=("rms_norm + linear_q4gsw (fused)",),
    ),
    *mlp_cases("linear-q4gsw-mlp-hidden2112", Mlp(64, 2112, seed=38), (r(1, 1, 64, seed=12),)),
    # Prefill rows of a K long enough for gemm to split it (linear.gemm_plan): 1,056
    # values are 33 steps; at 9 rows a tile's 8 splits take 5 steps each, the seventh 3
    # and the eighth none; at 70 rows (2 row tiles) still 8; gemm_reduce then adds the
    # bias, the residual, or sends the outputs to their linears. Decode rows between.
    gpu_kernels(
        "linear-q4gsw-split-k-bias",
        linear_4w(1056, 76, bias=True, seed=40),
        (r(1, 9, 1056, seed=40),),
        more_runs=[(r(1, 1, 1056, seed=41),), (r(1, 70, 1056, seed=42),)],
        dynamic_shapes=({1: seq},),
    ),
    # The same split GEMM after the RMSNorm folded into it: the fused op asks for the
    # linear's split sums in the graph's scratch buffer (no other op here needs one).
    gpu_kernels(
        "linear-q4gsw-split-k-after-norm",
        NormThen(1056, linear_4w(1056, 76, seed=48), seed=48),
        (r(1, 9, 1056, seed=56),),
        more_runs=[(r(1, 1, 1056, seed=57),), (r(1, 70, 1056, seed=58),)],
        dynamic_shapes=({1: seq},),
        expect_ops=("rms_norm + linear_q4gsw (fused)",),
    ),
    gpu_kernels(
        "linear-q4gsw-split-k-residual",
        LinearPlusResidual(linear_4w(1056, 44, bias=True, seed=41)),
        (r(1, 5, 1056, seed=43), r(1, 5, 44, seed=44)),
        more_runs=[(r(1, 70, 1056, seed=45), r(1, 70, 44, seed=46))],
        dynamic_shapes=({1: seq}, {1: seq}),
        expect_ops=(RESIDUAL_FUSED,),
    ),
    gpu_kernels(
        "linear-q4gsw-split-k-shared-input-x3",
        SharedInput(linear_4w(1056, 36, seed=42), linear_4w(1056, 12, seed=43), linear_4w(1056, 20, seed=44)),
        (r(1, 70, 1056, seed=47),),
        expect_ops=("linear_q4gsw x3 (fused)",),
    ),
    # gemm_wide: at 70 rows 16,420 outputs are 129 x 1 wide tiles (linear.gemm_plan: from
    # GEMM_WIDE_MIN_WORKGROUPS), the last column's and the row's partial; K = 72 ends
    # within a step of 16. 9 rows (gemm: at most 64) and a decode row run the others.
    gpu_kernels(
        "linear-q4gsw-gemm-wide-bias",
        linear_4w(72, 16420, group_size=8, bias=True, seed=46),
        (r(1, 70, 72, seed=49),),
        more_runs=[(r(1, 9, 72, seed=50),), (r(1, 1, 72, seed=51),)],
        dynamic_shapes=({1: seq},),
    ),
    # gemm_wide with K split: 4,100 outputs are 33 wide tiles a row of them, too few, so
    # the 2,056 values of K (129 steps of 16, the last half full) go to 4 workgroups of 33
    # steps, the fourth's 29.5; at 130 rows 66 tiles, still 4 (partial rows and columns).
    # 9 rows run gemm (split 4), a decode row the GEMV.
    gpu_kernels(
        "linear-q4gsw-gemm-wide-split-k-bias",
        linear_4w(2056, 4100, group_size=8, bias=True, seed=47),
        (r(1, 70, 2056, seed=52),),
        more_runs=[(r(1, 130, 2056, seed=53),), (r(1, 9, 2056, seed=54),), (r(1, 1, 2056, seed=55),)],
        dynamic_shapes=({1: long_seq},),
    ),
    # The down projection reading silu(gate) * up over a hidden width of 1,056.
    gpu_kernels(
        "linear-q4gsw-split-k-mlp",
        Mlp(64, 1056, seed=45),
        (r(1, 70, 64, seed=48),),
        expect_ops=MLP_FUSED["gpu"],
    ),
    # gemv_rows' 16-row kernel (CPU adapters), built after the load.
    UPGRADED_SEQ,
    without_subgroups(UPGRADED_SEQ),
    # 131 rows: 9 blocks of 16, the last one of 3 rows; 1,100 outputs: two workgroups'
    # worth (1,024 outputs each), the second partial.
    upgraded("linear-q4gsw-m131-n1100", linear_4w(64, 1100, seed=51), (r(1, 131, 64, seed=55),)),
    # Groups of 16 values: steps of one word (STEP_WORDS 1).
    upgraded("linear-q4gsw-gs16-m77", linear_4w(80, 28, group_size=16, seed=52), (r(77, 80, seed=56),)),
    upgraded(
        "linear-q4gsw-residual-fused",
        LinearPlusResidual(linear_4w(96, 44, bias=True, seed=53)),
        (r(1, 66, 96, seed=57), r(1, 66, 44, seed=58)),
        expect_ops=(RESIDUAL_FUSED,),
    ),
    upgraded(
        "linear-q4gsw-norm-then-x3",
        NormThen(64, SharedInput(linear_4w(64, 36, seed=54), linear_4w(64, 12, seed=55), linear_4w(64, 20, seed=56)), seed=54),
        (r(1, 67, 64, seed=59),),
        expect_ops=("rms_norm + linear_q4gsw x3 (fused)",),
    ),
    # The MLP: gate|up writing silu(gate) * up (hidden 40: partial quads), the down
    # projection adding the residual.
    upgraded("linear-q4gsw-mlp", Mlp(64, 40, down_group_size=8, seed=57), (r(1, 72, 64, seed=60),), expect_ops=MLP_FUSED["cpu"]),
    upgraded("linear-dq8ca-m68", linear_8da4w(128, 44, bias=True, seed=58), (r(1, 68, 128, seed=61),)),
    # -qmode 8da4w: torchao.choose_qparams_affine + et_vk.linear_dq8ca_q4gsw
    *both_kernel_sets("linear-dq8ca-gemv-k64-n12", linear_8da4w(64, 12), (r(1, 64),)),
    *both_kernel_sets("linear-dq8ca-edge-rows-bias", linear_8da4w(64, 28, bias=True, seed=1), (rows_at_the_edges(64),)),
    *both_kernel_sets("linear-dq8ca-gs64-m67", linear_8da4w(192, 68, group_size=64, seed=2), (r(67, 192) * 3,)),
    *both_kernel_sets("linear-dq8ca-gs128-3d", linear_8da4w(256, 36, group_size=128, seed=3), (r(2, 7, 256),)),
    *both_kernel_sets(
        "linear-dq8ca-dynamic-seq",
        linear_8da4w(128, 44, bias=True, seed=4),
        (r(1, 7, 128),),
        more_runs=[(r(1, 1, 128, seed=1),), (r(1, 80, 128, seed=2),), (r(1, 2, 128, seed=3),)],
        dynamic_shapes=({1: seq},),
    ),
]
