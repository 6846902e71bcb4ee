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
A change of input shape restores what the graph kept for that shape (shape_states.py).
"""

from __future__ import annotations

import asyncio
import heapq

from ..gpu import STORAGE_USAGE, Device, GPUError
from ..ops import load_all_ops, registry
from ..values import SymInt, Tensor, ValueList
from .constants import Constants
from .fit import check_fit
from .fusion import constant_aliases, fuse, readers
from .host_io import HostTensor, read_output, staged_input
from .memory_plan import plan_memory
from .program_values import runtime_value
from .shape_states import ShapeStates
from .uniforms import Uniforms, int_bytes


class GraphRuntime:
    def __init__(self, device: Device, graph, data, kernel_set: str | None = None):
        """`kernel_set`: the kernels its ops run, "cpu" or "gpu" (registry.KERNEL_SETS);
        None for those that suit the device's adapter. Fusion decides by it too."""
        if kernel_set is not None and kernel_set not in registry.KERNEL_SETS:
            raise GPUError(f"kernel_set must be one of {registry.KERNEL_SETS} or None, got {kernel_set!r}")
        load_all_ops()
        self.device = device
        self.kernel_set = kernel_set or registry.default_kernel_set(device)
        self._data = data  # the .pte bytes, a JS ArrayBuffer or a RangedFile: constants upload from it
        self.values = [runtime_value(i, v) for i, v in enumerate(graph.values)]
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
        self._inputs_on_gpu = {
            t.id for t in self.inputs if t is not None and any(not self.ops[i].host_only for i in self._consumers.get(t.id, ()))
        }
        # Input id → the ops reading its values on the host (an input none reads so: absent):
        # the only ones a change of its data alone (a decode step's position) resizes.
        self._host_readers: dict[int, list[int]] = {}
        for tensor in self.inputs:
            on_host = [i for i in self._consumers.get(tensor.id, ()) if self.ops[i].reads_host_values] if tensor is not None else []
            if on_host:
                self._host_readers[tensor.id] = on_host
        self.uniforms = Uniforms(device, {op.out.id: key for op in self.ops if (key := op.value_key()) is not None})
        self.constants: Constants | None = None  # made at build
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
        self._shape = None  # the inputs' shapes now
        self.shape_states = ShapeStates(self.ops, self.values)

    # --- values ----------------------------------------------------------------------
    def _io_tensor(self, value_id, role):
        value = self.values[value_id]
        if not isinstance(value, Tensor):
            raise registry.OpError(f"graph {role} value {value_id} is a {type(value).__name__}, not a tensor")
        return value

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

    def input_read_on_host(self, position: int) -> bool:
        """Whether an op reads input `position`'s values on the host (then it cannot be fed
        by a command on the GPU)."""
        tensor = self.inputs[position]
        return tensor is not None and tensor.id in self._host_readers

    # --- build -------------------------------------------------------------------------
    async def build(self):
        aliases = constant_aliases(self.ops)
        self._keep_float16_constants()
        self.constants = constants = Constants(self.device, self._data, self.values, aliases)
        await constants.start_widening()
        # Constants no op reads (those of linears fusion concatenated) stay on the host, as
        # do those all their readers store themselves (split across buffers).
        stored = [op.stored_constants() for op in self.ops]
        read = [
            t for t in self.values
            if isinstance(t, Tensor) and t.constant is not None and t.id not in aliases and t.id in self._consumers
        ]
        uploaded = [t for t in read if not all(t.id in stored[index] for index in self._consumers[t.id])]
        split = [t for t in read if all(t.id in stored[index] for index in self._consumers[t.id])]
        # Partial results an op merges in a second dispatch (split attention, split-K GEMMs):
        # one buffer for the graph, whose ops run one after another. Whole vec4s.
        scratch_bytes = max(16, -(-max((op.scratch_bytes() for op in self.ops), default=0) // 16) * 16)
        slots = self._plan_memory(set(aliases))
        # Before any upload: a model too large for the device is refused whole, not part way.
        check_fit(self.device, uploaded, split, slots, scratch_bytes)
        for tensor in uploaded:
            tensor.buffer = constants.upload(tensor)
        # Fill the writable binding slots of outputs an op does not have (linear_q4gsw).
        self.spare_buffers = [self.device.create_buffer(4, STORAGE_USAGE, label=f"spare{i}") for i in range(2)]
        self.scratch = self.device.create_buffer(scratch_bytes, STORAGE_USAGE, label="scratch")
        for slot, (size, tensor_ids) in enumerate(slots):
            buffer = self.device.create_buffer(size, STORAGE_USAGE, label=f"activations{slot}")
            for tensor_id in tensor_ids:
                self.values[tensor_id].buffer = buffer
        for out_id, in_id in aliases.items():
            self.values[out_id].buffer = self.values[in_id].buffer
        await constants.keep([t for op in self.ops for t in op.host_constants()])
        # All ops at once: where pipelines compile asynchronously (the browser), they
        # compile side by side while the host goes on with the next ops.
        outcomes = await asyncio.gather(*(op.build() for op in self.ops), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        await constants.flush()
        constants.finish()
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

    def _plan_memory(self, aliased: set[int]) -> list[tuple[int, list[int]]]:
        """Buffers for the non-constant tensors not in `aliased` (outputs that share a
        constant's buffer): (size, tensor ids) each (memory_plan.py)."""
        op_uses = []
        for op in self.ops:
            used = []
            for arg in op.args:
                value = self.values[arg]
                for item in [self.values[i] for i in value.items] if isinstance(value, ValueList) else [value]:
                    if isinstance(item, Tensor) and item.constant is None:
                        used.append(item.id)
            op_uses.append(used)
        planned = {
            v.id: v.max_nbytes for v in self.values if isinstance(v, Tensor) and v.constant is None and v.id not in aliased
        }
        inputs = [t.id for t in self.inputs if t is not None]
        return plan_memory(op_uses, planned, self._view_sources(), inputs, [t.id for t in self.outputs])

    def write_constant(self, buffer, tensor: Tensor, ranges):
        """Queue bytes of constant `tensor` into `buffer` (Constants.write)."""
        self.constants.write(buffer, tensor, ranges)

    def constant_bytes(self, tensor: Tensor) -> bytes:
        """The data of a constant tensor, or of one sharing a constant's buffer (prepack)."""
        return self.constants.bytes_of(tensor)

    def int_on_gpu(self, value_id: int):
        """A uniform buffer holding an Int or SymInt argument's value as an i32 (16 bytes),
        for kernels that read it on the GPU; a SymInt's is rewritten whenever its value
        changes. Made on the first call (from an op's build), shared by every reader, and
        by the SymInts that always hold the same value (OpHandler.value_key)."""
        return self.uniforms.int_buffer(value_id, self.values[value_id])

    # --- execute -----------------------------------------------------------------------

    def _mark_all_stale(self):
        """Resize every op in the next run (after build, or a failed run: its state is
        unknown), and forget the shape states until that full resize has been made."""
        self._stale_heap = list(range(len(self.ops)))
        self._stale = set(self._stale_heap)
        self._served.clear()
        self._schedule = None
        self.shape_states.reset()

    def value_changed(self, value_id: int, host_data_only: bool = False):
        """Note that a value's live sizes, host data or SymInt value changed: the ops after
        the one being resized that read it are resized in this run, but for those that
        read a SymInt on the GPU and whose recording serves its new value. When only an
        input's data changed (`host_data_only`), only the ops that read it on the host:
        the others read the data on the GPU (a sampled token: the embedding)."""
        value = self.values[value_id]
        if self.shape_states.tracking:
            self.shape_states.note_change(value_id)
        readers = self._host_readers.get(value_id, ()) if host_data_only else self._consumers.get(value_id, ())
        if type(value) is SymInt:
            if value.buffer is not None:
                self.uniforms.write_if_changed(value.buffer, int_bytes(value.value))
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
        written nor kept (callers refuse to feed an input read on the host:
        input_read_on_host)."""
        if len(inputs) != len(self.inputs):
            raise GPUError(f"the graph takes {len(self.inputs)} inputs, got {len(inputs)}")
        shapes = tuple(None if tensor is None else tuple(given.shape) for tensor, given in zip(self.inputs, inputs))
        if shapes != self._shape:  # the shapes now were checked when they were set
            for position, (tensor, shape) in enumerate(zip(self.inputs, shapes)):
                if tensor is not None and (len(shape) != len(tensor.max_sizes) or any(s > m for s, m in zip(shape, tensor.max_sizes))):
                    raise GPUError(
                        f"input {position}: shape {list(shape)} does not fit the exported bound {list(tensor.max_sizes)}"
                    )
            if self.shape_states.tracking and self._shape is not None:
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
            staged = staged_input(position, tensor, host, shape)
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
        states = self.shape_states
        tracking = states.tracking
        try:
            while self._stale_heap:
                index = heapq.heappop(self._stale_heap)
                self._stale.discard(index)
                self._resizing = index
                op = self.ops[index]
                if tracking:
                    states.note_resize(index)
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
        if not tracking:
            states.start_tracking()

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

    def _switch_shape(self, shape: tuple):
        """Keep the state of the inputs' shape now, and restore `shape`'s if it is kept (else
        the run resizes as usual, into a schedule of its own)."""
        if self._stale_heap:  # a caller resized without recording, or set inputs twice
            self.propagate_resize()
        if self._to_record:
            self.record()
        written = self.uniforms.last_written
        restored = self.shape_states.switch(self._shape, shape, written, self._op_commands, self._schedule, self._op_starts)
        if restored is None:
            self._schedule = None  # the one made so far stays the kept shape's
            return
        self.uniforms.restore(restored.written)
        self._op_commands = list(restored.op_commands)
        self._schedule, self._op_starts = restored.schedule, restored.op_starts
        self._served.clear()

    def record_run(self, inputs, fed_on_gpu=()):
        """Set `inputs` (see set_inputs for `fed_on_gpu`), resize what they changed and
        return the schedule to submit: a run for callers that submit more with it."""
        if not self.built:
            raise GPUError("build() the graph before executing it")
        self.set_inputs(inputs, fed_on_gpu)
        self.propagate_resize()
        return self.record()

    def submit(self, *inputs):
        """Run the graph on `inputs` without reading anything back (e.g. an early prefill
        chunk, whose only effect that matters is on the KV cache)."""
        self.device.submit(self.record_run(inputs))

    async def execute(self, *inputs) -> list[HostTensor]:
        """Run the graph on `inputs` (HostTensor, or numpy-like arrays); returns the outputs."""
        self.submit(*inputs)
        return [await read_output(self.device, tensor) for tensor in self.outputs]
