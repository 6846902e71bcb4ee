"""Shapes and grids of the kernels that index one element a thread (wgsl/common/index.wgsl):
at most MAX_DIMS dims, ELEMENT_THREADS threads a workgroup."""

from __future__ import annotations

from ..gpu import linear_grid
from ..values import Tensor
from .registry import OpHandler, padded_dims

MAX_DIMS = 8  # the sizes or strides a `Dims` holds
ELEMENT_THREADS = 256


def element_grid(count: int) -> tuple[int, int]:
    """The grid of `count` threads, one an element."""
    return linear_grid(count, ELEMENT_THREADS)


def dims_words(values, fill: int) -> list[int]:
    """Sizes or strides as a `Dims` of the kernel's parameters, padded with `fill`."""
    return padded_dims(values, MAX_DIMS, fill)


def check_dims(op: OpHandler, tensor: Tensor):
    """Refuse, at load, a tensor of more dims than a `Dims` holds."""
    if len(tensor.max_sizes) > MAX_DIMS:
        op.fail(f"{tensor.label} has {len(tensor.max_sizes)} dims; at most {MAX_DIMS} are supported")
