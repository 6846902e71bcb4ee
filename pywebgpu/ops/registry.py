"""The op registry and the base class of op handlers.

A handler is made once per op call in the graph. Its life follows the graph's:
- `__init__` reads its arguments (fail here on anything unsupported: at load, not at run);
- `aliases()` may declare outputs that share an input's buffer (no copy, no kernel);
- `view_of()` names an (output, input) pair holding the same bytes: the graph lets the
  output share the input's buffer where no other tensor reuses that memory meanwhile;
- `value_key()` says which SymInts always hold the same value (they share a GPU buffer);
- `float16_constants()` names float16 constants (of an f16 program) that it reads and
  writes as stored: the runtime keeps a constant so only if every op reading it does,
  then its dtype is "float16" from build on; other float16 constants run as float32;
- `build()` creates pipelines, parameter buffers and bind groups, once;
- `resize()` derives output live sizes (`set_sizes`) and SymInts (`set_symint`) from its
  arguments' live sizes, host data and SymInt values, and rewrites parameters that changed.
  It must depend on nothing else: the runtime calls it only when one of those changed.
  What it sets is kept in attributes of the op or of an `OpPart` the op keeps, named in
  their classes' RESIZED (the runtime keeps them per input shape). An op that reads a
  SymInt argument on the GPU (`GraphRuntime.int_on_gpu`) sets, in `gpu_int_ranges`, the
  values its recording serves: a change within needs no resize;
- `record()` adds the op's dispatches to a recorder, from the state `resize` left (the
  runtime keeps the commands and re-records only after a resize).
"""

from __future__ import annotations

import struct

from ..gpu import UNIFORM_USAGE, GPUError, linear_grid
from ..kernels import load_wgsl
from ..values import SymInt, Tensor, ValueList

HANDLERS: dict[str, type] = {}
# The kinds of kernels an op may have: "cpu" for CPU-emulated adapters (SwiftShader,
# lavapipe), where a workgroup's invocations run one SIMD batch after another so shared
# memory and barriers only cost, and "gpu" for the others.
KERNEL_SETS = ("cpu", "gpu")


class OpError(GPUError):
    """An op call the runtime cannot run (unknown op, unsupported arguments or shapes)."""


def default_kernel_set(device) -> str:
    """The kernel set (see KERNEL_SETS) that suits `device`'s adapter."""
    return "cpu" if device.adapter.is_fallback else "gpu"


def register(*names):
    def decorate(cls):
        for name in names:
            HANDLERS[name] = cls
        return cls

    return decorate


def handler_for(name: str, index: int):
    try:
        return HANDLERS[name]
    except KeyError:
        raise OpError(f"op #{index} {name!r} is not supported by pywebgpu") from None


class OpPart:
    """An object whose attributes an op's resize() sets: the op itself, and what it keeps
    that resize() sets too (a fused op's parts, a dispatch helper). A class names those
    attributes in RESIZED (its bases' count too): the graph keeps them per input shape
    and restores them when the inputs return to that shape (GraphRuntime's shape states).
    So resize() sets nothing else, and assigns them, never changes them in place; one not
    set yet is restored as None."""

    RESIZED: tuple[str, ...] = ()

    @classmethod
    def resized_attributes(cls) -> tuple[str, ...]:
        """RESIZED of the class and its bases."""
        names = cls.__dict__.get("_resized_attributes")
        if names is None:
            names = tuple(dict.fromkeys(name for klass in reversed(cls.__mro__) for name in vars(klass).get("RESIZED", ())))
            cls._resized_attributes = names
        return names


