"""Single-op speed: each case of a table (an op at SmolLM2-135M's or Llama-3.2-1B's shapes)
is exported to a one-op .pte as the op tests export theirs (torch.export, ExecuTorch's
Vulkan partitioner), loaded with `pywebgpu.runtime.load` and timed as repeated
`graph.submit` calls, natively on wgpu-native's best adapter.

    .venv/bin/python -m bench.kernels [--kernel-set cpu|gpu] [--filter NAME[,NAME...]] [--upgraded] [--list]
    .venv/bin/python -m bench.kernels --exact-pairs [--kernel-set cpu|gpu] [--filter ...]   # exact vs plain linears

Only public APIs run the op, so the table keeps working however the kernels behind an op
are arranged. Each case loads as many copies of its program as its constants need to
exceed a GPU's last-level cache (each with its own weights and KV caches, as a model's
layers stream theirs), and submits every copy in turn, `runs` times, as one batch
(Device.batched_submits) before waiting for the GPU; the report gives the median and the
best of the rounds, in µs per op run. Weights are random: no kernel's speed depends on
their values.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import time
import warnings
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# Geometries: model dim, query heads, kv heads, head dim, MLP hidden dim, vocabulary.
MODELS = {
    "smollm2": dict(dim=576, q_heads=9, kv_heads=3, head_dim=64, hidden=1536, vocab=49152),
    "llama1b": dict(dim=2048, q_heads=32, kv_heads=8, head_dim=64, hidden=8192, vocab=128256),
}
PREFILL_ROWS = (128, 512)
DECODE_KEYS = (128, 512, 1024, 2048)
CACHE_ROWS = 2048  # the KV caches' rows (the exported models' context)
GROUP_SIZE = 32  # the 4-bit linears' quantization group (the exporter's -qmode 4w)
# Bytes of constants a case's copies add up to at least: more than a GPU's last-level cache.
STREAMED_BYTES = 256 << 20
MAX_COPIES = 16
ROUND_SECONDS = 0.25  # a round's target length, which sets its number of runs


@dataclass
class Case:
    name: str
    module: Callable  # () -> torch.nn.Module
    inputs: Callable  # () -> tuple of example inputs (also the timed ones)


def _random(*shape, seed=0):
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _linear_4w(k: int, n: int):
    """A k → n linear quantized as ExecuTorch's Llama exporter does for `-qmode 4w`."""
    import torch
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.quant_api import IntxWeightOnlyConfig, quantize_

    torch.manual_seed(0)
    linear = torch.nn.Linear(k, n, bias=False)
    quantize_(linear, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(GROUP_SIZE)))
    return linear


def _rms_norm(width: int):
    import torch

    class RMSNorm(torch.nn.Module):
        """Llama's RMSNorm, which the Vulkan partitioner lowers to one et_vk.rms_norm."""

        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(1.0 + 0.5 * _random(width))

        def forward(self, x):
            return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * self.weight

    return RMSNorm()


def _kv_cache_attention(kv_heads: int, head_dim: int):
    import torch

    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (registers torch.ops.llama.*)

    class KVCacheAttention(torch.nn.Module):
        """Llama's cache update and SDPA (llama::update_cache, llama::custom_sdpa), which the
        Vulkan partitioner fuses into one sdpa_with_kv_cache."""

        def __init__(self):
            super().__init__()
            self.register_buffer("k_cache", torch.zeros(1, CACHE_ROWS, kv_heads, head_dim))
            self.register_buffer("v_cache", torch.zeros(1, CACHE_ROWS, kv_heads, head_dim))

        def forward(self, q, k, v, input_pos):
            start = input_pos[0].item()
            torch._check(start >= 0)
            torch._check(start + q.shape[1] <= CACHE_ROWS)
            torch.ops.llama.update_cache(k, self.k_cache, start)
            torch.ops.llama.update_cache(v, self.v_cache, start)
            return torch.ops.llama.custom_sdpa(q, self.k_cache, self.v_cache, start, None, 0, True, None)

    return KVCacheAttention()


def _attention_inputs(g: dict, rows: int, position: int):
    import torch

    return (
        _random(1, rows, g["q_heads"], g["head_dim"], seed=1),
        _random(1, rows, g["kv_heads"], g["head_dim"], seed=2),
        _random(1, rows, g["kv_heads"], g["head_dim"], seed=3),
        torch.tensor([position]),
    )


