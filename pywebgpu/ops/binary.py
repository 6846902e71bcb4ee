"""aten.add / sub / mul / div.Tensor with broadcasting (kernel: wgsl/binary.wgsl)."""

from __future__ import annotations

import struct

from ..values import numel
from .dims import MAX_DIMS, dims_words, element_grid
from .registry import OpHandler, contiguous_strides, register

BINARY_OPS = {"add": 0, "sub": 1, "mul": 2, "div": 3}


class ShapeError(ValueError):
    """Operand shapes that cannot be combined."""


def broadcast_shape(a: tuple, b: tuple) -> tuple:
    ndim = max(len(a), len(b))
    a = (1,) * (ndim - len(a)) + tuple(a)
    b = (1,) * (ndim - len(b)) + tuple(b)
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and 1 not in (x, y):
            raise ShapeError(f"shapes {list(a)} and {list(b)} do not broadcast (dim {i}: {x} vs {y})")
        out.append(y if x == 1 else x)
    return tuple(out)


def _broadcast_strides(shape: tuple, out_shape: tuple) -> list[int]:
    """Element strides of a contiguous `shape` read at `out_shape` (0 where broadcast)."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    return [0 if size == 1 else stride for size, stride in zip(shape, contiguous_strides(shape))]


def _coalesced(sizes: list, a_strides: list, b_strides: list) -> tuple[list, list, list]:
    """The same element mapping over fewer dims: size-1 dims dropped, and a dim merged
    into the next where both operands step through the pair as through one dim. Equal
    shapes become one dim, which the kernel indexes without divisions."""
    merged = ([], [], [])
    for size, a_stride, b_stride in zip(sizes, a_strides, b_strides):
        if size == 1:
            continue
        if merged[0] and merged[1][-1] == a_stride * size and merged[2][-1] == b_stride * size:
            merged[0][-1] *= size
            merged[1][-1], merged[2][-1] = a_stride, b_stride
        else:
            for values, value in zip(merged, (size, a_stride, b_stride)):
                values.append(value)
    return merged if merged[0] else ([1], [0], [0])


def pack_params(out_shape: tuple, a_shape: tuple, b_shape: tuple, alpha: float = 1.0) -> bytes:
    """The kernel's uniform block (its Params)."""
    if len(out_shape) > MAX_DIMS:
        raise ShapeError(f"binary ops support at most {MAX_DIMS} dims, got {len(out_shape)}")
    sizes, a_strides, b_strides = _coalesced(
        list(out_shape), _broadcast_strides(a_shape, out_shape), _broadcast_strides(b_shape, out_shape)
    )
    return struct.pack(
        f"<IIfI{3 * MAX_DIMS}I",
        numel(out_shape),
        len(sizes),
        alpha,
        0,
        *dims_words(sizes, 1),
        *dims_words(a_strides, 1),
        *dims_words(b_strides, 1),
    )


@register("aten.add.Tensor", "aten.sub.Tensor", "aten.mul.Tensor", "aten.div.Tensor")
class BinaryOp(OpHandler):
    RESIZED = ("grid",)

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        self.op = name.split(".")[1]
        has_alpha = self.op in ("add", "sub")
        if len(args) != (4 if has_alpha else 3):
            self.fail(f"expected {4 if has_alpha else 3} arguments, got {len(args)}")
        self.a, self.b, self.out = self.tensor(0), self.tensor(1), self.tensor(len(args) - 1)
        self.alpha = 1.0 if not has_alpha or self.value(2) is None else self.float_arg(2)
        for tensor in (self.a, self.b, self.out):
            if tensor.dtype != "float32":
                self.fail(f"{tensor.label} is {tensor.dtype}; only float32 is supported")

    async def build(self):
        self.params = self.params_buffer(len(pack_params((1,), (1,), (1,))))
        self.pipeline = await self.make_pipeline("binary", {"OP": BINARY_OPS[self.op]})
        self.group = self.graph.device.bind_group(
            self.pipeline, [self.out.buffer, self.a.buffer, self.b.buffer, self.params]
        )

    def resize(self):
        try:
            out_sizes = broadcast_shape(self.a.sizes, self.b.sizes)
        except ShapeError as error:
            self.fail(str(error))
        self.set_sizes(self.out, out_sizes)
        self.write_params(self.params, pack_params(out_sizes, self.a.sizes, self.b.sizes, self.alpha))
        self.grid = element_grid(numel(out_sizes))

    def record(self, recorder):
        recorder.dispatch(self.pipeline, self.group, *self.grid)

