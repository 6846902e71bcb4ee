// The speed benchmark's page, driven by `python -m bench` through window.runBench(config),
// or unattended (bench.html?unattended, bench/unattended.py: a bare Chromium that no
// Playwright drives): the page fetches /unattended/config.json and POSTs the result.
// It is served under /bench/ beside the web bundle, whose files it names from the root.
// The sides, all loaded in this one browser:
//   1. pywebgpu: Pyodide in a module Web Worker (/worker.mjs, as the chat demo runs it),
//      running bench/model_bench.py (its source comes in config.pythonSource);
//   2. wllama (llama.cpp in wasm) on the same model's GGUF, once per config.wllamaModes
//      entry: "cpu" (n_gpu_layers 0) and "webgpu" (all layers offered to its WebGPU backend);
//   3. onnxruntime-web's WebGPU execution provider on the same model's 4-bit ONNX export,
//      where config.ort names it (ort.mjs).
// They run in rounds, one side after the other so that they never share the CPU: a round
// of each side (every prefill length timed once, a decode after every context), then the
// next round, so that every side meets the same drift of a shared machine's speed.
// pywebgpu and onnxruntime-web take the prompts as token ids; wllama as text (its API takes no ids) that its
// tokenizer turns into the same number of tokens (checked: it reports prompt_n).

import { median } from "./median.mjs";
import { startPythonWorker } from "./python_worker.mjs";

const logElement = document.getElementById("log");

function log(text) {
  logElement.textContent += text + "\n";
  console.log(text); // the driver echoes the page's console
}

async function describeAdapter() {
  const adapter = await navigator.gpu?.requestAdapter({ powerPreference: "high-performance" });
  if (!adapter) return null;
  const { vendor, architecture, device, description } = adapter.info;
  return {
    vendor,
    architecture,
    device,
    description,
    isFallbackAdapter: Boolean(adapter.info.isFallbackAdapter),
    features: [...adapter.features].sort(),
  };
}

// --- pywebgpu ------------------------------------------------------------------------

// The pywebgpu side: loaded and warmed up; round(n) and finish() run model_bench's
// Measurement in the worker, whose Python globals persist between calls.
async function startPywebgpu(config) {
  const python = startPythonWorker(log);
  try {
    // Strings go over as JSON, which Python reads back with json.loads.
    const args = JSON.stringify(JSON.stringify({ manifest: config.manifestUrl, measure: config.measure }));
    await python.run(`
import json, sys, types
import js
from pyodide.ffi import to_js

model_bench = types.ModuleType("model_bench")
exec(compile(${JSON.stringify(config.pythonSource)}, "model_bench.py", "exec"), model_bench.__dict__)
sys.modules["model_bench"] = model_bench

def _status(text):
    js.postMessage(to_js({"type": "status", "text": text}, dict_converter=js.Object.fromEntries))

_args = json.loads(${args})
_measurement = await model_bench.load(_args["manifest"], _args["measure"], log=_status)
`);
  } catch (error) {
    python.terminate();
    throw error;
  }
  return {
    round: (number) => python.run(`await _measurement.round(${number})`),
    async finish() {
      try {
        return JSON.parse(await python.run("json.dumps(await _measurement.finish())"));
      } finally {
        python.terminate(); // frees its GPU buffers and wasm heap
      }
    },
  };
}

// --- wllama ----------------------------------------------------------------------------

// llama.cpp's own log lines, kept for the report (which backend ran the layers).
function collectingLogger(lines) {
  const keep = (...args) => lines.push(args.map(String).join(" "));
  return { debug: keep, log: keep, warn: keep, error: keep };
}

async function completion(wllama, prompt, maxTokens, cachePrompt) {
  const response = await wllama.createCompletion({
    prompt,
    max_tokens: maxTokens,
    temperature: 0,
    top_k: 1,
    ignore_eos: true,
    cache_prompt: cachePrompt,
  });
  return { timings: response.timings, text: response.choices[0].text };
}