class OpHandler(OpPart):
    RESIZED = ("gpu_int_ranges",)

    # True for ops that read their tensor arguments' live sizes and host values only,
    # never their buffers: a graph input read by such ops alone is not written to the GPU.
    host_only = False
    # True for ops whose results depend on an input's values as the caller gave them (on
    # the host): such an input cannot be fed by a command on the GPU instead.
    reads_host_values = False

    def __init__(self, graph, index: int, name: str, args: tuple):
        self.graph = graph
        self.index = index
        self.name = name
        self.args = args
        # SymInt argument id → (lowest, highest) value that the op's commands and
        # parameters, as last resized, serve (the op reads that SymInt on the GPU).
        self.gpu_int_ranges: dict[int, tuple[int, int]] = {}

    # --- argument access -----------------------------------------------------------
    def fail(self, message: str):
        raise OpError(f"op #{self.index} {self.name}: {message}")

    def arg_id(self, arg: int) -> int:
        """The value id of argument `arg`; a call with fewer arguments is refused."""
        if not -len(self.args) <= arg < len(self.args):
            self.fail(f"argument {arg} is missing (the call has {len(self.args)} arguments)")
        return self.args[arg]

    def value(self, arg: int):
        return self.graph.values[self.arg_id(arg)]

    def tensor(self, arg: int) -> Tensor:
        value = self.value(arg)
        if not isinstance(value, Tensor):
            self.fail(f"argument {arg} should be a tensor, got {type(value).__name__}")
        return value

    def optional_tensor(self, arg: int) -> Tensor | None:
        return None if self.value(arg) is None else self.tensor(arg)

    def int_arg(self, arg: int) -> int:
        """An int argument's current value (a constant, or a SymInt's value now)."""
        return self.graph.int_value(self.arg_id(arg), self)

    def ints_arg(self, arg: int) -> list[int]:
        """An int list argument's current values (IntList, or ValueList of ints/SymInts)."""
        value = self.value(arg)
        if isinstance(value, ValueList):
            return [self.graph.int_value(i, self) for i in value.items]
        if isinstance(value, (list, tuple)):
            return list(value)
        self.fail(f"argument {arg} should be an int list, got {type(value).__name__}")

    def float_arg(self, arg: int) -> float:
        value = self.value(arg)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(f"argument {arg} should be a number, got {type(value).__name__}")
        return float(value)

    def symint_out(self, arg: int) -> SymInt:
        value = self.value(arg)
        if not isinstance(value, SymInt):
            self.fail(f"argument {arg} should be a SymInt, got {type(value).__name__}")
        return value

    def normalize_dim(self, dim: int, ndim: int) -> int:
        if not -max(ndim, 1) <= dim < max(ndim, 1):
            self.fail(f"dim {dim} out of range for a {ndim}-d tensor")
        return dim % max(ndim, 1)

    def set_sizes(self, tensor: Tensor, sizes):
        """Set an output's live sizes, refusing sizes above what its buffer was planned for."""
        sizes = tuple(map(int, sizes))
        if sizes == tensor.sizes:
            return
        if len(sizes) != len(tensor.max_sizes) or any(s > m or s < 0 for s, m in zip(sizes, tensor.max_sizes)):
            self.fail(f"output {tensor.label} would be {list(sizes)}, beyond its planned bound {list(tensor.max_sizes)}")
        tensor.sizes = sizes
        self.graph.value_changed(tensor.id)

    def set_symint(self, symint: SymInt, value: int):
        """Set a SymInt output's value (its readers are resized when it changes)."""
        if value != symint.value:
            symint.value = value
            self.graph.value_changed(symint.id)

    # --- GPU helpers -----------------------------------------------------------------
    @property
    def kernel_set(self) -> str:
        """"cpu" or "gpu": the kind of kernels to run, the graph's choice (see KERNEL_SETS)."""
        return self.graph.kernel_set

    async def make_pipeline(self, kernel: str, constants: dict | None = None, entry_point: str = "main"):
        return await self.graph.device.compute_pipeline(
            load_wgsl(kernel), label=f"{kernel}#{self.index}", entry_point=entry_point, constants=constants
        )

    def scratch_bytes(self) -> int:
        """Bytes of the graph's scratch buffer (`graph.scratch`) this op needs at most: partial
        results that a second dispatch of the op merges. Asked before the ops build."""
        return 0

    def params_buffer(self, size: int):
        return self.graph.device.create_buffer(size, UNIFORM_USAGE, label=f"{self.name}#{self.index}.params")

    def write_params(self, buffer, data: bytes):
        """Rewrite a parameter buffer only when its bytes changed."""
        self.graph.uniforms.write_if_changed(buffer, data)

    # --- life cycle (overridden) ---------------------------------------------------
    def aliases(self) -> dict:
        return {}

    def view_of(self) -> tuple[int, int] | None:
        return None

    def value_key(self):
        """For an op that makes a SymInt: a key that every SymInt always holding the same
        value shares (they then share the buffer that holds it on the GPU), or None."""
        return None

    def float16_constants(self) -> set:
        """Ids of the float16 constants this op can take as stored (see the module doc)."""
        return set()

    def stored_constants(self) -> set:
        """Ids of the constants this op stores itself, split across buffers (row_blocks.py),
        which the graph leaves to it instead of uploading them whole. Asked before the ops build."""
        return set()

    def host_constants(self) -> tuple:
        """The constant tensors whose bytes this op reads on the host as it builds
        (graph.constant_bytes). Asked before the ops build."""
        return ()

    async def build(self):
        pass

    async def build_upgrades(self) -> bool:
        """Build kernels faster than build()'s that take long to compile (on CPU adapters,
        where compiling is the load's bottleneck): the graph builds them after the model is
        ready (GraphRuntime.build_upgrades), and resize() takes them up from then on.
        Returns whether it built any."""
        return False

    def resize(self):
        pass

    def record(self, recorder):
        pass


def pack_u32(*values) -> bytes:
    return struct.pack(f"<{len(values)}I", *values)


def padded_dims(sizes, n: int = 8, fill: int = 1) -> list[int]:
    sizes = list(sizes)
    if len(sizes) > n:
        raise OpError(f"at most {n} dims are supported, got {len(sizes)}")
    return sizes + [fill] * (n - len(sizes))


def contiguous_strides(sizes) -> list[int]:
    strides, step = [], 1
    for s in reversed(list(sizes)):
        strides.append(step)
        step *= s
    return strides[::-1]


__all__ = [
    "HANDLERS",
    "KERNEL_SETS",
    "OpError",
    "OpHandler",
    "OpPart",
    "contiguous_strides",
    "default_kernel_set",
    "handler_for",
    "linear_grid",
    "pack_u32",
    "padded_dims",
    "register",
]
