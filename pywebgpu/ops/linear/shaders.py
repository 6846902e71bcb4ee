"""The WGSL module (under wgsl/linear/) and the override constants each linear kernel is
built from."""

from __future__ import annotations

from functools import cache

from ...kernels import QUAD_DIRECTIVES, load_wgsl
from .params import STEP_VALUES, UPGRADE_ROWS

# Kernels built from another kernel's entry point with overrides set.
KERNEL_VARIANTS = {"gemv_rows16": ("gemv_rows", {"ROW_QUADS": UPGRADE_ROWS // 4})}
# The files whose kernels run quad operations (behind QUAD_DIRECTIVES).
QUAD_FILES = ("gemv", "gemv_rows_quads")


@cache
def kernel_source(entry_point: str, subgroups: bool) -> str:
    """The WGSL module of `entry_point` for an adapter with or without subgroups (one
    string object each: Device.compute_pipeline keys its cache by the source). gemv_rows
    shares x values round quads where it can."""
    name = entry_point
    if entry_point == "gemv_rows":
        name = "gemv_rows_quads" if subgroups else "gemv_rows_no_quads"
    source = load_wgsl(f"linear/{name}")
    return QUAD_DIRECTIVES + source if name in QUAD_FILES else source


def kernel_build(
    kernel: str, subgroups: bool, *, has_bias: bool, x_silu_mul: bool, norm_eps: float | None, silu_mul_out: bool,
    group_size: int, has_offsets: bool = False,
) -> tuple[str, str, dict]:
    """(source, entry point, override constants) of `kernel` (an entry point or a
    KERNEL_VARIANTS entry); `norm_eps`: the eps of an RMSNorm the kernel applies to x, or
    None; `has_offsets`: whether the linear adds offsets times x's group sums. Each kernel gets the overrides its module declares: common.wgsl's, and gemv's
    OUT_SILU_MUL, gemv_rows' ROW_QUADS and STEP_WORDS."""
    entry_point, variant_constants = KERNEL_VARIANTS.get(kernel, (kernel, {}))
    constants = {
        **variant_constants,
        "HAS_BIAS": has_bias,
        "HAS_OFFSETS": has_offsets,
        "X_SILU_MUL": x_silu_mul,
        "X_RMS_NORM": norm_eps is not None,
        "RMS_EPS": norm_eps if norm_eps is not None else 0.0,
    }
    if entry_point == "gemv":
        constants["OUT_SILU_MUL"] = silu_mul_out  # the others read p.silu_mul_out
    if entry_point == "gemv_rows":
        constants["STEP_WORDS"] = 1 if group_size % STEP_VALUES else 4
    return kernel_source(entry_point, subgroups), entry_point, constants
