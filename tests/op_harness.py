"""Op tests: each case is a small torch.nn.Module exported to .pte through ExecuTorch's
Vulkan partitioner, run by pywebgpu (natively or in the page), and compared with PyTorch
in float64 on the same inputs.

Cases live in tests/op_cases/<family>.py as a CASES list; every case runs natively
(tests/test_ops_native.py) and in headless Chromium (e2e_tests/test_ops_browser.py).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass, field

import torch

ATOL = RTOL = 1e-3


@dataclass
class OpCase:
    id: str
    module: torch.nn.Module
    inputs: tuple  # example inputs, used for the export and as the first run
    more_runs: list = field(default_factory=list)  # further input tuples (dynamic sizes)
    dynamic_shapes: object = None
    # The dtype PyTorch computes the golden in. Quantized (torchao) modules only run in
    # float32; their goldens are their own float32 outputs.
    reference_dtype: torch.dtype = torch.float64
    # The module has state (e.g. KV-cache buffers it updates in place): one loaded graph
    # and one reference module copy run all runs, in order.
    stateful: bool = False
    # Vulkan fusion patterns (names in executorch.backends.vulkan.patterns.fusable_patterns)
    # left out while lowering, to export ops that fusion would otherwise replace.
    unfused_patterns: tuple = ()
    # The kernel set the graph loads with ("cpu" or "gpu"; None: the adapter's), so that
    # both are tested whatever kind of adapter runs the tests.
    kernel_set: str | None = None
    # Adapter features the device pretends not to have while the case runs (e.g.
    # "subgroups": the kernels that adapters without them run).
    hidden_features: tuple = ()
    # The runs submitted as one batch (Device.batched_submits; stateful cases), each
    # one's outputs read back by a submit after it in the batch.
    batched: bool = False
    # Names of ops the runtime must run (e.g. one its fusion makes), or must not.
    expect_ops: tuple = ()
    expect_no_ops: tuple = ()
    # The graph's upgrades (GraphRuntime.build_upgrades) built before this run (0: right
    # after the load), or never (None).
    upgrade_before_run: int | None = None
    # (run, kernel) pairs: a kernel (an op's `kernel`, as ops/linear/plan.py names them) that
    # run must run; on a device without subgroups those of `expect_kernels_without_subgroups`
    # where given (adapters without them run other kernels).
    expect_kernels: tuple = ()
    expect_kernels_without_subgroups: tuple | None = None

    @property
    def runs(self):
        return [self.inputs, *self.more_runs]


def in_both_kernel_sets(case: OpCase) -> list[OpCase]:
    """The case run with the kernels for CPU adapters and with those for GPUs (ids
    suffixed -cpu / -gpu; one export serves both)."""
    return [dataclasses.replace(case, id=f"{case.id}-{kernel_set}", kernel_set=kernel_set) for kernel_set in ("cpu", "gpu")]


def without_subgroups(case: OpCase) -> OpCase:
    """The case run with the kernels for CPU adapters on a device without subgroups (id
    suffixed -cpu-no-subgroups, in place of a -cpu), which run no quad operations."""
    case_id = case.id.removesuffix("-cpu")
    return dataclasses.replace(case, id=f"{case_id}-cpu-no-subgroups", kernel_set="cpu", hidden_features=("subgroups",))


def all_cases() -> list[OpCase]:
    import op_cases

    cases = []
    for info in sorted(pkgutil.iter_modules(op_cases.__path__), key=lambda m: m.name):
        cases += importlib.import_module(f"op_cases.{info.name}").CASES
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "duplicate op case ids"
    return cases


# By module: cases that differ only in how they run (kernel_set) share one export.
_exported: dict[int, bytes] = {}


def export_case(case: OpCase) -> bytes:
    """The case's .pte bytes (exported once per test session). The whole module must be
    delegated to Vulkan: a graph that falls back to ExecuTorch's CPU ops tests nothing."""
    if id(case.module) not in _exported:
        from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
        from executorch.exir import to_edge_transform_and_lower

        program = torch.export.export(case.module.eval(), case.inputs, dynamic_shapes=case.dynamic_shapes)
        with _patterns_left_out(case.unfused_patterns):
            edge = to_edge_transform_and_lower(program, partitioner=[VulkanPartitioner()])
        leftover = [
            n.target.__name__
            for n in edge.exported_program().graph.nodes
            if n.op == "call_function" and "executorch_call_delegate" not in str(n.target) and "getitem" not in str(n.target)
        ]
        assert not leftover, f"case {case.id}: ops not delegated to Vulkan: {leftover}"
        _exported[id(case.module)] = edge.to_executorch().buffer
    return _exported[id(case.module)]


