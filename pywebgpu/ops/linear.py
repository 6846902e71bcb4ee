"""4-bit group-quantized linears (kernels: wgsl/linear_q4gsw.wgsl, with
wgsl/linear_q4gsw_quads.wgsl or wgsl/linear_q4gsw_no_quads.wgsl,
wgsl/dynamic_quant_int8.wgsl).

- `et_vk.linear_q4gsw(x, weights, scales, group_size, bias?)` (`-qmode 4w`): f32 x times
  symmetric 4-bit weights with one f32 scale per group of `group_size` input features.
- `torchao.choose_qparams_affine` + `et_vk.linear_dq8ca_q4gsw(x, x_scales, x_zero_points,
  weights, weight_sums, scales, group_size, bias?)` (`-qmode 8da4w`): the same weights,
  times activations quantized per row to int8 on the fly. Quantizing x and dequantizing
  it again before an f32 GEMM gives exactly what torchao's eager module computes; the
  integer-accumulation helper `weight_sums` is not needed for that and is left unread.

Weights stay packed on the GPU (see pte-format notes): W uint8 [N, K/2], low nibble first;
scales f32 transposed to [K / group_size, N padded to a multiple of 4]. x is [..., K] with
any live leading dims: M = their product. Few rows (decode) run a GEMV, more (prefill) a
GEMM; which kernels depends on the adapter kind (see choose_kernel).
"""

from __future__ import annotations

import numbers
import struct
from functools import cache

from ..gpu import STORAGE_USAGE, linear_grid
from ..kernels import QUAD_DIRECTIVES, load_wgsl
from ..values import Tensor, ValueList, numel
from .registry import OpHandler, pack_u32, register

