// The benchmark's ort-webgpu side: onnxruntime-web's WebGPU execution provider running
// the onnxruntime-genai builder's 4-bit export of the same model (bench/ort_model.py:
// inputs input_ids, attention_mask and past_key_values.N.key/value, outputs the last
// position's logits and present.N.key/value). The KV cache stays on the GPU between
// steps (preferredOutputLocation); the logits come back for a greedy argmax on the CPU.
import { median } from "./median.mjs";

const RUNTIME = "/vendor/onnxruntime-web/";

function argmax(values) {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
  return best;
}

// An ort-webgpu side: loaded and warmed up; round(n) times each prefill once and decodes
// once after each context, with the prompt's ids (the prefill of a length that is also a
// context is the one decoded after: this side's steps on SwiftShader take seconds).
export async function startOrt(config, log) {
  const { prompt_tokens: promptTokens, prefill_lengths: prefillLengths, decode_contexts: decodeContexts, decode_tokens: decodeTokens } = config.measure;
  const { modelUrl, dataUrl, dataFile, layers, kvHeads, headDim } = config.ort;
  const ort = await import(`${RUNTIME}ort.webgpu.min.mjs`);
  ort.env.wasm.wasmPaths = RUNTIME;
  ort.env.wasm.numThreads = config.threads;
  // Errors only: its one warning says that it runs the shape ops of the attention mask on
  // the CPU, as it always does (a console error would fail the run).
  ort.env.logLevel = "error";
  const cacheNames = [];
  for (let layer = 0; layer < layers; layer++) for (const part of ["key", "value"]) cacheNames.push([`past_key_values.${layer}.${part}`, `present.${layer}.${part}`]);
  const started = performance.now();
  const session = await ort.InferenceSession.create(modelUrl, {
    executionProviders: ["webgpu"],
    graphOptimizationLevel: "all",
    logSeverityLevel: 3,
    externalData: [{ path: dataFile, data: dataUrl }],
    preferredOutputLocation: { logits: "cpu", ...Object.fromEntries(cacheNames.map(([, present]) => [present, "gpu-buffer"])) },
  });
  const result = {
    load_s: (performance.now() - started) / 1000,
    version: ort.env.versions,
    execution_provider: "webgpu",
    threads: ort.env.wasm.numThreads,
    prefill: {},
    decode: {},
  };
  log(`ort-webgpu: loaded in ${result.load_s.toFixed(1)} s`);
  const emptyCache = () =>
    Object.fromEntries(cacheNames.map(([past]) => [past, new ort.Tensor("float32", new Float32Array(0), [1, kvHeads, 0, headDim])]));
  const dispose = (cache) => Object.values(cache).forEach((tensor) => tensor.location === "gpu-buffer" && tensor.dispose());
  // One call: `ids` after `cache` (which it disposes); the greedy next token and the new cache.
  async function step(ids, cache, cached) {
    const total = cached + ids.length;
    const outputs = await session.run({
      input_ids: new ort.Tensor("int64", BigInt64Array.from(ids, BigInt), [1, ids.length]),
      attention_mask: new ort.Tensor("int64", new BigInt64Array(total).fill(1n), [1, total]),
      ...cache,
    });
    dispose(cache);
    const vocab = outputs.logits.dims.at(-1);
    const token = argmax(outputs.logits.data.subarray(outputs.logits.data.length - vocab));
    return { token, cache: Object.fromEntries(cacheNames.map(([past, present]) => [past, outputs[present]])) };
  }
  // Warm-up, untimed, as on the other sides: the first calls compile the shaders.
  const warm = await step(promptTokens.slice(0, 8), emptyCache(), 0);
  dispose((await step([warm.token], warm.cache, 8)).cache);

  const prefills = Object.fromEntries(prefillLengths.map((length) => [length, []]));
  const decodes = Object.fromEntries(decodeContexts.map((context) => [context, []]));
  const continuations = {};
  const lengths = [...new Set([...prefillLengths, ...decodeContexts])].sort((a, b) => a - b);
  return {
    async round(number) {
      for (const length of lengths) {
        let started = performance.now();
        let { token, cache } = await step(promptTokens.slice(0, length), emptyCache(), 0);
        const prefillS = (performance.now() - started) / 1000;
        if (length in prefills) {
          prefills[length].push(prefillS);
          log(`ort-webgpu prefill ${length}: ${(length / prefillS).toFixed(2)} tok/s (round ${number})`);
        }
        if (length in decodes) {
          // The first token comes from the prompt's logits; decodeTokens more are decoded.
          const continuation = [token];
          started = performance.now();
          for (let k = 0; k < decodeTokens; k++) {
            ({ token, cache } = await step([token], cache, length + k));
            continuation.push(token);
          }
          const speed = decodeTokens / ((performance.now() - started) / 1000);
          decodes[length].push(speed);
          continuations[length] ??= continuation;
          if (continuations[length].join() !== continuation.join()) throw new Error(`ort-webgpu: greedy decoding after ${length} tokens gave other tokens in round ${number} than in the first`);
          log(`ort-webgpu decode @${length}: ${speed.toFixed(2)} tok/s (round ${number})`);
        }
        dispose(cache);
      }
    },
    async finish() {
      for (const [length, runs] of Object.entries(prefills)) {
        result.prefill[length] = {
          tokens: Number(length),
          tokens_per_s: length / median(runs),
          time_to_first_token_s: median(runs),
          runs_s: runs,
          runs_tokens_per_s: runs.map((seconds) => length / seconds),
        };
      }
      for (const [context, runs] of Object.entries(decodes)) {
        result.decode[context] = {
          context: Number(context),
          tokens: decodeTokens,
          tokens_per_s: median(runs),
          runs_tokens_per_s: runs,
          greedy_continuation: continuations[context],
        };
      }
      await session.release();
      return result;
    },
  };
}
