"""Views that pick elements: select_copy.int, slice_copy.Tensor (kernel: wgsl/gather.wgsl)
and index.Tensor (kernel: wgsl/index.wgsl).

The kernels move 32-bit words without reading them, so one pipeline serves float32 and
int32 tensors. `StridedCopy`, the gather kernel's driver, also serves permute and cat.
"""

from __future__ import annotations

import struct

from ..values import Tensor, ValueList, numel
from .dims import MAX_DIMS, check_dims, dims_words, element_grid
from .registry import OpHandler, OpPart, contiguous_strides, register

_GATHER_PARAMS = struct.Struct(f"<4I{3 * MAX_DIMS}I")
_INDEX_PARAMS = struct.Struct(f"<4I{2 * MAX_DIMS}I")


def check_word_sized(op: OpHandler, *tensors: Tensor):
    """The copy kernels move whole 32-bit words: refuse 8- and 16-bit tensors at load."""
    for tensor in tensors:
        if tensor.itemsize != 4:
            op.fail(f"{tensor.label} is {tensor.dtype}; only 32-bit tensors (float32, int32) are supported")
    if len({tensor.dtype for tensor in tensors}) > 1:
        op.fail("input and output dtypes differ: " + ", ".join(f"{t.label} {t.dtype}" for t in tensors))


def check_separate_buffers(op: OpHandler, src: Tensor, out: Tensor):
    """A copy that overwrites its own source would race with itself: refuse it at build."""
    if src.buffer is out.buffer:
        op.fail(f"{src.label} and {out.label} share one buffer")


class StridedCopy(OpPart):
    """One dispatch of wgsl/gather.wgsl for `op`: a strided view of `src` copied into a
    strided view of `out` (contiguous for select/slice/permute, a block inside the output for
    one input of a cat). Build it in the op's build(), set the views in resize()."""

    RESIZED = ("count", "grid")

    def __init__(self, op: OpHandler, src: Tensor, out: Tensor):
        self.op, self.src, self.out = op, src, out
        self.count = 0

    async def build(self):
        check_separate_buffers(self.op, self.src, self.out)
        self.params = self.op.params_buffer(_GATHER_PARAMS.size)
        self.pipeline = await self.op.make_pipeline("gather")
        self.group = self.op.graph.device.bind_group(self.pipeline, [self.out.buffer, self.src.buffer, self.params])

    def set_view(self, sizes, src_offset: int, src_strides, out_offset: int = 0, out_strides=None):
        """Copy the elements at every coordinate of `sizes`; `out_strides` default to a
        contiguous output."""
        if out_strides is None:
            out_strides = contiguous_strides(sizes)
        self.count = numel(sizes)
        self.op.write_params(
            self.params,
            _GATHER_PARAMS.pack(
                self.count,
                len(sizes),
                src_offset,
                out_offset,
                *dims_words(sizes, 1),
                *dims_words(src_strides, 0),
                *dims_words(out_strides, 0),
            ),
        )
        self.grid = element_grid(self.count)

    def record(self, recorder):
        if self.count:
            recorder.dispatch(self.pipeline, self.group, *self.grid)


class GatherOp(OpHandler):
    """An op that is one contiguous gather of its input tensor (argument 0) into its output
    (the last argument)."""

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        self.src, self.out = self.tensor(0), self.tensor(len(args) - 1)
        check_word_sized(self, self.src, self.out)
        check_dims(self, self.src)
        self.copy = StridedCopy(self, self.src, self.out)

    async def build(self):
        await self.copy.build()

    def record(self, recorder):
        self.copy.record(recorder)


@register("aten.select_copy.int")
class SelectCopy(GatherOp):
    """select_copy(in, dim, index): `in` with `dim` removed, at position `index` along it."""

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 4:
            self.fail(f"expected 4 arguments, got {len(args)}")
        self.dim = self.normalize_dim(self.int_arg(1), len(self.src.max_sizes))

    def resize(self):
        sizes, dim = self.src.sizes, self.dim
        index = self.int_arg(2)
        if not -sizes[dim] <= index < sizes[dim]:
            self.fail(f"index {index} out of range for dim {dim} of size {sizes[dim]} (input {list(sizes)})")
        index %= sizes[dim]
        strides = contiguous_strides(sizes)
        out_sizes = sizes[:dim] + sizes[dim + 1 :]
        self.set_sizes(self.out, out_sizes)
        self.copy.set_view(out_sizes, index * strides[dim], strides[:dim] + strides[dim + 1 :])


