// The fidelity page, driven by `python -m bench.fidelity` through window.runFidelity(config):
// pywebgpu (bench/web/fidelity_model.py in Pyodide in a worker) and wllama (llama.cpp in
// wasm, CPU) on the same model, one after the other:
//   config.work.prompts: chat prompts (ids) to reply to greedily, config.work.max_tokens at most;
//   config.work.forced_ids: a text whose next-token candidates are read after each prefix.
// wllama's completion takes no token ids (its JSON parser wants a string), so it gets the
// text of the same ids (config.wllama_prompts, config.wllama_prefixes: [length, text]),
// which the driver checked to tokenize back to exactly them; the page checks that
// llama.cpp read as many tokens. Each side returns, per step, its top config.work.top_k
// candidates as [id, logit] (wllama: log-probabilities, whose differences are the logits').

import { startPythonWorker } from "./python_worker.mjs";

const logElement = document.getElementById("log");

function log(text) {
  logElement.textContent += text + "\n";
  console.log(text); // the driver echoes the page's console
}

async function runPywebgpu(config) {
  const python = startPythonWorker(log);
  try {
    const args = JSON.stringify(JSON.stringify({ manifest: config.manifestUrl, config: config.work }));
    return JSON.parse(
      await python.run(`
import json, sys, types
import js
from pyodide.ffi import to_js

fidelity_model = types.ModuleType("fidelity_model")
exec(compile(${JSON.stringify(config.pythonSource)}, "fidelity_model.py", "exec"), fidelity_model.__dict__)

def _status(text):
    js.postMessage(to_js({"type": "status", "text": text}, dict_converter=js.Object.fromEntries))

_args = json.loads(${args})
json.dumps(await fidelity_model.run(_args["manifest"], _args["config"], log=_status))
`),
    );
  } finally {
    python.terminate();
  }
}

// One completion from token ids: the generated ids and each step's top-k [id, logprob].
async function wllamaSteps(wllama, prompt, promptLength, maxTokens, topK, cachePrompt) {
  const response = await wllama.createCompletion({
    prompt,
    max_tokens: maxTokens,
    temperature: 0,
    top_k: 1,
    n_probs: topK,
    cache_prompt: cachePrompt,
  });
  const steps = response.choices?.[0]?.logprobs?.content;
  if (!Array.isArray(steps)) throw new Error(`wllama's completion has no logprobs.content: ${JSON.stringify(response).slice(0, 600)}`);
  if (response.usage?.prompt_tokens !== promptLength) {
    throw new Error(`wllama read ${response.usage?.prompt_tokens} tokens of the prompt ${JSON.stringify(prompt.slice(0, 80))}, pywebgpu's tokenizer ${promptLength}`);
  }
  return {
    ids: steps.map((step) => step.id),
    top: steps.map((step) => step.top_logprobs.map((candidate) => [candidate.id, candidate.logprob])),
  };
}

async function runWllama(config) {
  const { Wllama } = await import("/vendor/wllama/index.js");
  const wllama = new Wllama({ default: new URL("/vendor/wllama/wasm/wllama.wasm", import.meta.url).href }, { logger: { debug() {}, log() {}, warn: console.warn, error: console.error } });
  const response = await fetch(config.ggufUrl);
  if (!response.ok) throw new Error(`${config.ggufUrl}: HTTP ${response.status}`);
  let started = performance.now();
  await wllama.loadModel([await response.blob()], { n_ctx: config.nCtx, n_threads: config.threads, n_gpu_layers: 0 });
  const { prompts, max_tokens: maxTokens, top_k: topK } = config.work;
  const result = { version: Wllama.getLibllamaVersion(), threads: wllama.getNumThreads(), load_s: (performance.now() - started) / 1000, replies: [] };
  log(`wllama: loaded in ${result.load_s.toFixed(1)} s, ${result.threads} thread(s)`);
  for (const [index, promptIds] of prompts.entries()) {
    result.replies.push(await wllamaSteps(wllama, config.wllama_prompts[index], promptIds.length, maxTokens, topK, false));
    log(`wllama: reply ${index + 1} of ${prompts.length}: ${result.replies.at(-1).ids.length} tokens`);
  }
  // Each prefix one token longer than the last: the cache holds all of it but that token.
  started = performance.now();
  result.forced = [];
  for (const [length, text] of config.wllama_prefixes) {
    result.forced.push([length, (await wllamaSteps(wllama, text, length, 1, topK, true)).top[0]]);
  }
  result.forced_s = (performance.now() - started) / 1000;
  log(`wllama: teacher-forced over ${config.wllama_prefixes.length} prefixes in ${result.forced_s.toFixed(1)} s`);
  await wllama.exit();
  return result;
}

window.runFidelity = async (config) => {
  const pywebgpu = await runPywebgpu(config);
  const wllama = await runWllama(config);
  return { userAgent: navigator.userAgent, pywebgpu, wllama };
};
document.body.dataset.ready = "1";