# Mirrors of constants in the kernels.
PARAMS_BYTES = 48  # linear_q4gsw.wgsl's Params (11 u32), in whole 16-byte rows
GEMV_THREADS = 8  # threads per gemv workgroup (linear_q4gsw_quads.wgsl)
GEMV_OUTPUTS = 16  # outputs per gemv thread
# gemv reads weights in chunks of 4 words, gemv_rows in steps of 4 words, where group
# sizes are a multiple of this (else gemv_rows runs steps of one word: STEP_WORDS).
STEP_VALUES = 32
ROWS_THREADS = 64  # threads per gemv_rows workgroup (linear_q4gsw.wgsl)
ROWS_OUTPUTS = 16  # outputs of each row per gemv_rows thread
COOP_ROWS = 8  # outputs per gemv_coop workgroup, a team of threads each
COOP4_OUTPUTS_PER_WORKGROUP = 16  # gemv_coop4: 4 teams of threads, 4 outputs each
# From this many outputs on, gemv_coop4 fills a GPU and beats gemv_coop (the LM heads;
# H200: N = 49,152 and 128,256 1.3-1.4x faster, 8,192 about even, 2,048 and 512 slower).
COOP4_MIN_N = 16384
# The GEMV for CPU adapters (`gemv`) folds in an RMSNorm only up to this many outputs:
# each of its threads applies the norm to the whole row of x for its GEMV_OUTPUTS
# outputs, a cost that grows with N, where the norm's own dispatch costs a fixed one
# (SwiftShader, SmolLM2's decode: folded, q/k/v (N 960) 0.03 ms slower, about a
# dispatch; gate/up (3,072) 0.1 ms; the LM head (49,152) 1.8 ms; a decode step 1.05x
# faster with the last two unfolded). With 16 outputs a thread, gate/up folded is about
# even with unfolded (1.60 vs 1.65 ms natively): a norm dispatch saved per layer, against
# one more pipeline to compile at load; the LM head folded is still slower (32.8 vs 30.3).
GEMV_NORM_MAX_N = 1024
GEMM_TILE = 64  # output tile side of gemm (linear_q4gsw.wgsl)
GEMM_TILE_K = 32  # input features per step of gemm
GEMM_WIDE_TILE = 128  # of gemm_wide
GEMM_WIDE_TILE_K = 16
REDUCE_THREADS = 256  # threads per gemm_reduce workgroup
# The GEMMs split K over workgroups (k_splits) while their tiles alone make fewer than
# GEMM_TARGET_WORKGROUPS workgroups, up to GEMM_MAX_SPLITS, each split keeping its
# kernel's least number of steps: a tile's workgroup mostly waits on each step's loads,
# and a prefill of a few hundred rows has too few tiles to fill a large GPU
# (`gemm_reduce` adds a dispatch that sums the splits). gemm_plan then runs `gemm_wide`
# (128x128 tiles, twice the products per staged value) wherever its tiles and splits make
# GEMM_WIDE_MIN_WORKGROUPS workgroups, else `gemm` (64x64). H200 natively
# (`devtools.gemm_probe`), against `gemm` unsplit: the 1B's linears at 128 rows 1.15-2.9x
# faster, at 512 rows 1.0-1.55x; SmolLM2's at 128 rows 1.0-2.75x (gemm split; gemm_wide
# splits keep 512 values of K, which SmolLM2's 576 cannot give two of).
GEMM_TARGET_WORKGROUPS = 256
GEMM_MAX_SPLITS = 8
GEMM_MIN_SPLIT_STEPS = 4  # 128 values
GEMM_WIDE_MIN_SPLIT_STEPS = 32  # 512 values
GEMM_WIDE_MIN_WORKGROUPS = 128
QPARAMS_ROWS = 4  # rows per choose_qparams workgroup (dynamic_quant_int8.wgsl)
ELEMENTWISE_WORKGROUP = 256
# Kernels by adapter kind. CPU adapters (SwiftShader, lavapipe) run a workgroup's
# invocations one SIMD batch after another: shared memory and barriers only cost there,
# and threads walking their own weight rows are fastest: `gemv` (16 outputs each, x
# shared by quads) for one row of x, `gemv_rows` (16 outputs of GEMV_ROWS rows each, x
# shared by quads where the adapter has subgroups) for more, at any M (SwiftShader: 2x
# the tiled GEMM at 128 rows, 3x at 8), and for one row that gemv cannot take (no
# subgroups, or a group size that is not a multiple of STEP_VALUES). GPUs want
# coalesced weight reads: a team of threads per output (`gemv_coop`) or per 4 outputs
# (`gemv_coop4`, for large N) up to GPU_GEMV_MAX_ROWS rows of x, and above that the tiled
# GEMM gemm_plan picks (each GEMM, split or not, built only for the linears whose shapes
# can use it).
GEMV_ROWS = 8  # rows of x per gemv_rows thread (linear_q4gsw.wgsl's ROW_QUADS 2)
# The faster gemv_rows of 16 rows a thread (ROW_QUADS 4), which SwiftShader takes ~3.2 s
# to compile in Chromium (the 8-row kernel ~1.3, the longest step of a model's load), so
# it is built after the graph (build_upgrades), and runs from UPGRADE_MIN_M rows of x on:
# with fewer, half as many workgroups leave a core idle (SwiftShader natively, SmolLM2's
# linears against 8 rows: 0.5-0.7x at 16 rows, 0.88-0.93x at 40, 1.10-1.15x at 64,
# 1.17-1.24x at 511).
UPGRADE_ROWS = 16
UPGRADE_MIN_M = 64
# Kernels built as another kernel's entry point with its overrides set.
KERNEL_VARIANTS = {"gemv_rows16": ("gemv_rows", {"ROW_QUADS": UPGRADE_ROWS // 4})}
# Up to this many rows of x, reading the weights once per row (GEMV) beats the tiled GEMM.
GPU_GEMV_MAX_ROWS = 4
# The entry points each kind of adapter runs: only those are built (the kind is fixed at
# load), since every pipeline costs load time (SwiftShader compiles them on the CPU).
KERNELS_BY_SET = {"cpu": ("gemv", "gemv_rows"), "gpu": ("gemv_coop", "gemv_coop4")}
# The linears' module: linear_q4gsw.wgsl, and with subgroups linear_q4gsw_quads.wgsl
# (gemv, and gemv_rows' x shared by quads) behind QUAD_DIRECTIVES, else
# linear_q4gsw_no_quads.wgsl.
# The divisibility the kernels rely on: a u32 word of 8 nibbles never straddles a group.
WORD_VALUES = 8
INT8_MIN, INT8_MAX = -128, 127
# torchao's default eps for float32 inputs: torch.finfo(torch.float32).smallest_normal.
F32_SMALLEST_NORMAL = 2.0**-126


def pack_params(
    m, n, k, weight_row_words, scale_stride, group_size, split0, split1, residual: bool, silu_mul_out: bool = False,
    k_splits: int = 1,
) -> bytes:
    """linear_q4gsw.wgsl's Params, padded to PARAMS_BYTES (the ops here, and the probes in
    devtools/ that dispatch the kernels themselves)."""
    values = pack_u32(
        m, n, k, weight_row_words, scale_stride, group_size, split0, split1, int(residual), int(silu_mul_out), k_splits
    )
    return values.ljust(PARAMS_BYTES, b"\0")


def gemm_tiles(m: int, n: int, tile: int = GEMM_TILE) -> int:
    """The tiles of side `tile` of an [M, N] output."""
    return -(-n // tile) * -(-m // tile)


def k_splits(tiles: int, k: int, step: int, min_split_steps: int) -> int:
    """How many workgroups share the K of each of `tiles` tiles (a power of two; see
    GEMM_TARGET_WORKGROUPS), each keeping at least `min_split_steps` steps of `step`."""
    steps = -(-k // step)
    splits = 1
    while splits < GEMM_MAX_SPLITS and tiles * splits < GEMM_TARGET_WORKGROUPS and steps >= 2 * splits * min_split_steps:
        splits *= 2
    return splits


def gemm_plan(m: int, n: int, k: int) -> tuple[str, int]:
    """The GPUs' prefill GEMM for an [M, K] x [K, N] product: (kernel, workgroups along K
    per tile); see GEMM_WIDE_MIN_WORKGROUPS. Up to 64 rows, gemm: gemm_wide's tiles would
    compute twice the rows."""
    wide_tiles = gemm_tiles(m, n, GEMM_WIDE_TILE)
    wide_splits = k_splits(wide_tiles, k, GEMM_WIDE_TILE_K, GEMM_WIDE_MIN_SPLIT_STEPS)
    if m > GEMM_TILE and wide_tiles * wide_splits >= GEMM_WIDE_MIN_WORKGROUPS:
        return "gemm_wide", wide_splits
    return "gemm", k_splits(gemm_tiles(m, n), k, GEMM_TILE_K, GEMM_MIN_SPLIT_STEPS)


@cache
def linear_source(subgroups: bool) -> str:
    """The WGSL module of the linears' kernels for an adapter with or without subgroups
    (one string object each: Device.compute_pipeline keys its cache by the source)."""
    if subgroups:
        return QUAD_DIRECTIVES + load_wgsl("linear_q4gsw") + load_wgsl("linear_q4gsw_quads")
    return load_wgsl("linear_q4gsw") + load_wgsl("linear_q4gsw_no_quads")


class LinearQ4gsw(OpHandler):
    """Base of the 4-bit linears: parses the weight arguments, runs GEMV or GEMM on
    `self.gemm_input` (x itself, or a dequantized copy made by a subclass)."""

    RESIZED = ("grid", "k_splits", "kernel", "m", "reduce_grid")

    # With X_SILU_MUL (runtime/fusion.py) x rows hold a gate and an up projection, 2K
    # values, and the linear reads silu(gate) * up.
    x_silu_mul = False
    # With silu_mul_out (LinearQ4gswConcat of a gate and an up projection, for the kernels
    # for CPU adapters) the linear writes silu(gate) * up, N / 2 values a row.
    silu_mul_out = False

    def parse_weights(self, weights: int, scales: int, group_size: int, bias: int):
        self.x, self.out = self.tensor(0), self.tensor(len(self.args) - 1)
        self.outputs = [self.out]
        self.weights, self.scales = self.tensor(weights), self.tensor(scales)
        self.bias = self.optional_tensor(bias)
        self.group_size = self.int_arg(group_size)
        for tensor in (self.x, self.out, self.scales, self.bias):
            if tensor is not None and tensor.dtype != "float32":
                self.fail(f"{tensor.label} is {tensor.dtype}; only float32 is supported")
        if self.weights.dtype != "uint8" or len(self.weights.max_sizes) != 2:
            self.fail(f"weights {self.weights.label} should be uint8 [N, K/2], got {self.weights.dtype}{list(self.weights.max_sizes)}")
        if len(self.scales.max_sizes) != 2:
            self.fail(f"scales {self.scales.label} should be 2-d [K/group_size, N], got {list(self.scales.max_sizes)}")
        if not self.x.max_sizes:
            self.fail("x is 0-d")
        self.k = self.x.max_sizes[-1] // 2 if self.x_silu_mul else self.x.max_sizes[-1]
        self.n = self.out.max_sizes[-1]
        n_rows, row_bytes = self.weights.max_sizes
        groups, scale_stride = self.scales.max_sizes
        if self.group_size <= 0 or self.group_size % WORD_VALUES or self.k % self.group_size:
            self.fail(f"group size {self.group_size} must be a positive multiple of {WORD_VALUES} dividing K={self.k}")
        if n_rows < self.n or 2 * row_bytes < self.k or row_bytes % 4:
            self.fail(f"weights {list(self.weights.max_sizes)} do not hold N={self.n} rows of K={self.k} word-aligned 4-bit values")
        if groups < self.k // self.group_size or scale_stride < self.n:
            self.fail(f"scales {list(self.scales.max_sizes)} do not cover {self.k // self.group_size} groups x N={self.n}")
        if self.bias is not None and numel(self.bias.max_sizes) < self.n:
            self.fail(f"bias {self.bias.label} has fewer than N={self.n} values")
        self.weight_row_words = row_bytes // 4
        self.scale_stride = scale_stride

    @property
    def gemm_input(self):
        return self.x.buffer

    residual = None  # a tensor added to the output (LinearQ4gswResidual)

    def max_rows(self) -> int:
        """The most rows of x (M) any live size can have."""
        return numel(self.x.max_sizes[:-1])

    def gemm_plans(self):
        """(M, gemm_plan) for the row counts of x that stand for all those a GPU runs a GEMM
        for: M changes the plan only through its rows of tiles, so the most rows of each
        row of 64x64 tiles (two make a row of 128x128 ones) stand for the rest, and need
        the most scratch of them."""
        if self.kernel_set != "gpu":
            return
        most = self.max_rows()
        for end in range(GEMM_TILE, most + GEMM_TILE, GEMM_TILE):
            m = min(end, most)
            if m > GPU_GEMV_MAX_ROWS:
                yield m, gemm_plan(m, self.n, self.k)

    def scratch_bytes(self) -> int:
        """The split-K GEMMs' sums (one per split and output) at the worst M."""
        return max((4 * splits * m * self.n for m, (_, splits) in self.gemm_plans() if splits > 1), default=0)

    def packed_buffers(self):
        """The buffers of the packed weights, the scales and the bias (None if none);
        build() calls it once."""
        return self.weights.buffer, self.scales.buffer, self.bias.buffer if self.bias is not None else None

    async def build(self):
        self.params = self.params_buffer(PARAMS_BYTES)
        self.packed = self.packed_buffers()
        kernels = KERNELS_BY_SET[self.kernel_set]
        if "subgroups" not in self.graph.device.features or self.group_size % STEP_VALUES:
            kernels = [kernel for kernel in kernels if kernel != "gemv"]
        self.kernels = {kernel: await self.make_kernel(kernel) for kernel in kernels}
        for kernel, splits in sorted({plan for _, plan in self.gemm_plans()}):
            if splits == 1:
                self.kernels[kernel] = await self.make_kernel(kernel)
                continue
            # Split K: the GEMM writes its splits' sums to the graph's scratch buffer, which
            # gemm_reduce reads in x's slot (see linear_q4gsw.wgsl).
            if f"{kernel}_split" not in self.kernels:
                self.kernels[f"{kernel}_split"] = await self.make_kernel(kernel, out=self.graph.scratch)
            if "gemm_reduce" not in self.kernels:
                self.kernels["gemm_reduce"] = await self.make_kernel("gemm_reduce", x=self.graph.scratch)

    async def build_upgrades(self) -> bool:
        if self.kernel_set != "cpu" or self.max_rows() < UPGRADE_MIN_M:
            return False
        self.kernels["gemv_rows16"] = await self.make_kernel("gemv_rows16")
        return True

    async def make_kernel(self, kernel: str, norm=None, out=None, x=None):
        """The pipeline and bind group of entry point `kernel` (or of a KERNEL_VARIANTS
        entry); with `norm` (an RmsNorm handler whose output is x), one that reads the
        norm's input and applies it (X_RMS_NORM: the GEMVs, gemv_coop, gemv_coop4 and
        gemv). `out`, `x`: buffers bound in those slots instead (split K's scratch);
        gemm_reduce binds no weights."""
        entry_point, variant_constants = KERNEL_VARIANTS.get(kernel, (kernel, {}))
        constants = {
            **variant_constants,
            "HAS_BIAS": self.bias is not None,
            "X_SILU_MUL": self.x_silu_mul,
            "X_RMS_NORM": norm is not None,
            "RMS_EPS": norm.eps if norm is not None else 0.0,
            "STEP_WORDS": 1 if self.group_size % STEP_VALUES else 4,
        }
        if kernel == "gemv":  # the others read the parameter (see linear_q4gsw.wgsl)
            constants["OUT_SILU_MUL"] = self.silu_mul_out
        weights, scales, bias = self.packed
        # Slots of absent operands: any read-only buffer of this dispatch for the bias and
        # the side operand (residual or norm weight: never both), the graph's spare
        # buffers for unused outputs.
        outputs = [tensor.buffer for tensor in self.outputs] + list(self.graph.spare_buffers)
        side = self.residual if self.residual is not None else norm.weight if norm is not None else None
        buffers = {
            0: out or outputs[0],
            1: x or (norm.src.buffer if norm is not None else self.gemm_input),
            2: weights,
            3: scales,
            4: bias or scales,
            5: self.params,
            6: side.buffer if side is not None else scales,
            7: outputs[1],
            8: outputs[2],
        }
        if kernel == "gemm_reduce":
            del buffers[2], buffers[3]
        device = self.graph.device
        source = linear_source("subgroups" in device.features)
        pipeline = await device.compute_pipeline(source, label=f"linear_q4gsw#{self.index}", entry_point=entry_point, constants=constants)
        return pipeline, device.bind_group(pipeline, buffers)

    def resize(self):
        x_features = 2 * self.k if self.x_silu_mul else self.k
        if self.x.sizes[-1] != x_features:
            self.fail(f"x has {self.x.sizes[-1]} input features, the weights {x_features}")
        self.m = numel(self.x.sizes[:-1])
        splits = self.set_output_sizes()
        self.kernel, self.k_splits = self.choose_kernel(self.kernel_set)
        self.write_params(
            self.params,
            pack_params(
                self.m, self.n, self.k, self.weight_row_words, self.scale_stride, self.group_size, *splits,
                self.residual is not None, self.silu_mul_out, self.k_splits,
            ),
        )
        if self.kernel == "gemv":
            self.grid = (*linear_grid(-(-self.n // (GEMV_THREADS * GEMV_OUTPUTS)), 1), self.m)
        elif self.kernel in ("gemv_rows", "gemv_rows16"):
            rows = UPGRADE_ROWS if self.kernel == "gemv_rows16" else GEMV_ROWS
            self.grid = (*linear_grid(-(-self.n // (ROWS_THREADS * ROWS_OUTPUTS)), 1), -(-self.m // rows))
        elif self.kernel == "gemv_coop":
            self.grid = (*linear_grid(-(-self.n // COOP_ROWS), 1), self.m)
        elif self.kernel == "gemv_coop4":
            self.grid = (*linear_grid(-(-self.n // COOP4_OUTPUTS_PER_WORKGROUP), 1), self.m)
        else:
            tile = GEMM_WIDE_TILE if self.kernel == "gemm_wide" else GEMM_TILE
            self.grid = (-(-self.n // tile), -(-self.m // tile), self.k_splits)
            self.reduce_grid = linear_grid(self.m * self.n, REDUCE_THREADS)

    def set_output_sizes(self) -> tuple[int, int]:
        """Set the outputs' live sizes; returns the kernel's (split0, split1): all N
        outputs go to `out`."""
        self.set_sizes(self.out, (*self.x.sizes[:-1], self.n))
        return self.n, self.n

    def choose_kernel(self, adapter_kind: str) -> tuple[str, int]:
        """(kernel, workgroups along K per tile: 1 but for a split GEMM)."""
        if adapter_kind == "cpu":
            if self.m == 1 and "gemv" in self.kernels:
                return "gemv", 1
            return ("gemv_rows16" if self.m >= UPGRADE_MIN_M and "gemv_rows16" in self.kernels else "gemv_rows"), 1
        if self.m > GPU_GEMV_MAX_ROWS:
            return gemm_plan(self.m, self.n, self.k)
        return ("gemv_coop4" if self.n >= COOP4_MIN_N else "gemv_coop"), 1

    def record(self, recorder):
        if not self.m:
            return
        if self.k_splits > 1:
            recorder.dispatch(*self.kernels[f"{self.kernel}_split"], *self.grid)
            recorder.dispatch(*self.kernels["gemm_reduce"], *self.reduce_grid)
        else:
            recorder.dispatch(*self.kernels[self.kernel], *self.grid)


@register("et_vk.linear_q4gsw.default")
class LinearQ4gswWeightOnly(LinearQ4gsw):
    def __init__(self, graph, index, name, args, x_silu_mul=False):
        super().__init__(graph, index, name, args)
        self.x_silu_mul = x_silu_mul
        if len(args) != 6:
            self.fail(f"expected 6 arguments (x, weights, scales, group_size, bias, out), got {len(args)}")
        self.parse_weights(weights=1, scales=2, group_size=3, bias=4)


class LinearQ4gswResidual(LinearQ4gswWeightOnly):
    """out = linear_q4gsw(x) + residual, one dispatch. Not an op of the exported graph:
    the runtime puts it in place of a linear whose output only a same-shape add reads,
    maybe through views (runtime/fusion.py): `out` and `residual` have the add's shape,
    the [M, N] result in its element order. Args: x, weights, scales, group_size, bias,
    residual, out."""

    def __init__(self, graph, index, name, args, x_silu_mul=False):
        LinearQ4gsw.__init__(self, graph, index, name, args)
        self.x_silu_mul = x_silu_mul
        if len(args) != 7:
            self.fail(f"expected 7 arguments (x, weights, scales, group_size, bias, residual, out), got {len(args)}")
        self.parse_weights(weights=1, scales=2, group_size=3, bias=4)
        self.residual = self.tensor(5)
        if self.residual.dtype != "float32":
            self.fail(f"the residual {self.residual.label} is {self.residual.dtype}; only float32 is supported")

    def set_output_sizes(self) -> tuple[int, int]:
        if self.residual.numel != self.m * self.n:
            self.fail(f"the residual is {list(self.residual.sizes)}, the linear's output {self.m}x{self.n}")
        self.set_sizes(self.out, self.residual.sizes)
        return self.n, self.n


class LinearQ4gswConcat(LinearQ4gsw):
    """Linears that read one x, as one dispatch: their packed weights, scales and biases
    concatenated by output at build (the constants themselves are then not uploaded).
    Not an op of the exported graph: the runtime puts it in place of the first of them
    (runtime/fusion.py). Args: x, then one output per linear (at most 3), or one output
    holding all of them side by side ([..., N1 + N2 + ...]). `linears`: the handlers of
    the exported linear_q4gsw ops, in output order. With `silu_mul_out` (a gate and an up
    projection of equal widths, the kernels for CPU adapters) the one output holds
    silu(gate) * up ([..., N1])."""

    MAX_OUTPUTS = 3  # out, out1, out2 in linear_q4gsw.wgsl

    def __init__(self, graph, index, name, args, linears, silu_mul_out=False):
        super().__init__(graph, index, name, args)
        self.linears = linears
        self.silu_mul_out = silu_mul_out
        self.x, self.outputs = self.tensor(0), [self.tensor(i) for i in range(1, len(args))]
        self.out = self.outputs[0]
        first = linears[0]
        if len(self.outputs) not in (1, len(linears)) or len(self.outputs) > self.MAX_OUTPUTS:
            self.fail(f"{len(linears)} linears need one output or one each (at most {self.MAX_OUTPUTS})")
        if not self.can_concatenate(linears):
            self.fail("the linears differ in K, group size, weight row length or having a bias, or a weight is not a constant")
        self.k, self.group_size, self.weight_row_words = first.k, first.group_size, first.weight_row_words
        self.widths = [linear.n for linear in linears]
        self.n = sum(self.widths)
        self.scale_stride = -(-self.n // 4) * 4
        self.bias = first.bias  # only whether there is one: the buffer is concatenated
        if silu_mul_out and (len(linears) != 2 or self.widths[0] != self.widths[1] or len(self.outputs) != 1):
            self.fail("silu(gate) * up needs a gate and an up projection of one width and one output")
        if silu_mul_out and self.kernel_set != "cpu":
            self.fail("only the kernels for CPU adapters write silu(gate) * up")
        if len(self.outputs) == 1 and self.out.max_sizes[-1] != self.stored_width:
            self.fail(f"output {self.out.label} {list(self.out.max_sizes)} does not hold {self.stored_width} features")

    @property
    def stored_width(self) -> int:
        """Values a row of the one output holds: N, or N / 2 with silu_mul_out."""
        return self.n // 2 if self.silu_mul_out else self.n

    @staticmethod
    def can_concatenate(linears) -> bool:
        first = linears[0]
        for linear in linears:
            if (linear.k, linear.group_size, linear.weight_row_words) != (first.k, first.group_size, first.weight_row_words):
                return False
            if (linear.bias is None) != (first.bias is None):
                return False
            if any(t is not None and t.constant is None for t in (linear.weights, linear.scales, linear.bias)):
                return False
        return True

    def packed_buffers(self):
        graph, device, linears = self.graph, self.graph.device, self.linears
        label = f"{self.name}#{self.index}"
        row_bytes = 4 * self.weight_row_words
        weights = device.create_buffer(self.n * row_bytes, STORAGE_USAGE, label=f"{label}.weights")
        scales = device.create_buffer(self.k // self.group_size * self.scale_stride * 4, STORAGE_USAGE, label=f"{label}.scales")
        bias = device.create_buffer(self.n * 4, STORAGE_USAGE, label=f"{label}.bias") if self.bias is not None else None
        first_output = 0
        for linear in linears:
            graph.write_constant(weights, linear.weights, [(first_output * row_bytes, 0, linear.n * row_bytes)])
            # Scales are [groups, N padded]: each group's row of this linear's.
            groups = range(self.k // self.group_size)
            rows = [((g * self.scale_stride + first_output) * 4, g * linear.scale_stride * 4, linear.n * 4) for g in groups]
            graph.write_constant(scales, linear.scales, rows)
            if bias is not None:
                graph.write_constant(bias, linear.bias, [(first_output * 4, 0, linear.n * 4)])
            first_output += linear.n
        return weights, scales, bias

    def set_output_sizes(self) -> tuple[int, int]:
        lead = self.x.sizes[:-1]
        if len(self.outputs) == 1:
            self.set_sizes(self.out, (*lead, self.stored_width))
            return self.stored_width, self.stored_width
        for tensor, width in zip(self.outputs, self.widths):
            self.set_sizes(tensor, (*lead, width))
        return self.widths[0], sum(self.widths[:2])


class RmsNormLinear(OpHandler):
    """An RMSNorm whose output only a 4-bit linear reads, as one op (runtime/fusion.py
    puts it in place of the linear). Where the linear runs a GEMV (decode; on CPU
    adapters up to GEMV_NORM_MAX_N outputs), one dispatch: the GEMV reads the norm's
    input and applies the norm itself (X_RMS_NORM in linear_q4gsw.wgsl). Otherwise the
    norm's own dispatch writes its output, then the linear reads it. `norm` and `linear`
    are the handlers of the exported ops; args are theirs, for liveness and resizing."""

    FUSED_KERNELS = ("gemv_coop", "gemv_coop4", "gemv")

    def __init__(self, graph, index, name, norm, linear):
        super().__init__(graph, index, name, (*norm.args, *linear.args))
        self.norm, self.linear = norm, linear
        if not isinstance(linear, LinearQ4gsw) or linear.x is not norm.out or linear.k != norm.width:
            self.fail(f"{linear.name} does not read {norm.name}'s output as its x")
        if linear.x_silu_mul or linear.residual is not None:
            self.fail(f"{linear.name} reads silu(gate) * up or adds a residual: it cannot apply a norm too")

    async def build(self):
        await self.norm.build()
        await self.linear.build()
        fused = [kernel for kernel in self.FUSED_KERNELS if kernel in self.linear.kernels]
        if self.linear.n > GEMV_NORM_MAX_N and "gemv" in fused:
            fused.remove("gemv")
        self.fused = {kernel: await self.linear.make_kernel(kernel, self.norm) for kernel in fused}

    async def build_upgrades(self) -> bool:
        return await self.linear.build_upgrades()

    def resize(self):
        self.norm.resize()
        self.linear.resize()

    def record(self, recorder):
        fused = self.fused.get(self.linear.kernel)
        if fused is None:
            self.norm.record(recorder)
            self.linear.record(recorder)
        elif self.linear.m:
            recorder.dispatch(*fused, *self.linear.grid)


def _zero_point_is_int8(op: OpHandler, zero_points) -> bool:
    if zero_points.dtype not in ("int8", "int32"):
        op.fail(f"zero points {zero_points.label} are {zero_points.dtype}; int8 or int32 expected")
    return zero_points.dtype == "int8"


def _qparams_params(rows: int, row_len: int, qmin: int, qmax: int, eps: float) -> bytes:
    """The Params block of dynamic_quant_int8.wgsl."""
    return struct.pack("<IIiif3I", rows, row_len, qmin, qmax, eps, 0, 0, 0)


@register("et_vk.linear_dq8ca_q4gsw.default")
class LinearDq8caQ4gsw(LinearQ4gsw):
    """x is quantized to int8 per row with the scales and zero points of
    choose_qparams_affine, dequantized into a scratch buffer, then multiplied."""

    RESIZED = ("quant_grid",)

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 9:
            self.fail(
                "expected 9 arguments (x, x_scales, x_zero_points, weights, weight_sums, scales, "
                f"group_size, bias, out), got {len(args)}"
            )
        self.parse_weights(weights=3, scales=5, group_size=6, bias=7)
        self.x_scales, self.x_zero_points = self.tensor(1), self.tensor(2)
        if self.x_scales.dtype != "float32":
            self.fail(f"activation scales {self.x_scales.label} are {self.x_scales.dtype}; float32 expected")
        self.zp_int8 = _zero_point_is_int8(self, self.x_zero_points)

    @property
    def gemm_input(self):
        return self.x_dequantized

    async def build(self):
        self.x_dequantized = self.graph.device.create_buffer(
            self.x.max_nbytes, STORAGE_USAGE, label=f"{self.name}#{self.index}.x_dequantized"
        )
        await super().build()
        self.quant_params = self.params_buffer(32)
        self.quant_pipeline = await self.make_pipeline(
            "dynamic_quant_int8", {"ZP_INT8": self.zp_int8}, entry_point="quantize_dequantize"
        )
        self.quant_group = self.graph.device.bind_group(
            self.quant_pipeline,
            [self.x_dequantized, self.x_zero_points.buffer, self.x.buffer, self.quant_params, self.x_scales.buffer],
        )

    def resize(self):
        super().resize()
        if numel(self.x_scales.sizes) != self.m or numel(self.x_zero_points.sizes) != self.m:
            self.fail(
                f"{self.m} rows of x but {numel(self.x_scales.sizes)} scales and "
                f"{numel(self.x_zero_points.sizes)} zero points"
            )
        self.write_params(self.quant_params, _qparams_params(self.m, self.k, INT8_MIN, INT8_MAX, 0.0))
        self.quant_grid = linear_grid(self.m * self.k, ELEMENTWISE_WORKGROUP)

    def record(self, recorder):
        if self.m:
            recorder.dispatch(self.quant_pipeline, self.quant_group, *self.quant_grid)
        super().record(recorder)


@register("torchao.choose_qparams_affine.default")
class ChooseQparamsAffine(OpHandler):
    """Per-row asymmetric quantization parameters of x (the 8da4w activation half).

    args: (x, mapping_type, block_size, target_dtype, quant_min, quant_max, eps,
    scale_dtype, zero_point_dtype, keepdim, [scales, zero_points]); dtypes are serialized
    as Null, so the output tensors' dtypes say what to write.
    """

    RESIZED = ("grid", "rows")

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 11:
            self.fail(f"expected 11 arguments, got {len(args)}")
        self.x = self.tensor(0)
        outputs = self.value(10)
        if not isinstance(outputs, ValueList) or len(outputs.items) != 2:
            self.fail("the last argument should list two outputs (scales, zero points)")
        self.scales, self.zero_points = (graph.values[i] for i in outputs.items)
        if not isinstance(self.scales, Tensor) or not isinstance(self.zero_points, Tensor):
            self.fail("the outputs (scales, zero points) should be tensors")
        if self.x.dtype != "float32" or self.scales.dtype != "float32":
            self.fail("x and the scales must be float32")
        self.zp_int8 = _zero_point_is_int8(self, self.zero_points)
        if self.value(1) != "ASYMMETRIC":
            self.fail(f"mapping type {self.value(1)!r} is not supported (only ASYMMETRIC)")
        self.row_len = self.x.max_sizes[-1] if self.x.max_sizes else 1
        block_size = self.ints_arg(2)
        if len(block_size) != len(self.x.max_sizes) or block_size[-1] != self.row_len or any(b != 1 for b in block_size[:-1]):
            self.fail(f"block size {block_size} is not per row of x {list(self.x.max_sizes)}")
        self.qmin = INT8_MIN if self.value(4) is None else self.int_arg(4)
        self.qmax = INT8_MAX if self.value(5) is None else self.int_arg(5)
        zp_min, zp_max = (INT8_MIN, INT8_MAX) if self.zp_int8 else (-(2**31), 2**31 - 1)
        if not zp_min <= self.qmin < self.qmax <= zp_max:
            self.fail(f"quant range [{self.qmin}, {self.qmax}] does not fit the {self.zero_points.dtype} zero points")
        eps = self.value(6)
        if eps is not None and not isinstance(eps, numbers.Real):
            self.fail(f"eps should be a number, got {type(eps).__name__}")
        self.eps = F32_SMALLEST_NORMAL if eps is None else float(eps)
        self.keepdim = bool(self.value(9))

    async def build(self):
        self.params = self.params_buffer(32)
        self.pipeline = await self.make_pipeline("dynamic_quant_int8", {"ZP_INT8": self.zp_int8}, entry_point="choose_qparams")
        self.group = self.graph.device.bind_group(
            self.pipeline, [self.scales.buffer, self.zero_points.buffer, self.x.buffer, self.params]
        )

    def resize(self):
        if self.x.sizes[-1] != self.row_len:
            self.fail(f"x rows have {self.x.sizes[-1]} values, the block size {self.row_len}")
        self.rows = numel(self.x.sizes[:-1])
        # keepdim keeps x's rank with a trailing 1; otherwise the row dim is dropped.
        sizes = (*self.x.sizes[:-1], 1) if self.keepdim else self.x.sizes[:-1]
        self.set_sizes(self.scales, sizes)
        self.set_sizes(self.zero_points, sizes)
        self.write_params(self.params, _qparams_params(self.rows, self.row_len, self.qmin, self.qmax, self.eps))
        self.grid = linear_grid(-(-self.rows // QPARAMS_ROWS), 1)

    def record(self, recorder):
        if self.rows:
            recorder.dispatch(self.pipeline, self.group, *self.grid)
