"""Runtime values of a graph: tensors backed by GPU buffers, and symbolic integers that
live on the host (their values come from input data and live sizes)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .gpu import Buffer

DTYPE_SIZES = {"float32": 4, "float16": 2, "int32": 4, "int8": 1, "uint8": 1, "bool": 1, "int64": 8}


def numel(sizes) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


@dataclass(eq=False)
class Tensor:
    """A tensor: a buffer sized for its upper-bound `max_sizes`, and its `sizes` now."""

    id: int
    dtype: str
    max_sizes: tuple
    sizes: tuple
    constant: object = None  # a pte.ConstantRef for weights, KV caches, RoPE tables
    buffer: Buffer | None = None
    # The dtype of the constant's bytes in the program: "float16" for an f16 program's
    # constants, which run as float32 (ops/widen.py) unless ops take them as they are
    # (GraphRuntime._keep_float16_constants: `dtype` is then "float16" too); else None.
    constant_dtype: str | None = None
    # Host copy of an input's data, for ops that read values on the host (select_as_symint).
    host_values: list | None = None

    @property
    def itemsize(self) -> int:
        return DTYPE_SIZES[self.dtype]

    @property
    def max_nbytes(self) -> int:
        return numel(self.max_sizes) * self.itemsize

    @property
    def constant_nbytes(self) -> int:
        """Bytes of the constant's data in the program (its dtype's, at max_sizes)."""
        return numel(self.max_sizes) * DTYPE_SIZES[self.constant_dtype or self.dtype]

    @property
    def numel(self) -> int:
        return numel(self.sizes)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def label(self) -> str:
        return f"tensor{self.id}"


@dataclass(eq=False)
class SymInt:
    """A symbolic integer (sequence length, position), recomputed on the host each run.
    `buffer`, made for ops that read it on the GPU (GraphRuntime.int_on_gpu), holds its
    value as an i32 and is rewritten whenever the value changes."""

    id: int
    value: int
    buffer: Buffer | None = None


@dataclass(eq=False)
class ValueList:
    """A list of value ids (e.g. view sizes mixing ints and SymInts)."""

    id: int
    items: list = field(default_factory=list)
