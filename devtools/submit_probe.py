"""What a decode step's one JS call costs in the browser, without Python: a page of plain
JS does what pywebgpu's call does (gpu/_browser.py's _ENCODE_AND_SUBMIT_JS) with empty
dispatches, and times each part with performance.now(). Set beside the benchmark's "of
which in its JS call" (devtools/bench.py), the difference is Pyodide's crossing.

    python -m devtools.submit_probe [--dispatches 85,155] [--steps 400] [--worker] [--busy-us N] \\
        [--chromium PATH --chromium-flag=--use-angle=vulkan ...]

A step: a 16-byte write from a held Uint8Array, N dispatches in one compute pass
(bind groups and pipelines taking turns, as a graph's do), a copy of 8 bytes to a staging
buffer, finish, submit, and the staging buffer's mapAsync; two steps ahead of the reads,
as ChatSession decodes ("one step a submit"). "Two steps a submit" encodes two steps'
dispatches and reads in one command buffer with one mapAsync, per step: what sharing a
call between two decode steps would save. Means per step in µs (performance.now() ticks
in 5 µs steps in a cross-origin isolated page), after 100 untimed steps.

By default the Chromium of devtools/browser.py with its flags (SwiftShader); on a GPU
machine, the Chromium and the flags that give its adapter (see BENCHMARKS.md). The
standard library only: no Playwright (the page POSTs its result to this server).
"""

from __future__ import annotations

import argparse
import json
import queue
import subprocess
import sys
import tempfile
from pathlib import Path

from .browser import CHROMIUM, CHROMIUM_ARGS
from .server import WebServer

# The page runs the probe (a module) on its main thread or in a module Worker.
PAGE = """<!doctype html>
<script type="module">
const config = await (await fetch("config.json")).json();
if (config.worker) new Worker("probe.mjs", {type: "module"}); else await import("./probe.mjs");
</script>
"""

