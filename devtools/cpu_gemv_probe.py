"""The decode GEMV for CPU adapters (linear_q4gsw_quads.wgsl's `gemv`) at SmolLM2-135M's
decode linears, with the fusions the runtime gives each (RMSNorm, silu(gate) * up, the
residual), natively on a CPU adapter (SwiftShader: run with
VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json): what ops/linear.py's
GEMV_THREADS and GEMV_OUTPUTS rest on.

    VK_ICD_FILENAMES=... .venv/bin/python -m devtools.cpu_gemv_probe [--against REV]

With --against, the kernel of git revision REV (its linear_q4gsw.wgsl and
linear_q4gsw_quads.wgsl, threads and outputs read from them) runs beside this tree's,
interleaved shape by shape and round by round (a shared CPU's speed drifts over
minutes), and their outputs must agree. Each shape runs as LAYERS layers with their own
weights, every layer's dispatch REPEATS times in one submit; medians over ROUNDS rounds,
in ms per dispatch.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import statistics
import subprocess
from array import array
from pathlib import Path

from pywebgpu.gpu import UNIFORM_USAGE, linear_grid, request_device
from pywebgpu.kernels import QUAD_DIRECTIVES
from pywebgpu.ops.linear import pack_params

from .probe_timing import best_submit_seconds

ROOT = Path(__file__).resolve().parent.parent
LAYERS = 4
REPEATS = 4
ROUNDS = 5
GROUP_SIZE = 32
NORM = {"X_RMS_NORM": True, "RMS_EPS": 1e-5}
SHAPES = {  # (N, K, constants, adds a residual, writes silu(gate) * up)
    "q/k/v": (960, 576, NORM, False, False),
    "gate/up": (3072, 576, {"OUT_SILU_MUL": True}, False, True),
    "o": (576, 576, {}, True, False),
    "down": (576, 1536, {}, True, False),
    "LM head": (49152, 576, {}, False, False),
}
MODULES = ("wgsl/linear_q4gsw.wgsl", "wgsl/linear_q4gsw_quads.wgsl")


def kernel_source(revision: str | None) -> tuple[str, int, int]:
    """(module, threads per workgroup, outputs per thread) of `gemv` at git `revision`, or
    in this tree."""
    if revision is None:
        texts = [(ROOT / path).read_text(encoding="utf-8") for path in MODULES]
    else:
        texts = [
            subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{revision}:{path}"], capture_output=True, text=True, check=True
            ).stdout
            for path in MODULES
        ]
    source = QUAD_DIRECTIVES + "".join(texts)

    def constant(name):
        found = re.search(rf"const {name}: u32 = (\d+)u;", source)
        if found is None:
            raise SystemExit(f"no `const {name}` in the kernel of {revision or 'this tree'}")
        return int(found.group(1))

    return source, constant("GEMV_THREADS"), constant("GEMV_OUTPUTS")


async def main(against: str | None):
    device = await request_device()
    print(device.adapter.description)
    if "subgroups" not in device.features:
        raise SystemExit("gemv needs an adapter with subgroups (SwiftShader and lavapipe have them)")
    kernels = {"this tree": kernel_source(None)}
    if against:
        kernels[against] = kernel_source(against)

    for name, (n, k, constants, residual, silu_mul) in SHAPES.items():
        x = device.create_buffer_with_data(array("f", [0.01 * (i % 7 - 3) for i in range(k)]), label="x")
        side = device.create_buffer_with_data(array("f", [1.0] * max(n, k)), label="norm weight or residual")
        out = device.create_buffer(n * 4, label="out")
        spares = [device.create_buffer(4, label="spare") for _ in range(2)]
        stored = n // 2 if silu_mul else n
        params = pack_params(1, n, k, k // 8, n, GROUP_SIZE, stored, stored, residual, silu_mul)
        params = device.create_buffer_with_data(params, UNIFORM_USAGE, label="params")
        words = n * k // 8
        layers = [
            (
                device.create_buffer_with_data(array("I", [(0x9E3779B9 * (i + layer + 1)) & 0xFFFFFFFF for i in range(words)])),
                device.create_buffer_with_data(array("f", [0.01] * (n * k // GROUP_SIZE))),
            )
            for layer in range(LAYERS)
        ]
        recorders, outputs = {}, {}
        for label, (source, threads, outputs_per_thread) in kernels.items():
            pipeline = await device.compute_pipeline(source, f"gemv ({label})", entry_point="gemv", constants={"OUT_SILU_MUL": silu_mul, **constants})
            groups = [
                device.bind_group(pipeline, {0: out, 1: x, 2: w, 3: s, 4: s, 5: params, 6: side, 7: spares[0], 8: spares[1]})
                for w, s in layers
            ]
            grid = (*linear_grid(-(-n // (threads * outputs_per_thread)), 1), 1)
            # NaNs first: outputs a kernel leaves unwritten (too small a grid) must not
            # pass as the other kernel's.
            device.write_buffer(out, array("f", [float("nan")] * n))
            first = device.record()
            first.dispatch(pipeline, groups[0], *grid)
            device.submit(first)
            outputs[label] = array("f", bytes(await device.read_buffer(out)))
            recorders[label] = device.record()
            for _ in range(REPEATS):
                for group in groups:
                    recorders[label].dispatch(pipeline, group, *grid)
        reference = outputs["this tree"][:stored]
        for label, values in outputs.items():
            differences = [abs(a - b) / (abs(a) + 1e-3) for a, b in zip(reference, values[:stored])]
            # `not <=`: a NaN (an output never written) fails too.
            if any(not difference <= 1e-4 for difference in differences):
                worst = max(differences, key=lambda d: math.inf if d != d else d)
                raise SystemExit(f"{name}: the kernel of {label} computes other outputs (relative difference {worst:.2g})")
        times = {label: [] for label in kernels}
        for _ in range(ROUNDS):
            for label, recorder in recorders.items():
                seconds = await best_submit_seconds(device, recorder, tries=1)
                times[label].append(seconds / (REPEATS * LAYERS) * 1e3)
        line = "   ".join(f"{label} {statistics.median(ms):7.3f}" for label, ms in times.items())
        print(f"{name:8} N {n:6} K {k:5}: {line} ms", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", metavar="REV", help="also time the kernel of this git revision, interleaved")
    asyncio.run(main(parser.parse_args().against))