def _exact_linear(k: int, n: int):
    """A k → n linear as the exporter writes an exact GGUF Q4_1 one: the symmetric 4-bit
    linear plus its offset term, linear(groupsum(x), C), which the runtime fuses into it."""
    import torch
    import torchao.quantization.quant_primitives  # noqa: F401  (registers torchao.dequantize_affine)

    import executorch.backends.vulkan.custom_ops_lib  # noqa: F401  (registers et_vk ops)

    class ExactLinear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(0)
            groups = k // GROUP_SIZE
            self.register_buffer("q", torch.randint(-8, 8, (n, k), dtype=torch.int8, generator=g))
            self.register_buffer("s", torch.rand(n, groups, generator=g) * 0.01)
            self.register_buffer("z", torch.zeros(n, groups, dtype=torch.int8))
            self.register_buffer("c", torch.randn(n, groups, generator=g) * 0.01)

        def forward(self, x):
            weight = torch.ops.torchao.dequantize_affine(self.q, [1, GROUP_SIZE], self.s, self.z, torch.int8, -8, 7)
            sums = x.view(*x.shape[:-1], k // GROUP_SIZE, GROUP_SIZE).sum(-1)
            return torch.nn.functional.linear(x, weight) + torch.nn.functional.linear(sums, self.c)

    return ExactLinear()


def _linear_case(name: str, k: int, n: int, rows: int, exact: bool = False) -> Case:
    return Case(name, lambda: (_exact_linear if exact else _linear_4w)(k, n), lambda: (_random(1, rows, k),))


def cases() -> list[Case]:
    """The table: per model its decode linears (one row; q/k/v and gate/up as the runtime
    fuses them, one linear of their summed outputs), its prefill linears (each also as an
    exact GGUF Q4_1 linear: with offsets), attention after
    a few numbers of cached keys and over a prefill, and RMSNorm."""
    table = []
    for model, g in MODELS.items():
        dim, kv_dim = g["dim"], g["kv_heads"] * g["head_dim"]
        linears = {
            "qkv": (dim, g["q_heads"] * g["head_dim"] + 2 * kv_dim),
            "o": (g["q_heads"] * g["head_dim"], dim),
            "gate_up": (dim, 2 * g["hidden"]),
            "down": (g["hidden"], dim),
        }
        for op, (k, n) in {**linears, "lm_head": (dim, g["vocab"])}.items():
            table.append(_linear_case(f"{model}/decode/linear-{op}", k, n, 1))
            table.append(_linear_case(f"{model}/decode/linear-exact-{op}", k, n, 1, exact=True))
        for rows in PREFILL_ROWS:
            for op, (k, n) in linears.items():
                table.append(_linear_case(f"{model}/prefill-{rows}/linear-{op}", k, n, rows))
                table.append(_linear_case(f"{model}/prefill-{rows}/linear-exact-{op}", k, n, rows, exact=True))
        for keys in DECODE_KEYS:
            table.append(
                Case(
                    f"{model}/decode-{keys}/attention",
                    lambda g=g: _kv_cache_attention(g["kv_heads"], g["head_dim"]),
                    lambda g=g, keys=keys: _attention_inputs(g, 1, keys - 1),
                )
            )
        for rows in PREFILL_ROWS:
            table.append(
                Case(
                    f"{model}/prefill-{rows}/attention",
                    lambda g=g: _kv_cache_attention(g["kv_heads"], g["head_dim"]),
                    lambda g=g, rows=rows: _attention_inputs(g, rows, 0),
                )
            )
        for rows in (1, max(PREFILL_ROWS)):
            phase = "decode" if rows == 1 else f"prefill-{rows}"
            table.append(Case(f"{model}/{phase}/rms-norm", lambda dim=dim: _rms_norm(dim), lambda dim=dim, rows=rows: (_random(1, rows, dim),)))
    return table


def export(case: Case) -> tuple[bytes, tuple]:
    """The case's one-op .pte and its inputs; the whole module must be delegated to Vulkan."""
    import torch
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.exir import to_edge_transform_and_lower

    inputs = case.inputs()
    with warnings.catch_warnings():  # the exporter's deprecation notes, not the case's
        warnings.simplefilter("ignore")
        program = torch.export.export(case.module().eval(), inputs)
        edge = to_edge_transform_and_lower(program, partitioner=[VulkanPartitioner()])
        leftover = [
            node.target.__name__
            for node in edge.exported_program().graph.nodes
            if node.op == "call_function" and "executorch_call_delegate" not in str(node.target) and "getitem" not in str(node.target)
        ]
        if leftover:
            raise SystemExit(f"{case.name}: ops not delegated to Vulkan: {leftover}")
        return edge.to_executorch().buffer, inputs


def host_tensors(inputs) -> list:
    import torch

    from pywebgpu.runtime import HostTensor

    tensors = []
    for x in inputs:
        dtype, typecode = {torch.float32: ("float32", "f"), torch.int64: ("int64", "q")}[x.dtype]
        tensors.append(HostTensor(tuple(x.shape), array(typecode, x.flatten().tolist()), dtype))
    return tensors


async def _batch_seconds(device, graphs, inputs, runs: int) -> float:
    """Wall seconds of `runs` rounds of submitting every graph, as one batch, until the GPU is done."""
    started = time.perf_counter()
    with device.batched_submits():
        for _ in range(runs):
            for graph in graphs:
                graph.submit(*inputs)
    await device.synchronize()
    return time.perf_counter() - started


async def _load(device, data, kernel_set: str | None, upgraded: bool):
    from pywebgpu.runtime import load

    graph = await load(device, data, kernel_set=kernel_set)
    if upgraded:
        await graph.build_upgrades()
    return graph


async def time_case(device, case: Case, kernel_set: str | None, rounds: int, upgraded: bool) -> dict:
    data, example = export(case)
    inputs = host_tensors(example)
    before = device.allocated_bytes
    graphs = [await _load(device, data, kernel_set, upgraded)]
    graph_bytes = device.allocated_bytes - before
    copies = min(MAX_COPIES, max(1, -(-STREAMED_BYTES // max(graph_bytes, 1))))
    graphs += [await _load(device, data, kernel_set, upgraded) for _ in range(copies - 1)]
    await _batch_seconds(device, graphs, inputs, 1)  # untimed: first-run costs
    once = await _batch_seconds(device, graphs, inputs, 1)
    runs = max(1, min(100, round(ROUND_SECONDS / max(once, 1e-6))))
    per_run = [await _batch_seconds(device, graphs, inputs, runs) / (runs * copies) * 1e6 for _ in range(rounds)]
    result = {
        "case": case.name,
        "kernel_set": graphs[0].kernel_set,
        "upgraded": upgraded,
        "ops": sorted({op.name for op in graphs[0].ops}),
        "copies": copies,
        "runs_per_round": runs,
        "median_us": statistics.median(per_run),
        "best_us": min(per_run),
        "rounds_us": per_run,
    }
    del graphs
    return result


async def time_pair(device, plain: Case, exact: Case, kernel_set: str | None, rounds: int) -> dict:
    """A linear and its exact twin (linear-exact-*), as many copies each, timed in
    alternating rounds so that a shared machine's load falls on both alike."""
    loaded = []
    for case in (plain, exact):
        data, example = export(case)
        loaded.append((host_tensors(example), [await _load(device, data, kernel_set, False) for _ in range(MAX_COPIES)]))
    for inputs, graphs in loaded:
        await _batch_seconds(device, graphs, inputs, 1)  # untimed: first-run costs
    once = max([await _batch_seconds(device, graphs, inputs, 1) for inputs, graphs in loaded])
    runs = max(1, min(100, round(ROUND_SECONDS / max(once, 1e-6))))
    per_run = ([], [])
    for _ in range(rounds):
        for times, (inputs, graphs) in zip(per_run, loaded):
            times.append(await _batch_seconds(device, graphs, inputs, runs) / (runs * MAX_COPIES) * 1e6)
    plain_us, exact_us = (statistics.median(times) for times in per_run)
    return {"case": plain.name, "kernel_set": loaded[0][1][0].kernel_set, "plain_us": plain_us, "exact_us": exact_us,
            "ratio": exact_us / plain_us, "rounds_us": per_run}


async def run_pairs(selected: list[Case], kernel_set: str | None, rounds: int) -> dict:
    from pywebgpu.gpu import request_device

    device = await request_device()
    print(device.adapter.description, flush=True)
    by_name = {case.name: case for case in cases()}
    results = []
    for case in selected:
        if "/linear-" not in case.name or "/linear-exact-" in case.name:
            continue
        result = await time_pair(device, case, by_name[case.name.replace("/linear-", "/linear-exact-")], kernel_set, rounds)
        results.append(result)
        print(f"{case.name:34} {result['kernel_set']}  {result['plain_us']:10.1f} µs, exact {result['exact_us']:10.1f} µs: "
              f"{result['ratio']:.3f}x", flush=True)
    return {"adapter": device.adapter.description, "backend": device.adapter.backend, "results": results}


async def run(selected: list[Case], kernel_set: str | None, rounds: int, upgraded: bool) -> dict:
    from pywebgpu.gpu import request_device

    device = await request_device()
    print(device.adapter.description, flush=True)
    results = []
    for case in selected:
        result = await time_case(device, case, kernel_set, rounds, upgraded)
        results.append(result)
        print(
            f"{case.name:34} {result['kernel_set']}  {result['median_us']:10.1f} µs (best {result['best_us']:.1f}; "
            f"{result['copies']} copies x {result['runs_per_round']} runs)  {', '.join(result['ops'])}",
            flush=True,
        )
    return {"adapter": device.adapter.description, "backend": device.adapter.backend, "results": results}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kernels", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel-set", choices=["cpu", "gpu"], help="the kernels for CPU adapters or for GPUs (default: by adapter)")
    parser.add_argument("--filter", help="comma-separated parts of case names; runs the cases whose name holds one (default: all)")
    parser.add_argument("--upgraded", action="store_true", help="build the graphs' upgrades first: the kernels a model in the browser runs after its first reply")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per case (default 5)")
    parser.add_argument("--exact-pairs", action="store_true", help="time each selected linear against its exact twin (linear-exact-*) in alternating rounds")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--out", type=Path, help="also write the results here as JSON")
    args = parser.parse_args(argv)

    table = cases()
    if args.filter:
        parts = args.filter.split(",")
        table = [case for case in table if any(part in case.name for part in parts)]
    if args.list or not table:
        print("\n".join(case.name for case in table) or f"no case matches {args.filter!r}")
        return 0 if table else 1
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # lavapipe warns without it
    logging.disable(logging.INFO)  # the exporter's notes on each case's partition
    if args.exact_pairs:
        report = asyncio.run(run_pairs(table, args.kernel_set, args.rounds))
    else:
        report = asyncio.run(run(table, args.kernel_set, args.rounds, args.upgraded))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
