"""`load_program` and `Program`: a `.pte` file's methods, and each method's Vulkan graph."""

from __future__ import annotations

import dataclasses

from ._generated.executorch_flatbuffer.Program import Program as _FbProgram
from .errors import PteError
from .flatbuffer import Flatbuffer
from .layout import PROGRAM_IDENTIFIER, DelegateBlobs, read_file_layout, read_named_data, read_segments
from .methods import Method, read_method
from .source import ByteSource, as_source, read_range
from .types import ConstantRef, MethodInfo, VkGraph
from .vk_graph import read_vk_graph

_VULKAN_BACKEND_ID = "VulkanBackend"


class Program:
    """A decoded `.pte` program. Build one with `load_program`.

    `method_names` lists every method (execution plan) in file order;
    `constant_methods` maps the constant metadata methods (get_max_seq_len,
    use_kv_cache, ...) to the value they return. `source` is the file's ByteSource,
    for reading constants by their ConstantRef.
    """

    def __init__(
        self,
        source: ByteSource,
        methods: dict[str, Method],
        named_data: dict[str, ConstantRef],
    ) -> None:
        self.source = source
        self._methods = methods
        self._named_data = named_data
        self._vulkan_graphs: dict[str, VkGraph] = {}
        self.method_names: tuple[str, ...] = tuple(methods)
        self.constant_methods: dict[str, int | float | bool] = {
            name: m.constant_value for name, m in methods.items() if m.constant_value is not None
        }

    def _method(self, name: str) -> Method:
        if name not in self._methods:
            raise PteError(f"no method named {name!r}; the program has {list(self._methods)}")
        return self._methods[name]

    def method(self, name: str) -> MethodInfo:
        """Inputs and outputs of method `name` (PteError if there is none)."""
        return self._method(name).info

    def vulkan_graph(self, method: str = "forward") -> VkGraph:
        """The Vulkan-delegate graph that method `method` consists of. PteError if the
        method is anything but exactly one VulkanBackend delegate call."""
        if method not in self._vulkan_graphs:
            self._vulkan_graphs[method] = self._read_vulkan_graph(method)
        return self._vulkan_graphs[method]

    def _read_vulkan_graph(self, method: str) -> VkGraph:
        decoded = self._method(method)
        delegate = decoded.delegate
        if delegate is None:
            raise PteError(
                f"method {method!r} has {decoded.instructions_summary}, "
                "not exactly one VulkanBackend delegate call"
            )
        if delegate.backend_id != _VULKAN_BACKEND_ID:
            raise PteError(
                f"method {method!r} is a call of delegate {delegate.backend_id!r}, "
                f"not {_VULKAN_BACKEND_ID!r}"
            )
        graph = read_vk_graph(self.source, delegate, self._named_data, f"method {method!r}")
        io_count = len(graph.input_ids) + len(graph.output_ids)
        if io_count != len(decoded.delegate_args):
            raise PteError(
                f"method {method!r}: the delegate call passes {len(decoded.delegate_args)} "
                f"values but the Vulkan graph has {len(graph.input_ids)} inputs and "
                f"{len(graph.output_ids)} outputs"
            )
        call_inputs = decoded.delegate_args[: len(graph.input_ids)]
        call_outputs = decoded.delegate_args[len(graph.input_ids) :]
        method_inputs = tuple(
            graph.input_ids[call_inputs.index(v)] if v in call_inputs else None for v in decoded.input_value_ids
        )
        method_outputs = []
        for position, value in enumerate(decoded.output_value_ids):
            if value not in call_outputs:
                raise PteError(f"method {method!r}: output {position} is not produced by the Vulkan graph")
            method_outputs.append(graph.output_ids[call_outputs.index(value)])
        return dataclasses.replace(graph, method_input_ids=method_inputs, method_output_ids=tuple(method_outputs))


def load_program(data) -> Program:
    """Decodes and validates a `.pte` program from a bytes-like object (bytes,
    bytearray, memoryview, mmap) or a `ByteSource`. Reads only the program
    flatbuffer here; a method's Vulkan graph is read by `Program.vulkan_graph`."""
    source = as_source(data)
    layout = read_file_layout(source)
    fb = Flatbuffer(
        read_range(source, 0, layout.program_size, "program flatbuffer"), 0, "program flatbuffer"
    )
    program = fb.root(_FbProgram, PROGRAM_IDENTIFIER)
    segments = read_segments(fb, program, layout)
    named_data = read_named_data(fb, program, segments)
    delegate_blobs = DelegateBlobs(fb, program, segments)
    methods: dict[str, Method] = {}
    count = fb.vector(program.ExecutionPlanLength, program.ExecutionPlan, "execution_plan")
    for plan_index in range(count):
        method = read_method(fb, program, plan_index, delegate_blobs)
        name = method.info.name
        if name in methods:
            raise PteError(f"program flatbuffer: two methods are named {name!r}")
        methods[name] = method
    return Program(source, methods, named_data)
