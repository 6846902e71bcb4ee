"""The GPU prefill GEMM (wgsl/linear_q4gsw.wgsl's `gemm_wide`) against a variant of it
from devtools/gemm_variants/, at the prefill linears' shapes of Llama-3.2-1B and
SmolLM2-135M, natively on wgpu-native's best adapter: what a change to the GEMM would
give, measured before it is built.

    .venv/bin/python -m devtools.gemm_variant_probe --variant NAME [ROWS ...]

- f16: stages, products and each stage's sums in f16 (needs `shader-f16`): an f16 path.
- prefetch: the next stage's global loads issued before the current stage's products.
- k32: stages of 32 values of K, not 16 (half the barriers).
- inline: the sums as plain variables, not a struct a helper returns.
- double: two stages in workgroup memory, one filled while the other's products run.
- nostage, noproducts (diagnostics, wrong sums): the products alone, the staging alone.

Both kernels run where linear.py's gemm_plan picks gemm_wide, with its K splits, each
shape as 3 layers with their own weights, 4 rounds of them in one submit; the two
kernels alternate three times, and each time counts the best of 5 submits: medians in
µs per linear (a split GEMM and its reduce together). Weights and x are random; the
outputs' largest difference is reported as a fraction of their largest magnitude (0
where the variant sums the same terms in the same order).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
from array import array
from pathlib import Path

from pywebgpu.gpu import UNIFORM_USAGE, linear_grid, request_device
from pywebgpu.ops.linear import GEMM_WIDE_TILE, REDUCE_THREADS, gemm_plan, linear_source, pack_params

from .gemm_probe import GROUP_SIZE, LAYERS, ROUNDS, SHAPES
from .probe_timing import best_submit_seconds

VARIANTS = Path(__file__).resolve().parent / "gemm_variants"
ALTERNATIONS = 3


async def main(variant: str, row_counts: list[int]):
    device = await request_device()
    print(device.adapter.description)
    source = linear_source("subgroups" in device.features)
    directives = ""
    if variant == "f16":
        if "shader-f16" not in device.features:
            raise SystemExit("the f16 variant needs an adapter with shader-f16")
        directives = "enable f16;\n"
    variant_source = directives + source + (VARIANTS / f"{variant}.wgsl").read_text(encoding="utf-8")
    rng = random.Random(0)
    for name, (n, k, silu) in SHAPES.items():
        constants = {"X_SILU_MUL": silu}
        kernels = {
            "gemm_wide": await device.compute_pipeline(source, "gemm_wide", entry_point="gemm_wide", constants=constants),
            variant: await device.compute_pipeline(
                variant_source, f"gemm_wide_{variant}", entry_point=f"gemm_wide_{variant}", constants=constants
            ),
        }
        reduce = await device.compute_pipeline(source, "gemm_reduce", entry_point="gemm_reduce", constants=constants)
        layers = [
            (
                device.create_buffer_with_data(array("I", (rng.getrandbits(32) for _ in range(n * k // 8))), label="weights"),
                device.create_buffer_with_data(
                    array("f", (rng.uniform(0.005, 0.03) for _ in range(k // GROUP_SIZE * n))), label="scales"
                ),
            )
            for _ in range(LAYERS)
        ]
        for m in row_counts:
            plan, splits = gemm_plan(m, n, k)
            if plan != "gemm_wide":
                print(f"{name:16} M {m:4}: linear.py runs {plan} here, not gemm_wide: skipped", flush=True)
                continue
            x_values = array("f", (rng.uniform(-1.0, 1.0) for _ in range(m * k * (2 if silu else 1))))
            x = device.create_buffer_with_data(x_values, label="x")
            params = device.create_buffer_with_data(
                pack_params(m, n, k, k // 8, n, GROUP_SIZE, n, n, False, k_splits=splits), UNIFORM_USAGE, label="params"
            )
            scratch = device.create_buffer(splits * m * n * 4, label="scratch")
            spares = [device.create_buffer(4, label="spare") for _ in range(2)]
            times = {label: [] for label in kernels}
            outputs = {}
            for label, pipeline in list(kernels.items()) * ALTERNATIONS:
                out = device.create_buffer(m * n * 4, label="out")
                recorder = device.record()
                for _ in range(ROUNDS):
                    for weights, scales in layers:
                        bindings = {0: scratch if splits > 1 else out, 1: x, 2: weights, 3: scales, 4: scales}
                        bindings.update({5: params, 6: scales, 7: spares[0], 8: spares[1]})
                        grid = (-(-n // GEMM_WIDE_TILE), -(-m // GEMM_WIDE_TILE), splits)
                        recorder.dispatch(pipeline, device.bind_group(pipeline, bindings), *grid)
                        if splits > 1:
                            bindings = {0: out, 1: scratch, 4: scales, 5: params, 6: scales, 7: spares[0], 8: spares[1]}
                            recorder.dispatch(reduce, device.bind_group(reduce, bindings), *linear_grid(m * n, REDUCE_THREADS))
                seconds = await best_submit_seconds(device, recorder, tries=5)
                times[label].append(seconds / (ROUNDS * LAYERS) * 1e6)
                outputs[label] = array("f", bytes(await device.read_buffer(out, 0, m * n * 4)))
            base, other = (statistics.median(times[label]) for label in kernels)
            largest = max(abs(v) for v in outputs["gemm_wide"])
            difference = max(abs(a - b) for a, b in zip(outputs["gemm_wide"], outputs[variant])) / largest
            print(
                f"{name:16} M {m:4} N {n:6} K {k:5} (K splits {splits}): gemm_wide {base:8.1f} µs  "
                f"{variant} {other:8.1f} µs ({base / other:4.2f}x)  difference {difference:.1e}",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m devtools.gemm_variant_probe", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variant", choices=sorted(path.stem for path in VARIANTS.glob("*.wgsl")), required=True)
    parser.add_argument("rows", nargs="*", type=int, default=[128, 512], help="rows of x (default: 128 512)")
    args = parser.parse_args()
    asyncio.run(main(args.variant, args.rows))
