// The page's WebGPU adapter, and whether a model fits it, told from its manifest alone
// (before any download): the runtime stores embeddings and 4-bit linears larger than one
// storage binding by blocks, but keeps the 4-bit linears it concatenates (a layer's q, k
// and v projections, its gate and up projections) whole, and every float32 linear whole,
// each one buffer bound whole, so the largest must be within both maxBufferSize and
// maxStorageBufferBindingSize.

export function formatBytes(n) {
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(0)} KB`;
  if (n < 1024 * 1024 * 1024) return `${(n / (1024 * 1024)).toFixed(1)} MB`;
  return `${(n / (1024 * 1024 * 1024)).toFixed(2)} GB`;
}

// Bytes of a [rows, columns] weight stored with `bits` a value.
const weightBytes = (rows, columns, bits) => Math.ceil((rows * columns * bits) / 8);

// Each linear's [rows, columns] and what to call it, by its role (manifests name the float
// linears of a GGUF export so: quantization.float_linears).
function linearShapes({ dim, ffn_dim: ffn, n_heads: heads, n_kv_heads: kvHeads, head_dim: headDim, vocab_size: vocab }) {
  return {
    "attention.wq": [heads * headDim, dim, "a layer's q projection"],
    "attention.wk": [kvHeads * headDim, dim, "a layer's k projection"],
    "attention.wv": [kvHeads * headDim, dim, "a layer's v projection"],
    "attention.wo": [dim, heads * headDim, "a layer's output projection"],
    "feed_forward.w1": [ffn, dim, "a layer's gate projection"],
    "feed_forward.w2": [dim, ffn, "a layer's down projection"],
    "feed_forward.w3": [ffn, dim, "a layer's up projection"],
    output: [vocab, dim, "the LM head"],
  };
}

// The manifest's largest weight buffer kept whole: {name, bytes}. Quantized modes (4w,
// 8da4w, gguf) store linears in 4 bits (a GGUF's 8-bit and K-quant linears as 4-bit
// planes), but for a GGUF's float linears; an fp32 model's linears are all float32.
export function largestWeight(manifest) {
  const model = manifest.model;
  const { dim, ffn_dim: ffn, n_heads: heads, n_kv_heads: kvHeads, head_dim: headDim } = model;
  const quantization = manifest.quantization ?? {};
  const quantized = Boolean(quantization.mode) && quantization.mode !== "fp32";
  const shapes = linearShapes(model);
  const candidates = [{ name: "nothing", bytes: 0 }];
  if (quantized && ffn) candidates.push({ name: "a layer's gate and up projections", bytes: weightBytes(2 * ffn, dim, 4) });
  if (quantized && heads && kvHeads && headDim) {
    candidates.push({ name: "a layer's q, k and v projections", bytes: weightBytes((heads + 2 * kvHeads) * headDim, dim, 4) });
  }
  const floatRoles = quantized ? quantization.float_linears ?? [] : Object.keys(shapes);
  for (const role of floatRoles) {
    const [rows, columns, name] = shapes[role] ?? [];
    if (rows && columns) candidates.push({ name: `${name} (float32)`, bytes: weightBytes(rows, columns, 32) });
  }
  return candidates.reduce((a, b) => (b.bytes > a.bytes ? b : a));
}

// The adapter's limits that decide the fit, for the page to show.
export function adapterLimits(adapter) {
  return {
    description: adapter.info?.description || adapter.info?.vendor || "this GPU",
    maxBufferSize: adapter.limits.maxBufferSize,
    maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
  };
}

// Why the model cannot run on the adapter (a sentence naming both sizes), or null.
export function fitProblem(manifest, limits) {
  const largest = largestWeight(manifest);
  const allowed = Math.min(limits.maxBufferSize, limits.maxStorageBufferBindingSize);
  if (largest.bytes <= allowed) return null;
  const which = limits.maxStorageBufferBindingSize <= limits.maxBufferSize ? "maxStorageBufferBindingSize" : "maxBufferSize";
  return (
    `This GPU is too small for the model: ${largest.name} needs one buffer of ${formatBytes(largest.bytes)} ` +
    `(${largest.bytes.toLocaleString("en")} bytes), and this GPU allows at most ${formatBytes(allowed)} ` +
    `(${allowed.toLocaleString("en")} bytes, its ${which}).`
  );
}

// The adapter, or an error saying why there is none.
export async function requestAdapter() {
  if (!navigator.gpu) {
    throw new Error(
      "This browser does not offer WebGPU (navigator.gpu is missing), which the model needs to run on your GPU. " +
        "Use a recent Chrome, Edge or Safari, or turn WebGPU on in your browser's settings; the page must come from localhost or https.",
    );
  }
  const adapter = await navigator.gpu.requestAdapter({ powerPreference: "high-performance" });
  if (!adapter) {
    throw new Error(
      "This browser supports WebGPU but found no usable GPU (it may be blocklisted, or hardware acceleration is off). " +
        "Check chrome://gpu or your browser's settings.",
    );
  }
  return adapter;
}