def slice_range(size: int, start: int | None, end: int | None, step: int) -> tuple[int, int]:
    """(first index, length) of `[start:end:step]` on a dim of `size`, clamped as PyTorch
    clamps: negative bounds count from the end, bounds past either end stop there."""
    start = 0 if start is None else start + size if start < 0 else start
    end = size if end is None else end + size if end < 0 else end
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, (end - start + step - 1) // step


@register("aten.slice_copy.Tensor")
class SliceCopy(GatherOp):
    """slice_copy(in, dim, start, end, step): start/end may be None, SymInts, negative or
    beyond the size (e.g. INT64_MAX for an open end)."""

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 6:
            self.fail(f"expected 6 arguments, got {len(args)}")
        self.dim = self.normalize_dim(self.int_arg(1), len(self.src.max_sizes))

    def optional_int(self, arg: int) -> int | None:
        return None if self.value(arg) is None else self.int_arg(arg)

    def resize(self):
        sizes, dim = self.src.sizes, self.dim
        step = self.optional_int(4) or 1
        if step <= 0:
            self.fail(f"slice step must be positive, got {step}")
        start, length = slice_range(sizes[dim], self.optional_int(2), self.optional_int(3), step)
        strides = contiguous_strides(sizes)
        out_sizes = sizes[:dim] + (length,) + sizes[dim + 1 :]
        src_strides = strides[:dim] + [strides[dim] * step] + strides[dim + 1 :]
        self.set_sizes(self.out, out_sizes)
        self.copy.set_view(out_sizes, start * strides[dim], src_strides)


@register("aten.index.Tensor")
class IndexTensor(OpHandler):
    """index.Tensor(in, [None, …, indices, …]) with exactly one 1-D int32 index tensor:
    the form the Vulkan partitioner delegates (int64 indices arrive narrowed to int32).

    Out-of-range indices fail at resize when the host holds their values (a graph input);
    indices computed on the GPU are clamped by the kernel, never read out of bounds."""

    RESIZED = ("count", "grid")

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 3:
            self.fail(f"expected 3 arguments, got {len(args)}")
        self.src, self.out = self.tensor(0), self.tensor(2)
        check_word_sized(self, self.src, self.out)
        check_dims(self, self.src)
        index_list = self.value(1)
        if not isinstance(index_list, ValueList):
            self.fail(f"argument 1 should be a list of index tensors, got {type(index_list).__name__}")
        given = [(dim, graph.values[i]) for dim, i in enumerate(index_list.items) if graph.values[i] is not None]
        if len(given) != 1 or not isinstance(given[0][1], Tensor):
            self.fail("only indexing by a single index tensor is supported")
        self.dim, self.indices = given[0]
        if self.dim >= len(self.src.max_sizes):
            self.fail(f"index tensor at dim {self.dim} of a {len(self.src.max_sizes)}-d tensor")
        if self.indices.dtype != "int32" or len(self.indices.max_sizes) != 1:
            self.fail(f"index tensor {self.indices.label} is {self.indices.dtype}{list(self.indices.max_sizes)}; a 1-D int32 tensor is needed")
        self.host_indices = self.indices in graph.inputs
        # Indices given by the caller are checked on the host, whenever they change.
        self.reads_host_values = self.host_indices

    async def build(self):
        check_separate_buffers(self, self.src, self.out)
        self.params = self.params_buffer(_INDEX_PARAMS.size)
        self.pipeline = await self.make_pipeline("index")
        device = self.graph.device
        self.group = device.bind_group(self.pipeline, [self.out.buffer, self.src.buffer, self.indices.buffer, self.params])

    def resize(self):
        sizes, dim = self.src.sizes, self.dim
        count = self.indices.sizes[0]
        if count and sizes[dim] == 0:
            self.fail(f"cannot index dim {dim} of size 0 (input {list(sizes)})")
        if self.host_indices:
            bad = [i for i in self.indices.host_values if not -sizes[dim] <= i < sizes[dim]]
            if bad:
                self.fail(f"index {bad[0]} out of range for dim {dim} of size {sizes[dim]} (input {list(sizes)})")
        out_sizes = sizes[:dim] + (count,) + sizes[dim + 1 :]
        self.set_sizes(self.out, out_sizes)
        self.count = numel(out_sizes)
        self.write_params(
            self.params,
            _INDEX_PARAMS.pack(
                self.count,
                len(out_sizes),
                dim,
                sizes[dim],
                *dims_words(out_sizes, 1),
                *dims_words(contiguous_strides(sizes), 0),
            ),
        )
        self.grid = element_grid(self.count)

    def record(self, recorder):
        if self.count:
            recorder.dispatch(self.pipeline, self.group, *self.grid)
