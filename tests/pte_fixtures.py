"""Small `.pte` programs exported through ExecuTorch's Vulkan partitioner, for tests.

Exporting takes seconds to half a minute per program, so `PteExports` builds each
program on first use and keeps it in a folder. The session fixture `pte_exports` keeps
them in the repository's git-ignored `.cache/pte-exports/KEY/`, KEY naming the torch,
executorch and torchao versions and this file's contents, so later runs reuse them.

Use it from a test module with `from pte_fixtures import pte_exports` (the tests
folder is on sys.path under pytest), then `pte_exports.path("mlp")` or
`pte_exports.data("llama_4w")`. `EXPORTS` lists the available programs.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import pytest


def export_vulkan_pte(
    module,
    example_inputs: tuple,
    path: Path,
    *,
    dynamic_shapes=None,
    compile_options: dict | None = None,
    constant_methods: dict | None = None,
) -> None:
    """torch.export `module`, lower it with the VulkanPartitioner and write the `.pte`."""
    import torch
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.exir import to_edge_transform_and_lower

    exported = torch.export.export(module.eval(), example_inputs, dynamic_shapes=dynamic_shapes)
    edge = to_edge_transform_and_lower(
        exported,
        partitioner=[VulkanPartitioner(compile_options or {})],
        constant_methods=constant_methods,
    )
    _write_atomically(path, edge.to_executorch().buffer)


# Hyper-parameters of the tiny Llama: a random Llama-3.2-style model small enough to
# export in well under a minute.
TINY_LLAMA_PARAMS = (
    '{"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 512, '
    '"multiple_of": 32, "ffn_dim_multiplier": 1.0, "norm_eps": 1e-05, '
    '"rope_theta": 500000.0, "use_scaled_rope": true}'
)


def export_tiny_llama(path: Path, *quantization_args: str) -> None:
    """Exports the tiny Llama (random weights, KV cache, custom SDPA) with ExecuTorch's
    Llama exporter CLI and the Vulkan partitioner (-V)."""
    with tempfile.TemporaryDirectory() as work:
        params = Path(work, "params.json")
        params.write_text(TINY_LLAMA_PARAMS)
        output = Path(work, "model.pte")
        command = [
            sys.executable, "-m", "executorch.examples.models.llama.export_llama",
            "--model", "llama3_2", "-p", str(params), "-kv", "--use_sdpa_with_kv_cache",
            "-V", *quantization_args, "-d", "fp32",
            "--max_seq_length", "32", "--max_context_length", "128",
            "--output-dir", work, "-n", str(output),
        ]  # fmt: skip
        result = subprocess.run(command, cwd=work, capture_output=True, text=True)
        if result.returncode != 0 or not output.exists():
            raise RuntimeError(
                f"export_llama failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                f"{result.stderr[-3000:]}"
            )
        _write_atomically(path, output.read_bytes())


def _write_atomically(path: Path, data: bytes) -> None:
    # A killed export must not leave a truncated file behind in the cache.
    partial = path.with_suffix(".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def _mlp():
    import torch

    class Mlp(torch.nn.Module):
        """Linear + ReLU plus a constant buffer scaled by a second input."""

        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(16, 8)
            self.register_buffer("offset", torch.randn(8))

        def forward(self, x, y):
            return torch.relu(self.linear(x)) + self.offset * y

    return Mlp(), (torch.randn(2, 16), torch.randn(2, 8))


# Constant methods of the "mlp" program, one of each scalar kind.
MLP_CONSTANT_METHODS = {"get_max_seq_len": 32, "use_kv_cache": True, "get_scale": 0.5}


def _export_mlp(path: Path, compile_options: dict | None = None) -> None:
    module, inputs = _mlp()
    export_vulkan_pte(
        module, inputs, path, compile_options=compile_options, constant_methods=MLP_CONSTANT_METHODS
    )


def with_inline_vk_graph(data: bytes, edit: Callable = lambda graph: None) -> bytes:
    """The program `data` re-serialized the way older exporters wrote it, its Vulkan graph
    first passed to `edit` (which may change it in place): the delegate blob inside the
    program flatbuffer, the constants in the blob's own bytes section (VkBytes offsets
    instead of named data), and so no segments and no extended header."""
    import torch
    from executorch.backends.vulkan.serialization.vulkan_graph_serialize import (
        extract_vk_flatbuffer,
        flatbuffer_to_vk_graph,
        serialize_vulkan_graph,
    )
    from executorch.exir._serialize._program import (
        PTEFile,
        deserialize_pte_binary,
        serialize_pte_binary,
    )
    from executorch.exir.schema import BackendDelegateInlineData

    pte = deserialize_pte_binary(data)
    # deserialize_pte_binary moves segments inline: the delegate blob into
    # backend_delegate_data, the constants into named_data.
    program, named = pte.program, pte.named_data
    (forward,) = [plan for plan in program.execution_plan if plan.name == "forward"]
    blob_index = forward.delegates[0].processed.index
    graph = flatbuffer_to_vk_graph(extract_vk_flatbuffer(program.backend_delegate_data[blob_index].data))
    edit(graph)
    constants = [
        torch.frombuffer(bytearray(named.buffers[named.pte_data[c.named_key].buffer_index]), dtype=torch.uint8)
        for c in graph.constants
    ]
    graph.constants = []
    blob = serialize_vulkan_graph(graph, constants, [])
    program.backend_delegate_data[blob_index] = BackendDelegateInlineData(data=blob)
    return bytes(serialize_pte_binary(PTEFile(program=program)))


def _export_mlp_inline(path: Path) -> None:
    """The "mlp" program re-serialized the way older exporters wrote it (with_inline_vk_graph)."""
    with tempfile.TemporaryDirectory() as work:
        exported = Path(work, "mlp.pte")
        _export_mlp(exported)
        data = exported.read_bytes()
    _write_atomically(path, with_inline_vk_graph(data))


def _export_dynamic(path: Path) -> None:
    """A dynamic batch dimension: SymInts, ValueLists of sizes, `cat`, `softmax`."""
    import torch
    from torch.export import Dim

    class Dynamic(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)

        def forward(self, x):
            both = torch.cat([self.linear(x), x], dim=1)
            return torch.softmax(both.view(x.shape[0], 4, 4), dim=-1)

    export_vulkan_pte(
        Dynamic(),
        (torch.randn(3, 8),),
        path,
        dynamic_shapes=({0: Dim("batch", min=1, max=16)},),
    )


def _export_partial(path: Path) -> None:
    """`cumsum` has no Vulkan kernel: the method becomes delegate, CPU kernel, delegate."""
    import torch

    class Partial(torch.nn.Module):
        def forward(self, x):
            return torch.relu(torch.cumsum(torch.relu(x), dim=0))

    export_vulkan_pte(Partial(), (torch.randn(3, 8),), path)


def _export_quantized_linears(path: Path, config_name: str) -> None:
    """Two linears quantized by torchao to 4-bit groups of 32: weight-only ("4w" ->
    et_vk.linear_q4gsw) or with 8-bit dynamic activations ("8da4w" ->
    et_vk.linear_dq8ca_q4gsw, which adds String and IntList values)."""
    import torch
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.quant_api import (
        Int8DynamicActivationIntxWeightConfig,
        IntxWeightOnlyConfig,
        quantize_,
    )

    class TwoLinears(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(64, 32, bias=False)
            self.down = torch.nn.Linear(32, 16, bias=False)

        def forward(self, x):
            return self.down(torch.nn.functional.silu(self.up(x)))

    module = TwoLinears().eval()
    if config_name == "4w":
        config = IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32))
    else:
        config = Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4, weight_granularity=PerGroup(32)
        )
    quantize_(module, config)
    export_vulkan_pte(module, (torch.randn(3, 64),), path)


# name -> function(path) writing that program.
EXPORTS: dict[str, Callable[[Path], None]] = {
    "mlp": _export_mlp,
    "mlp_fp16": lambda path: _export_mlp(path, {"force_fp16": True}),
    "mlp_inline": _export_mlp_inline,
    "dynamic": _export_dynamic,
    "partial": _export_partial,
    "q4w_linear": lambda path: _export_quantized_linears(path, "4w"),
    "q8da4w_linear": lambda path: _export_quantized_linears(path, "8da4w"),
    "llama_4w": lambda path: export_tiny_llama(path, "-qmode", "4w", "-G", "32", "-E", "4,32"),
}


class PteExports:
    """The programs of `EXPORTS`, each exported into `folder` on first use."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, name: str) -> Path:
        path = self.folder / f"{name}.pte"
        if not path.exists():
            import torch

            torch.manual_seed(0)
            EXPORTS[name](path)
        return path

    def data(self, name: str) -> bytes:
        return self.path(name).read_bytes()


CACHE_ROOT = Path(__file__).resolve().parents[1] / ".cache" / "pte-exports"


def _cache_key() -> str:
    versions = [importlib.metadata.version(p) for p in ("torch", "executorch", "torchao")]
    source = Path(__file__).read_bytes()
    return hashlib.sha256(repr(versions).encode() + source).hexdigest()[:16]


@pytest.fixture(scope="session")
def pte_exports() -> PteExports:
    folder = CACHE_ROOT / _cache_key()
    folder.mkdir(parents=True, exist_ok=True)
    return PteExports(folder)