PROBE = r"""
const config = await (await fetch("config.json")).json();
const post = (body) => fetch("report", {method: "POST", body: JSON.stringify(body)});
try {
  const adapter = await navigator.gpu.requestAdapter({powerPreference: "high-performance"});
  const device = await adapter.requestDevice();
  const module = device.createShaderModule({code: `
    @group(0) @binding(0) var<storage, read_write> out: array<u32>;
    @group(0) @binding(1) var<uniform> position: vec4<i32>;
    @compute @workgroup_size(1) fn main() { out[0] = out[0] + u32(position.x); }`});
  // Eight pipelines taking turns (each dispatch sets its own), as a graph's kernels do.
  const pipelines = Array.from({length: 8}, (_, i) => device.createComputePipeline({layout: "auto", compute: {module, entryPoint: "main"}, label: `p${i}`}));
  const out = device.createBuffer({size: 256, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC});
  const position = device.createBuffer({size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST});
  const most = 2 * Math.max(...config.dispatches);
  const groups = Array.from({length: most}, (_, i) => device.createBindGroup({
    layout: pipelines[i % pipelines.length].getBindGroupLayout(0),
    entries: [{binding: 0, resource: {buffer: out}}, {binding: 1, resource: {buffer: position}}],
  }));
  const stagings = Array.from({length: 4}, () => device.createBuffer({size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST}));
  const held = new Uint8Array(8192);
  // What stands in for the step's Python before its JS call (--busy-us): that long spent
  // walking 8 MiB, so that the call meets caches as cold as after the interpreter's run.
  const scratch = new Int32Array(2 << 20);
  let sink = 0;
  function busy(us) {
    const until = performance.now() + us / 1000;
    for (let i = 0; performance.now() < until; i = (i + 4099) % scratch.length) {
      for (let j = 0; j < 256; j++) sink += scratch[(i + 16 * j) % scratch.length]++;
    }
  }

  // One submit of `steps` decode steps: each its write's bytes, its dispatches, its read.
  function submit(dispatches, steps, staging, parts) {
    const t0 = performance.now();
    device.queue.writeBuffer(position, 0, held, 0, 16);
    const t1 = performance.now();
    const encoder = device.createCommandEncoder();
    for (let step = 0; step < steps; step++) {
      const pass = encoder.beginComputePass();
      let pipeline = null;
      for (let i = 0; i < dispatches; i++) {
        const next = pipelines[i % pipelines.length];
        if (next !== pipeline) { pass.setPipeline(next); pipeline = next; }
        pass.setBindGroup(0, groups[step * dispatches + i]);
        pass.dispatchWorkgroups(1, 1, 1);
      }
      pass.end();
      encoder.copyBufferToBuffer(out, 0, staging, 8 * step, 8);
    }
    const t2 = performance.now();
    const commands = encoder.finish();
    const t3 = performance.now();
    device.queue.submit([commands]);
    const t4 = performance.now();
    const mapped = staging.mapAsync(GPUMapMode.READ);
    const t5 = performance.now();
    if (parts) {
      parts.write += t1 - t0; parts.encode += t2 - t1; parts.finish += t3 - t2;
      parts.submit += t4 - t3; parts.mapAsync += t5 - t4; parts.total += t5 - t0;
    }
    return mapped;
  }

  const results = {};
  for (const dispatches of config.dispatches) {
    for (const [label, steps] of [["one step a submit", 1], ["two steps a submit", 2]]) {
      const parts = {write: 0, encode: 0, finish: 0, submit: 0, mapAsync: 0, total: 0};
      const pending = [];
      const submits = Math.ceil((100 + config.steps) / steps);
      const warmup = Math.ceil(100 / steps);
      for (let n = 0; n < submits; n++) {
        const staging = stagings[n % stagings.length];
        if (config.busyUs) busy(config.busyUs);
        pending.push([submit(dispatches, steps, staging, n >= warmup ? parts : null), staging]);
        if (pending.length > 2) {  // two steps ahead of the reads
          const [mapped, buffer] = pending.shift();
          await mapped;
          buffer.unmap();
        }
      }
      for (const [mapped, buffer] of pending) { await mapped; buffer.unmap(); }
      const perStep = (submits - warmup) * steps;
      results[`${dispatches} dispatches, ${label}`] = Object.fromEntries(
        Object.entries(parts).map(([part, ms]) => [part, 1000 * ms / perStep]));
    }
  }
  await post({result: results, isolated: crossOriginIsolated, adapter: adapter.info.vendor || adapter.info.description});
} catch (error) {
  await post({error: String(error && error.stack || error)});
}
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.submit_probe", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dispatches", default="85,155", help="comma-separated dispatches per step (default 85,155: the 1B's and SmolLM2's)")
    parser.add_argument("--steps", type=int, default=400, help="timed steps per measurement (default 400)")
    parser.add_argument("--chromium", default=CHROMIUM, help=f"the Chromium binary (default {CHROMIUM})")
    parser.add_argument("--chromium-flag", action="append", help="a flag for Chromium (repeat; default: devtools/browser.py's, SwiftShader)")
    parser.add_argument("--worker", action="store_true", help="run in a Worker, as pywebgpu runs in the chat page and the benchmark")
    parser.add_argument("--busy-us", type=int, default=0, help="before each submit, this many µs walking 8 MiB (the step's Python stands there)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for the page's report")
    args = parser.parse_args(argv)
    dispatches = [int(n) for n in args.dispatches.split(",")]
    flags = args.chromium_flag if args.chromium_flag is not None else CHROMIUM_ARGS
    reports: queue.Queue = queue.Queue()
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as scratch:
        root = Path(scratch)
        (root / "index.html").write_text(PAGE)
        (root / "probe.mjs").write_text(PROBE)
        (root / "config.json").write_text(json.dumps({"dispatches": dispatches, "steps": args.steps, "worker": args.worker, "busyUs": args.busy_us}))
        with WebServer(root, post_handlers={"/report": reports.put}) as server:
            command = [args.chromium, "--headless", "--no-first-run", *flags, f"--user-data-dir={scratch}/profile", f"{server.url}/index.html"]
            browser = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                body = json.loads(reports.get(timeout=args.timeout))
            except queue.Empty:
                raise SystemExit(f"no report from the page in {args.timeout:.0f} s") from None
            finally:
                browser.kill()
                browser.wait()
    if "error" in body:
        raise SystemExit(f"the page failed: {body['error']}")
    where = ("a Worker" if args.worker else "the page's main thread") + (f", {args.busy_us} µs busy before each submit" if args.busy_us else "")
    print(f"A decode step's JS work, plain JS in {where}, µs per step (adapter {body['adapter']!r}, cross-origin isolated: {body['isolated']}):")
    for label, parts in body["result"].items():
        print(f"  {label}: " + ", ".join(f"{part} {us:.1f}" for part, us in parts.items()))
    print(json.dumps(body["result"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
