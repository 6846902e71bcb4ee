"""The graph runtime: one VkGraph built once on a device, executed many times.

load → build (buffers, pipelines, bind groups, once) → execute (set input data and live
sizes, propagate resizes, record, submit, read outputs). One built graph serves every
sequence length up to the exported bound: prefill and decode run the same graph.

Execution redoes only what changed: an op is resized when a value it reads (a tensor's
live sizes or data on the host, a SymInt) changed since its last resize, and re-recorded
only then; the schedule (every op's commands) is patched in place where an op's commands
changed their arguments only, and rebuilt only when their number changed. A decode step
thus resizes the few ops that compute the position on the host, writes its one buffer,
and submits the command list of the step before. Ops that read the position on the GPU
(attention and RoPE, from the SymInt's buffer: `int_on_gpu`) say which values their
recording serves (`OpHandler.gpu_int_ranges`) and are resized only when it leaves them.

A change of input shape (a prompt after decoding, decoding after a prompt) resizes a third
of the ops, re-records them and rebuilds the schedule: for SmolLM2 ~3-4 ms natively and
~4-7 ms in Pyodide on a 2-core machine. So the graph keeps what resizing and recording left
for each of the last KEPT_SHAPES input shapes (_ShapeState) and restores it when the
inputs return to a shape (~1 ms in Pyodide there); the run then resizes only what changed
since (the position). Decoding's one shape returns after every prompt.
"""

from __future__ import annotations

import array
import asyncio
import bisect
import heapq
import struct
from collections import OrderedDict
from dataclasses import dataclass

from .. import pte
from ..gpu import STORAGE_USAGE, UNIFORM_USAGE, Device, GPUError, is_js_buffer
# The module, not its names: ops.registry imports runtime.values, so importing names here
# would be circular.
from ..ops import load_all_ops, registry
from ..ops.topk import TopK
from ..ops.widen import HalfWidener, widen_on_host
from .fusion import constant_aliases, fuse, readers
from ..values import DTYPE_SIZES, SymInt, Tensor, ValueList, numel

# Input dtypes as the caller gives them → how they are staged on the GPU. ExecuTorch's
# Vulkan graphs take int64 token ids and positions narrowed to int32.
_HOST_TYPECODES = {"float32": "f", "int32": "i", "int64": "i"}
# How many input shapes' states a graph keeps: a chat returns to decoding's one shape after
# every prompt, and to a prompt's length when one recurs.
KEPT_SHAPES = 8


@dataclass
class HostTensor:
    """Tensor data on the host: `values` is an array.array (or any flat int/float sequence)."""

    shape: tuple
    values: object
    dtype: str = "float32"

    def tolist(self):
        return list(self.values)


@dataclass
class _ShapeState:
    """What resizing and recording left for one shape of the inputs. `ops`: op index →
    GraphRuntime._op_state (the attributes resize() sets, of the op and the OpParts it
    keeps), for every op resized since the graph's full resize; `values`: value id → a
    tensor's (sizes, host values) or a SymInt's value, for every value changed since;
    `written`: the bytes last written to each buffer (GraphRuntime.write_if_changed's);
    the ops' commands and the schedule."""

    ops: dict
    values: dict
    written: dict | None = None
    op_commands: list | None = None
    schedule: object = None
    op_starts: list | None = None