@contextlib.contextmanager
def _patterns_left_out(names):
    from executorch.backends.vulkan.patterns import fusable_patterns

    saved = {name: fusable_patterns.pop(name) for name in names}
    try:
        yield
    finally:
        fusable_patterns.update(saved)


def reference_module(case: OpCase) -> torch.nn.Module:
    """A copy of the case's module in case.reference_dtype (float64 unless the case says)."""
    return copy.deepcopy(case.module).to(case.reference_dtype)


def reference(case: OpCase, inputs, module: torch.nn.Module | None = None) -> list[torch.Tensor]:
    """PyTorch's outputs in case.reference_dtype (float inputs and parameters promoted),
    from `module` (a stateful case's shared reference_module) or from a fresh copy."""
    if module is None:
        module = reference_module(case)
    promoted = [x.to(case.reference_dtype) if x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        out = module(*promoted)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def encode_inputs(inputs) -> list:
    """Inputs as [shape, dtype, bytes] for graph_programs.run_graph."""
    encoded = []
    for x in inputs:
        dtype = {torch.float32: "float32", torch.int64: "int64", torch.int32: "int32"}[x.dtype]
        encoded.append([list(x.shape), dtype, x.contiguous().numpy().tobytes()])
    return encoded


def decode_outputs(outputs) -> list[torch.Tensor]:
    return [torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(shape) for shape, data in outputs]


def expected_kernels(case: OpCase, features) -> tuple:
    """The case's (run, kernel) expectations for a device with `features`."""
    if "subgroups" not in features and case.expect_kernels_without_subgroups is not None:
        return case.expect_kernels_without_subgroups
    return case.expect_kernels


def check_case(case: OpCase, answer):
    """Compare pywebgpu's results for every run of `case` (graph_programs.run_graph's
    answer) with PyTorch, and its op list with the case's expectations."""
    for name in case.expect_ops:
        assert name in answer["ops"], f"{case.id}: the runtime ran no {name!r} op: {answer['ops']}"
    for name in case.expect_no_ops:
        assert name not in answer["ops"], f"{case.id}: the runtime ran a {name!r} op: {answer['ops']}"
    assert not set(case.hidden_features) & set(answer["features"]), f"{case.id}: ran with {answer['features']}"
    for run, kernel in expected_kernels(case, answer["features"]):
        assert kernel in answer["kernels"][run], f"{case.id} run {run}: no {kernel!r} ran: {answer['kernels'][run]}"
    results = answer["results"]
    assert len(results) == len(case.runs)
    shared_module = reference_module(case) if case.stateful else None
    for run, (inputs, outputs) in enumerate(zip(case.runs, results)):
        want = reference(case, inputs, shared_module)
        got = decode_outputs(outputs)
        assert len(got) == len(want), f"{case.id} run {run}: {len(got)} outputs, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert tuple(g.shape) == tuple(w.shape), f"{case.id} run {run} output {i}: shape {list(g.shape)} != {list(w.shape)}"
            torch.testing.assert_close(g.double(), w.double(), atol=ATOL, rtol=RTOL, msg=lambda m: f"{case.id} run {run} output {i}: {m}")
