// The page's WebGPU adapter, and whether a model fits it, told from its manifest alone
// (before any download): the runtime stores embeddings and linears larger than one
// storage binding by blocks, but keeps the linears it concatenates (a layer's q, k and v
// projections, its gate and up projections) whole, each one buffer bound whole, so the
// largest must be within both maxBufferSize and maxStorageBufferBindingSize.

export function formatBytes(n) {
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(0)} KB`;
  if (n < 1024 * 1024 * 1024) return `${(n / (1024 * 1024)).toFixed(1)} MB`;
  return `${(n / (1024 * 1024 * 1024)).toFixed(2)} GB`;
}

// Bytes of a [rows, columns] weight stored with `bits` a value (float weights are widened
// to float32 as they upload, so any unquantized float is 4 bytes).
const weightBytes = (rows, columns, bits) => Math.ceil((rows * columns * (bits ?? 32)) / 8);

// The manifest's largest weight buffer kept whole: {name, bytes}. The linears' bits are 4
// in every quantized mode (4w, 8da4w).
export function largestWeight(manifest) {
  const { dim, ffn_dim: ffn, n_heads: heads, n_kv_heads: kvHeads, head_dim: headDim } = manifest.model;
  const quantization = manifest.quantization ?? {};
  const linearBits = quantization.mode && quantization.mode !== "fp32" ? 4 : 32;
  const candidates = [{ name: "nothing", bytes: 0 }];
  if (ffn) candidates.push({ name: "a layer's gate and up projections", bytes: weightBytes(2 * ffn, dim, linearBits) });
  if (heads && kvHeads && headDim) {
    candidates.push({ name: "a layer's q, k and v projections", bytes: weightBytes((heads + 2 * kvHeads) * headDim, dim, linearBits) });
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