class GraphRuntime:
    def __init__(self, device: Device, graph: "pte.VkGraph", data):
        load_all_ops()
        self.device = device
        self._data = data  # the .pte bytes, or a JS ArrayBuffer: constants upload from it
        self.values = [self._runtime_value(i, v) for i, v in enumerate(graph.values)]
        # In the method's argument order (the graph's own lists follow first use). An
        # input the graph never reads is None: its data is checked, then dropped.
        self.inputs = [None if i is None else self._io_tensor(i, "input") for i in graph.method_input_ids]
        self.outputs = [self._io_tensor(i, "output") for i in graph.method_output_ids]
        self.ops = [registry.handler_for(call.name, index)(self, index, call.name, tuple(call.args)) for index, call in enumerate(graph.chain)]
        fuse(self)
        self._consumers = readers(self.ops, self.values)
        # SymInt id → (low, high, other readers): the values that all its readers on the GPU
        # serve (the intersection of their gpu_int_ranges) and the readers serving none. A
        # change within needs only the others looked at: a decode step's position is read
        # on the GPU by every layer. Made on demand; dropped when a reader's ranges change.
        self._served: dict[int, tuple[int, int, list[int]]] = {}
        # Ops that record commands: the others (SymInt arithmetic) need no re-recording.
        self._records_commands = [type(op).record is not registry.OpHandler.record for op in self.ops]
        # Inputs some op reads on the GPU: the others (the position, which only
        # select_as_symint reads, on the host) are never written there.
        self._inputs_on_gpu = self._inputs_read_by(lambda op: not op.host_only)
        # Input id → the ops reading its values on the host (an input none reads so: absent):
        # the only ones a change of its data alone (a decode step's position) resizes.
        self._host_readers: dict[int, list[int]] = {}
        for tensor in self.inputs:
            on_host = [i for i in self._consumers.get(tensor.id, ()) if self.ops[i].reads_host_values] if tensor is not None else []
            if on_host:
                self._host_readers[tensor.id] = on_host
        # SymInt id → value_key() of the op making it; key → int_on_gpu's shared buffer.
        self._value_keys = {op.out.id: key for op in self.ops if (key := op.value_key()) is not None}
        self._keyed_int_buffers: dict = {}
        self._last_written: dict[int, bytes] = {}  # id(buffer) → bytes, of write_if_changed
        self._written_buffers: dict[int, object] = {}  # id(buffer) → buffer, the same ones
        self._top_k = None
        self._int_buffers: dict = {}  # value id → int_on_gpu's buffer of a constant Int
        # An f16 program's float16 constants, widened at build (_widened_constant): the
        # kernel; tensor id → float32 image; the commands that widen and copy them,
        # submitted when the ops are built; the buffers to free then.
        self._widener = None
        self._widened: dict[int, object] = {}
        self._widening = None
        self._widening_scratch: list = []
        self.built = False
        # Incremental execution (see the module docstring): ops to resize (a heap of op
        # indexes, and the same as a set), the op being resized, ops to re-record, each
        # op's last commands, and the schedule made of them.
        self._stale_heap: list[int] = []
        self._stale: set[int] = set()
        self._resizing = -1
        self._to_record: list[int] = []
        self._op_commands: list[list] = [[] for _ in self.ops]
        self._op_starts: list[int] = []  # where each op's commands begin in the schedule
        self._schedule = None
        # Shape states (see the module docstring): the inputs' shapes now; the states kept,
        # oldest first; whether changes are tracked (from the end of a full resize on); the
        # ops resized and values changed since then, and since the inputs took this shape;
        # every value as it was at the end of the full resize; each op's OpParts.
        self._shape = None
        self._shape_states: OrderedDict[tuple, _ShapeState] = OrderedDict()
        self._tracking = False
        self._varied_ops: set[int] = set()
        self._varied_values: set[int] = set()
        self._resized_ops: set[int] = set()
        self._changed_values: set[int] = set()
        self._base_values: dict[int, object] = {}
        self._parts: dict[int, list] = {}

    # --- values ----------------------------------------------------------------------
    @staticmethod
    def _runtime_value(index, value):
        if isinstance(value, pte.TensorValue):
            if value.dtype not in DTYPE_SIZES:
                raise registry.OpError(f"value {index}: tensors of dtype {value.dtype} are not supported")
            dims = tuple(value.dims)
            if value.dtype == "float16":
                # An f16 program (ExecuTorch's force_fp16): the kernels are f32, so its
                # tensors run as float32 and its constants are widened at build, but for
                # those ops take as float16 (_keep_float16_constants: the KV caches).
                return Tensor(index, "float32", dims, dims, value.constant, constant_dtype="float16" if value.constant else None)
            return Tensor(index, value.dtype, dims, dims, value.constant)
        if isinstance(value, pte.SymIntValue):
            return SymInt(index, value.value)
        if isinstance(value, pte.ValueListValue):
            return ValueList(index, list(value.items))
        if isinstance(value, pte.NullValue):
            return None
        if isinstance(value, (pte.IntListValue, pte.DoubleListValue, pte.BoolListValue)):
            return tuple(value.items)
        return value.value  # Int, Double, Bool, String

    def _io_tensor(self, value_id, role):
        value = self.values[value_id]
        if not isinstance(value, Tensor):
            raise registry.OpError(f"graph {role} value {value_id} is a {type(value).__name__}, not a tensor")
        return value

    def _inputs_read_by(self, reads) -> set[int]:
        """Ids of the inputs that some op for which `reads(op)` holds reads."""
        return {
            t.id for t in self.inputs if t is not None and any(reads(self.ops[i]) for i in self._consumers.get(t.id, ()))
        }

    def int_value(self, value_id: int, op) -> int:
        value = self.values[value_id]
        # Exact types, not isinstance: a decode step reads a dozen of these, and a bool
        # (an int subclass) is no int argument.
        kind = type(value)
        if kind is SymInt:
            return value.value
        if kind is int:
            return value
        op.fail(f"value {value_id} should be an int or SymInt, got {type(value).__name__}")

    # --- build -------------------------------------------------------------------------
    async def build(self):
        self._aliases = aliases = constant_aliases(self.ops)
        self._keep_float16_constants()
        if any(isinstance(t, Tensor) and _widened(t) for t in self.values):
            self._widener = HalfWidener(self.device)
            await self._widener.build()
            self._widening = self.device.record()
        # Constants no op reads (those of linears fusion concatenated) stay on the host.
        for tensor in self.values:
            if isinstance(tensor, Tensor) and tensor.constant is not None and tensor.id not in aliases and tensor.id in self._consumers:
                tensor.buffer = self._upload_constant(tensor)
        # Fill the writable binding slots of outputs an op does not have (linear_q4gsw).
        self.spare_buffers = [self.device.create_buffer(4, STORAGE_USAGE, label=f"spare{i}") for i in range(2)]
        # Partial results an op merges in a second dispatch (split attention, split-K GEMMs):
        # one buffer for the graph, whose ops run one after another. Whole vec4s.
        scratch_bytes = max((op.scratch_bytes() for op in self.ops), default=0)
        self.scratch = self.device.create_buffer(max(16, -(-scratch_bytes // 16) * 16), STORAGE_USAGE, label="scratch")
        for slot, (size, tensor_ids) in enumerate(self._plan_memory(self._view_sources(), set(aliases))):
            buffer = self.device.create_buffer(size, STORAGE_USAGE, label=f"activations{slot}")
            for tensor_id in tensor_ids:
                self.values[tensor_id].buffer = buffer
        for out_id, in_id in aliases.items():
            self.values[out_id].buffer = self.values[in_id].buffer
        # All ops at once: where pipelines compile asynchronously (the browser), they
        # compile side by side while the host goes on with the next ops.
        outcomes = await asyncio.gather(*(op.build() for op in self.ops), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        if self._widening is not None:
            self._finish_widening()
        self._mark_all_stale()
        self.built = True

    async def build_upgrades(self):
        """Build the ops' faster kernels that build() left out for their compile time
        (OpHandler.build_upgrades); where any were built, resize every op in the next run,
        which so takes them up (the shape states kept drop: they hold the kernels chosen
        before). Safe between any two runs, as after a failed one."""
        if not self.built:
            raise GPUError("build() the graph before building its upgrades")
        if any(await asyncio.gather(*(op.build_upgrades() for op in self.ops))):
            self._mark_all_stale()

    def _keep_float16_constants(self):
        """An f16 program's float16 constants that every op reading them takes as stored
        (OpHandler.float16_constants: the KV caches) stay float16; the others are widened
        to float32 as they upload."""
        taken = [op.float16_constants() for op in self.ops]
        for tensor in self.values:
            if isinstance(tensor, Tensor) and tensor.constant_dtype == "float16":
                users = self._consumers.get(tensor.id, ())
                if users and all(tensor.id in taken[index] for index in users):
                    tensor.dtype = "float16"

    def _view_sources(self) -> dict[int, int]:
        """out id → the non-constant tensor whose bytes it holds, for every view op (a
        chain of views leads to its first source). A view shares its source's buffer."""
        source = {}
        for op in self.ops:
            pair = op.view_of()
            if pair is not None:
                out_id, src_id = pair
                src_id = source.get(src_id, src_id)
                if self.values[src_id].constant is None:
                    source[out_id] = src_id
        return source

    def _plan_memory(self, views: dict[int, int], aliased: set[int]) -> list[tuple[int, list[int]]]:
        """Buffers for the non-constant tensors not in `aliased` (outputs that share a
        constant's buffer): (size, tensor ids) each. A tensor and the views of it form one
        group, live from its first use to its last (graph inputs from before the first
        op, outputs to after the last); groups whose lives do not overlap share a buffer
        (see below). (The exporter's mem_obj_ids plan each view as a
        tensor of its own; planning here lets views cost nothing.)"""
        end = len(self.ops)
        span: dict[int, list[int]] = {}  # group (source tensor id) → [first use, last use]
        members: dict[int, list[int]] = {}

        def use(tensor_id, index):
            group = views.get(tensor_id, tensor_id)
            first_last = span.setdefault(group, [index, index])
            first_last[0], first_last[1] = min(first_last[0], index), max(first_last[1], index)

        for index, op in enumerate(self.ops):
            for arg in op.args:
                value = self.values[arg]
                for item in [self.values[i] for i in value.items] if isinstance(value, ValueList) else [value]:
                    if isinstance(item, Tensor) and item.constant is None:
                        use(item.id, index)
        for tensor in self.inputs:
            if tensor is not None:
                use(tensor.id, -1)
        for tensor in self.outputs:
            use(tensor.id, end)
        for value in self.values:
            if isinstance(value, Tensor) and value.constant is None and value.id not in aliased:
                group = views.get(value.id, value.id)
                if group in span:  # else nothing reads or writes it (e.g. folded by fusion)
                    members.setdefault(group, []).append(value.id)
        # Largest groups first, each into the first slot free over its whole life, else a
        # new slot of its size: a slot's size is that of its first group and never grows,
        # so tensors of one size that never overlap (each layer's MLP activations) share
        # one slot. (Placing by first use instead let small tensors take a large slot's
        # free span, and grew another slot to the large size.)
        sizes = {group: max(4, *(self.values[t].max_nbytes for t in ids)) for group, ids in members.items()}
        slots: list[tuple[int, list, list]] = []  # (size, sorted [first, last] spans, ids)
        for group in sorted(members, key=lambda g: (-sizes[g], span[g])):
            first, last = span[group]
            for slot in slots:
                spans = slot[1]
                at = bisect.bisect_left(spans, [first, last])
                if (at == 0 or spans[at - 1][1] < first) and (at == len(spans) or last < spans[at][0]):
                    break
            else:
                slot = (sizes[group], [], [])
                slots.append(slot)
                at = 0
            slot[1].insert(at, [first, last])
            slot[2].extend(members[group])
        return [(size, ids) for size, _, ids in slots]

    @staticmethod
    def _check_constant(tensor: Tensor):
        ref = tensor.constant
        if ref.size != tensor.constant_nbytes:
            raise registry.OpError(
                f"constant {tensor.label} ({ref.key or 'inline'}) has {ref.size} bytes, but "
                f"{tensor.constant_dtype or tensor.dtype}{list(tensor.max_sizes)} needs {tensor.constant_nbytes}"
            )

    def write_constant(self, buffer, tensor: Tensor, ranges):
        """Queue bytes of constant `tensor`'s data as the ops see it (float32 for an f16
        program's) into `buffer`: for each (buffer offset, offset in the tensor, size) of
        `ranges` (multiples of 4), in one call to the device (Device.write_buffer_ranges)."""
        self._check_constant(tensor)
        for _, offset, size in ranges:
            if offset < 0 or offset + size > tensor.max_nbytes:
                raise registry.OpError(f"bytes [{offset}, {offset + size}) are outside constant {tensor.label}")
        if _widened(tensor):
            image = self._widened_constant(tensor)
            for buffer_offset, offset, size in ranges:
                self._widening.copy(image, buffer, size, src_offset=offset, dst_offset=buffer_offset)
            return
        start = tensor.constant.offset
        self.device.write_buffer_ranges(buffer, self._data, [(to, start + offset, size) for to, offset, size in ranges])

    def _upload_constant(self, tensor: Tensor):
        self._check_constant(tensor)
        if _widened(tensor):
            return self._widened_constant(tensor)
        return self._upload(tensor.constant, f"{tensor.label}.constant")

    def _widened_constant(self, tensor: Tensor):
        """The float32 image of an f16 program's float16 constant, made on first use: its
        bytes uploaded as they are, widened by a dispatch that build submits with the
        copies from the image (write_constant) once every op is built."""
        image = self._widened.get(tensor.id)
        if image is None:
            halves = self._upload(tensor.constant, f"{tensor.label}.float16")
            self._widening_scratch.append(halves)
            image = self._widener.widen(self._widening, halves, numel(tensor.max_sizes), f"{tensor.label}.constant")
            self._widened[tensor.id] = image
        return image

    def _finish_widening(self):
        """Submit the widening and its copies; free the float16 uploads, and the images that
        only served copies (those of constants concatenated by fusion)."""
        self.device.submit(self._widening)
        kept = {id(t.buffer) for t in self.values if isinstance(t, Tensor) and t.buffer is not None}
        for buffer in self._widening_scratch + [b for b in self._widened.values() if id(b) not in kept]:
            self.device.destroy_buffer(buffer)
        self._widened.clear()
        self._widening = self._widener = None
        self._widening_scratch = []

    def _upload(self, ref, label: str):
        """A buffer holding a constant's bytes as the program stores them."""
        # Whole vec4s: kernels may read a constant as vec4s (the KV caches in sdpa.wgsl).
        buffer = self.device.create_buffer((ref.size + 15) & ~15, STORAGE_USAGE, label=label)
        aligned = ref.size & ~3
        self.device.write_buffer(buffer, self._data, data_offset=ref.offset, size=aligned)
        if aligned != ref.size:  # WebGPU writes whole words: pad the last few bytes
            tail = bytes(self._read_bytes(ref.offset + aligned, ref.size - aligned)).ljust(4, b"\0")
            self.device.write_buffer(buffer, tail, buffer_offset=aligned)
        return buffer

    def constant_bytes(self, tensor: Tensor) -> bytes:
        """The data of a constant tensor, or of one sharing a constant's buffer (prepack)."""
        source = self.values[self._aliases.get(tensor.id, tensor.id)]
        if source.constant is None:
            raise registry.OpError(f"{tensor.label} is not a constant")
        self._check_constant(source)
        data = bytes(self._read_bytes(source.constant.offset, source.constant.size))
        return widen_on_host(data) if _widened(source) else data

    def _read_bytes(self, offset, size):
        if is_js_buffer(self._data):
            import js

            return js.Uint8Array.new(self._data, offset, size).to_bytes()
        return memoryview(self._data)[offset : offset + size]

    def int_on_gpu(self, value_id: int):
        """A uniform buffer holding an Int or SymInt argument's value as an i32 (16 bytes),
        for kernels that read it on the GPU; a SymInt's is rewritten whenever its value
        changes. Made on the first call (from an op's build), shared by every reader, and
        by the SymInts that always hold the same value (OpHandler.value_key)."""
        value = self.values[value_id]
        if isinstance(value, SymInt):
            if value.buffer is None:
                key = self._value_keys.get(value_id)
                value.buffer = self._keyed_int_buffers.get(key) if key is not None else None
                if value.buffer is None:
                    value.buffer = self.device.create_buffer(16, UNIFORM_USAGE, label=f"symint{value_id}")
                    if key is not None:
                        self._keyed_int_buffers[key] = value.buffer
                self.write_if_changed(value.buffer, _int_bytes(value.value))
            return value.buffer
        if value_id not in self._int_buffers:
            buffer = self.device.create_buffer(16, UNIFORM_USAGE, label=f"int{value_id}")
            self.device.write_buffer(buffer, _int_bytes(value))
            self._int_buffers[value_id] = buffer
        return self._int_buffers[value_id]

    # --- execute -----------------------------------------------------------------------
    def write_if_changed(self, buffer, data: bytes):
        key = id(buffer)
        if self._last_written.get(key) != data:
            self.device.write_buffer(buffer, data)
            self._last_written[key] = data
            self._written_buffers[key] = buffer

    def _mark_all_stale(self):
        """Resize every op in the next run (after build, or a failed run: its state is
        unknown), and forget the shape states until that full resize has been made."""
        self._stale_heap = list(range(len(self.ops)))
        self._stale = set(self._stale_heap)
        self._served.clear()
        self._schedule = None
        self._tracking = False
        self._shape_states.clear()
        for changes in (self._varied_ops, self._varied_values, self._resized_ops, self._changed_values):
            changes.clear()

    def value_changed(self, value_id: int, host_data_only: bool = False):
        """Note that a value's live sizes, host data or SymInt value changed: the ops after
        the one being resized that read it are resized in this run, but for those that
        read a SymInt on the GPU and whose recording serves its new value. When only an
        input's data changed (`host_data_only`), only the ops that read it on the host:
        the others read the data on the GPU (a sampled token: the embedding)."""
        value = self.values[value_id]
        if self._tracking:
            if value_id not in self._varied_values:
                # Unchanged since the full resize until now: so in every state kept.
                self._varied_values.add(value_id)
                for state in self._shape_states.values():
                    state.values[value_id] = self._base_values[value_id]
            self._changed_values.add(value_id)
        readers = self._host_readers.get(value_id, ()) if host_data_only else self._consumers.get(value_id, ())
        if type(value) is SymInt:
            if value.buffer is not None:
                self.write_if_changed(value.buffer, _int_bytes(value.value))
            low, high, unserved = self._served.get(value_id) or self._serving(value_id)
            if low <= value.value <= high:
                readers = unserved
        for index in readers:
            if index > self._resizing and index not in self._stale:
                served = self.ops[index].gpu_int_ranges.get(value_id)
                if served is not None and served[0] <= value.value <= served[1]:
                    continue
                self._stale.add(index)
                heapq.heappush(self._stale_heap, index)

    def _serving(self, value_id: int):
        """The _served entry of a SymInt, made from its readers' gpu_int_ranges now."""
        ranges, unserved = [], []
        for index in self._consumers.get(value_id, ()):
            served = self.ops[index].gpu_int_ranges.get(value_id)
            if served is None:
                unserved.append(index)
            else:
                ranges.append(served)
        low, high = (max(r[0] for r in ranges), min(r[1] for r in ranges)) if ranges else (1, 0)
        self._served[value_id] = entry = (low, high, unserved)
        return entry

    def set_inputs(self, inputs, fed_on_gpu=()):
        """Set the inputs' live sizes and host values and write their data. Inputs at the
        positions in `fed_on_gpu` are written by a command submitted before the graph (a
        token fed from the last run): their given values are placeholders, neither
        written nor kept (submit_top_k refuses to feed an input whose values an op reads
        on the host)."""
        if len(inputs) != len(self.inputs):
            raise GPUError(f"the graph takes {len(self.inputs)} inputs, got {len(inputs)}")
        shapes = tuple(None if tensor is None else tuple(given.shape) for tensor, given in zip(self.inputs, inputs))
        if shapes != self._shape:  # the shapes now were checked when they were set
            for position, (tensor, shape) in enumerate(zip(self.inputs, shapes)):
                if tensor is not None and (len(shape) != len(tensor.max_sizes) or any(s > m for s, m in zip(shape, tensor.max_sizes))):
                    raise GPUError(
                        f"input {position}: shape {list(shape)} does not fit the exported bound {list(tensor.max_sizes)}"
                    )
            if self._tracking and self._shape is not None:
                self._switch_shape(shapes)
            self._shape = shapes
        try:
            self._write_inputs(inputs, shapes, fed_on_gpu)
        except BaseException:
            self._mark_all_stale()  # some inputs may have changed, their readers not marked
            raise

    def _write_inputs(self, inputs, shapes, fed_on_gpu):
        """set_inputs' work once the inputs' `shapes` are checked and their state is set."""
        for position, tensor in enumerate(self.inputs):
            if tensor is None:
                continue
            host, shape = inputs[position], shapes[position]
            fed = position in fed_on_gpu
            if shape == tensor.sizes and fed:
                continue  # nothing the host knows changed
            values = _flat_values(host)
            if len(values) != numel(shape):
                raise GPUError(f"input {position}: {len(values)} values for shape {list(shape)}")
            typecode = _HOST_TYPECODES.get(tensor.dtype)
            if typecode is None:
                raise GPUError(f"input {position}: inputs of dtype {tensor.dtype} are not supported")
            try:
                staged = array.array(typecode, values)
            except OverflowError:
                raise GPUError(f"input {position}: a value does not fit in 32 bits") from None
            host_values = staged.tolist()
            if shape != tensor.sizes or host_values != tensor.host_values:
                resized = shape != tensor.sizes
                tensor.sizes = shape
                tensor.host_values = host_values
                self.value_changed(tensor.id, host_data_only=not resized)
            # Unchanged data is written too: the input's buffer may serve later tensors.
            if len(staged) and not fed and tensor.id in self._inputs_on_gpu:
                self.device.write_buffer(tensor.buffer, staged)

    def propagate_resize(self):
        """Resize the stale ops in graph order; each one's changed outputs make their
        readers stale in turn."""
        tracking = self._tracking
        try:
            while self._stale_heap:
                index = heapq.heappop(self._stale_heap)
                self._stale.discard(index)
                self._resizing = index
                op = self.ops[index]
                if tracking:
                    if index not in self._varied_ops:
                        self._note_first_resize(index)
                    self._resized_ops.add(index)
                had_ranges = bool(op.gpu_int_ranges)
                op.resize()
                if had_ranges or op.gpu_int_ranges:
                    self._served.clear()
                if self._records_commands[index]:
                    self._to_record.append(index)
        except BaseException:
            self._mark_all_stale()  # a failed resize leaves its readers unknown: redo all
            raise
        finally:
            self._resizing = -1
        if not tracking:  # the full resize is made: track changes from here
            self._base_values = {v.id: _value_state(v) for v in self.values if type(v) in (Tensor, SymInt)}
            self._tracking = True

    def record(self):
        """The graph's schedule: a recorder of every op's commands, re-recording the ops
        resized since the last call. An op whose commands changed but not their number
        (a copy at the position: KV-cache rows on CPU adapters) is patched into the
        schedule in place, unless the schedule waits in an open batch of submits
        (Device.batched_submits); any other change rebuilds it."""
        rebuild = self._schedule is None
        try:
            for index in self._to_record:
                recorder = self.device.record()
                self.ops[index].record(recorder)
                old, new = self._op_commands[index], recorder.commands
                if new == old:
                    continue
                self._op_commands[index] = new
                if rebuild or len(new) != len(old) or self._schedule.pinned:
                    rebuild = True
                else:
                    self._schedule.replace(self._op_starts[index], new)
        except BaseException:
            self._to_record.clear()
            self._mark_all_stale()
            raise
        self._to_record.clear()
        if rebuild:
            self._schedule = self.device.record()
            self._op_starts = []
            for commands in self._op_commands:
                self._op_starts.append(len(self._schedule.commands))
                self._schedule.extend(commands)
        return self._schedule

    # --- shape states (see the module docstring) -----------------------------------------
    def _switch_shape(self, shape: tuple):
        """Keep the state of the inputs' shape now, and restore `shape`'s if it is kept (else
        the run resizes as usual, into a schedule of its own)."""
        if self._stale_heap:  # a caller resized without recording, or set inputs twice
            self.propagate_resize()
        if self._to_record:
            self.record()
        restored = self._shape_states.get(shape)
        if restored is not None:
            self._shape_states.move_to_end(shape)  # not the one evicted while keeping
        self._keep_shape_state()
        if restored is not None:
            self._restore_shape_state(restored)
        else:
            self._schedule = None  # the one made so far stays the kept shape's
        self._resized_ops = set()
        self._changed_values = set()

    def forget_shape(self, shapes: tuple):
        """Drop the state kept for inputs of `shapes` (a shape per input, None for an input
        the graph does not read): the next run of that shape resizes as for a new one. The
        benchmark times prompts so, as most of a chat's prompts have lengths not seen before."""
        self._shape_states.pop(tuple(tuple(shape) if shape is not None else None for shape in shapes), None)

    def _keep_shape_state(self):
        if not KEPT_SHAPES:
            return
        state = self._shape_states.get(self._shape)
        if state is None:
            state = self._shape_states[self._shape] = _ShapeState({}, {})
            ops, values = self._varied_ops, self._varied_values
            while len(self._shape_states) > KEPT_SHAPES:
                self._shape_states.popitem(last=False)
        else:
            # Restored when the inputs took this shape: only what changed since differs.
            self._shape_states.move_to_end(self._shape)
            ops, values = self._resized_ops, self._changed_values
        for index in ops:
            state.ops[index] = self._op_state(index)
        for value_id in values:
            state.values[value_id] = _value_state(self.values[value_id])
        state.written = dict(self._last_written)
        state.op_commands = list(self._op_commands)
        state.schedule, state.op_starts = self._schedule, self._op_starts

    def _restore_shape_state(self, state: _ShapeState):
        for index, held in state.ops.items():
            for (part, names), values in zip(self._parts[index], held):
                part.__dict__.update(zip(names, values))
        for value_id, held in state.values.items():
            value = self.values[value_id]
            if type(value) is SymInt:
                value.value = held
            else:
                value.sizes, value.host_values = held
        written = self._last_written
        for key, data in state.written.items():
            if written[key] != data:
                self.device.write_buffer(self._written_buffers[key], data)
                written[key] = data
        self._op_commands = list(state.op_commands)
        self._schedule, self._op_starts = state.schedule, state.op_starts
        self._served.clear()

    def _note_first_resize(self, index: int):
        """Before op `index` is resized the first time since the full resize: note it, and
        put its state as it has been since then into every kept state."""
        self._varied_ops.add(index)
        unchanged = self._op_state(index)
        for state in self._shape_states.values():
            state.ops[index] = unchanged

    def op_parts(self, index: int) -> list:
        """[(part, the attributes its resize sets)] for op `index` and the OpParts it keeps
        (see OpPart)."""
        parts = self._parts.get(index)
        if parts is None:
            found, pending = [], [self.ops[index]]
            while pending:
                part = pending.pop()
                if any(part is known for known in found):
                    continue  # a helper's reference back to its op
                found.append(part)
                for attribute in vars(part).values():
                    items = attribute if isinstance(attribute, (list, tuple)) else (attribute,)
                    pending.extend(item for item in items if isinstance(item, registry.OpPart))
            parts = self._parts[index] = [(part, part.resized_attributes()) for part in found]
        return parts

    def _op_state(self, index: int) -> tuple:
        """The values of the attributes resize() sets, per part of op_parts(index): tuples
        (few containers for Python's garbage collector to walk), None for one not set yet."""
        return tuple(tuple(map(part.__dict__.get, names)) for part, names in self.op_parts(index))

    def _record_run(self, inputs, fed_on_gpu=()):
        if not self.built:
            raise GPUError("build() the graph before executing it")
        self.set_inputs(inputs, fed_on_gpu)
        self.propagate_resize()
        return self.record()

    def submit(self, *inputs):
        """Run the graph on `inputs` without reading anything back (e.g. an early prefill
        chunk, whose only effect that matters is on the KV cache)."""
        self.device.submit(self._record_run(inputs))

    async def execute(self, *inputs) -> list[HostTensor]:
        """Run the graph on `inputs` (HostTensor, or numpy-like arrays); returns the outputs."""
        self.submit(*inputs)
        results = []
        for tensor in self.outputs:
            if tensor.dtype != "float32":
                raise GPUError(f"reading outputs of dtype {tensor.dtype} is not supported")
            data = await self.device.read_buffer(tensor.buffer, 0, (tensor.nbytes + 3) & ~3)
            values = array.array("f")
            values.frombytes(bytes(data[: tensor.nbytes]))
            results.append(HostTensor(tensor.sizes, values, tensor.dtype))
        return results

    async def execute_top_k(self, *inputs, k: int = 1, penalty: float = 1.0, penalized_ids=()) -> list[tuple[float, int]]:
        """Run the graph and return the k largest values of its first output (a logits
        row) as (value, index) pairs, largest first, reading back only those. Logits of
        `penalized_ids` are first divided (if positive) or multiplied by `penalty`."""
        await self.build_top_k()
        return await self.submit_top_k(*inputs, k=k, penalty=penalty, penalized_ids=penalized_ids)

    def submit_top_k(self, *inputs, k: int = 1, penalty: float = 1.0, penalized_ids=(), token_from_last_run=False, draw=None):
        """execute_top_k's work submitted now; returns an awaitable of its result, so
        that a next run can be submitted before the host waits for this one.

        With a `draw` (ops.topk.Draw), the result is instead the one (value, index) pair
        drawn from the top k on the GPU (sampled decoding). With `token_from_last_run`,
        the first element of input 0 (a [1, 1] token input) is the last run's top-1 index,
        or the one it drew, copied on the GPU: the value given for it is only a
        placeholder; a `penalty` then applies to the last run's penalized tokens and that
        one (TopK.prepare's continued window)."""
        if self._top_k is None:
            raise GPUError("build_top_k() the graph before submit_top_k")
        tokens = self.inputs[0]
        if token_from_last_run and tokens is not None and tokens.id in self._host_readers:
            raise GPUError("the last run's token cannot be fed on the GPU: an op reads the token input on the host")
        schedule = self._record_run(inputs, (0,) if token_from_last_run else ())
        logits = self.outputs[0]
        first = []
        if token_from_last_run:
            if tokens is None or tokens.sizes != (1, 1):
                raise GPUError("feeding the last run's token needs a [1, 1] token input")
            first = [self._top_k.feed_pick(tokens.buffer)]
        picks = self.device.submit(
            *first,
            schedule,
            self._top_k.prepare(logits.numel, k, penalty, penalized_ids, draw, continue_window=token_from_last_run),
            read=self._top_k.result_bytes(k, drawn=draw is not None),
        )
        return self._top_k.picks(picks, 1 if draw is not None else k)

    async def build_top_k(self):
        """Make the top-k reducer over the first output (once; execute_top_k does it)."""
        if self._top_k is None:
            logits = self.outputs[0]
            top_k = TopK(self.device, logits.buffer, numel(logits.max_sizes), registry.kernel_set_for(self.device))
            await top_k.build()
            self._top_k = top_k


def _widened(tensor: Tensor) -> bool:
    """Whether a constant runs as float32 though the program stores it as float16."""
    return tensor.constant_dtype == "float16" and tensor.dtype == "float32"


def _value_state(value):
    """What a shape state keeps of a tensor (live sizes, host values) or a SymInt (value)."""
    return value.value if type(value) is SymInt else (value.sizes, value.host_values)


def _int_bytes(value: int) -> bytes:
    return struct.pack("<i12x", value)


def _flat_values(host):
    """Flat values of a HostTensor, array.array, or a numpy array (where numpy exists)."""
    if isinstance(host, HostTensor):
        return host.values
    if hasattr(host, "ravel"):
        return host.ravel().tolist()
    raise GPUError(f"unsupported input type {type(host).__name__}: use HostTensor or a numpy array")