// A wllama side: loaded and warmed up; round(n) times each prefill and decode once.
async function startWllama(config, mode, model) {
  const { prefill_lengths, decode_contexts, decode_tokens } = config.measure;
  const prompts = config.promptTexts;
  const lines = [];
  // Imported here: an unattended pywebgpu-only run need not ship wllama.
  const { Wllama } = await import("/vendor/wllama/index.js");
  const wllama = new Wllama(
    { default: new URL("/vendor/wllama/wasm/wllama.wasm", import.meta.url).href },
    { logger: collectingLogger(lines) },
  );
  const nGpuLayers = mode === "cpu" ? 0 : 999;
  const started = performance.now();
  await wllama.loadModel([model], { n_ctx: config.nCtx, n_threads: config.threads, n_gpu_layers: nGpuLayers });
  const result = {
    mode,
    n_gpu_layers: nGpuLayers,
    load_s: (performance.now() - started) / 1000,
    threads: wllama.getNumThreads(),
    multithread: wllama.isMultithread(),
    version: Wllama.getLibllamaVersion(),
    prefill: {},
    decode: {},
  };
  log(`wllama ${mode}: loaded in ${result.load_s.toFixed(1)} s, ${result.threads} thread(s)`);
  // Warm-up, untimed, as on pywebgpu's side: first-call costs (thread pool, buffers).
  await completion(wllama, prompts[Math.min(...prefill_lengths)], 2, false);
  const prefills = Object.fromEntries(prefill_lengths.map((length) => [length, []]));
  const decodes = Object.fromEntries(decode_contexts.map((context) => [context, []]));
  const texts = {};
  return {
    async round(number) {
      for (const length of prefill_lengths) {
        // One token out: its timings are those of the prompt alone.
        const { timings } = await completion(wllama, prompts[length], 1, false);
        prefills[length].push(timings);
        log(`wllama ${mode} prefill ${length}: ${timings.prompt_per_second.toFixed(2)} tok/s (round ${number})`);
      }
      for (const context of decode_contexts) {
        // The first token comes from the prompt's logits; decode_tokens more are decoded.
        // The prompt is kept in the cache: what the cache holds of it is not fed again.
        const reply = await completion(wllama, prompts[context], decode_tokens + 1, true);
        decodes[context].push(reply.timings);
        texts[context] ??= reply.text;
        log(`wllama ${mode} decode @${context}: ${reply.timings.predicted_per_second.toFixed(2)} tok/s (round ${number})`);
      }
    },
    async finish() {
      for (const [length, runs] of Object.entries(prefills)) {
        result.prefill[length] = {
          tokens: runs[0].prompt_n,
          tokens_per_s: median(runs.map((t) => t.prompt_per_second)),
          time_to_first_token_s: median(runs.map((t) => t.prompt_ms)) / 1000,
          runs_tokens_per_s: runs.map((t) => t.prompt_per_second),
          runs_s: runs.map((t) => t.prompt_ms / 1000),
        };
      }
      for (const [context, runs] of Object.entries(decodes)) {
        result.decode[context] = {
          context: runs[0].prompt_n + runs[0].cache_n,
          tokens: runs[0].predicted_n,
          tokens_per_s: median(runs.map((t) => t.predicted_per_second)),
          runs_tokens_per_s: runs.map((t) => t.predicted_per_second),
          greedy_text: texts[context],
        };
      }
      await wllama.exit();
      result.log = lines;
      return result;
    },
  };
}

// --- the run ---------------------------------------------------------------------------

window.runBench = async (config) => {
  const result = { adapter: await describeAdapter(), userAgent: navigator.userAgent, crossOriginIsolated, wllama: {} };
  const sides = []; // [name, side]
  if (config.pywebgpu) {
    log("pywebgpu: starting Python in a worker");
    sides.push(["pywebgpu", await startPywebgpu(config)]);
  }
  if (config.wllamaModes.length) {
    const response = await fetch(config.ggufUrl);
    if (!response.ok) throw new Error(`${config.ggufUrl}: HTTP ${response.status}`);
    const model = await response.blob();
    for (const mode of config.wllamaModes) sides.push([mode, await startWllama(config, mode, model)]);
  }
  if (config.ort) {
    // Imported here: a run without this side need not ship onnxruntime-web.
    const { startOrt } = await import("./ort.mjs");
    sides.push(["ort", await startOrt(config, log)]);
  }
  for (let number = 1; number <= config.measure.reps; number++) {
    for (const [, side] of sides) await side.round(number);
  }
  for (const [name, side] of sides) {
    if (name === "pywebgpu" || name === "ort") result[name] = await side.finish();
    else result.wllama[name] = await side.finish();
  }
  return result;
};
document.body.dataset.ready = "1";

if (new URLSearchParams(location.search).has("unattended")) {
  const report = (body) => fetch("/unattended/report", { method: "POST", body: JSON.stringify(body) });
  fetch("/unattended/config.json")
    .then((response) => response.json())
    .then(window.runBench)
    .then(
      (result) => report({ result }),
      (error) => report({ error: String(error?.stack || error) }),
    );
}
