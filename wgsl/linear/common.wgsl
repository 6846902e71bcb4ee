// What every 4-bit linear kernel shares: out[m, n] = sum_k x[m, k] * scale[k / group_size, n]
// * q[n, k] (+ bias[n]), f32, with the Params block, the bindings, x's reads and the stores.
//
// Weights stay packed: row n holds K 4-bit values, two per byte, low nibble first, each
// stored as q + 8 (q in [-8, 7]); read as u32 words, word w of a row holds k = 8w .. 8w+7
// in nibbles 0..7. Scales are stored transposed: [K / group_size, N padded], so the
// scale of (n, group g) is scales[g * scale_stride + n]. K and group_size are multiples
// of 8, so a word never straddles two groups and a row of x is a whole number of vec4s.
//
// Fusions the runtime makes that change what is read and written:
// - p.residual: out = x W^T (+ bias) + residual, `side` [M, N] like out, a row N =
//   p.split0 apart (a parameter, not an override, so that one pipeline serves the linears
//   with and without a residual).
// - X_SILU_MUL: x rows hold 2K values, a gate then an up projection; the linear reads
//   silu(gate) * up in their place (the Llama MLP's down projection).
// - several outputs: linears that read one x, their weights concatenated by rows; output
//   n < split0 goes to `out` (rows of split0), n < split1 to `out1` (rows of
//   split1 - split0), the rest to `out2`. One output: split0 = split1 = N.
// - p.silu_mul_out (the kernels for CPU adapters): the weight rows are a gate
//   projection's then an up projection's (N / 2 each) and the linear writes
//   silu(gate) * up, N / 2 values a row, to `out` (split0 = split1 = N / 2).
// - HAS_OFFSETS (an exact GGUF linear's offset term): out[m, n] += sum_g C[n, g] *
//   (the sum of x[m] over group g), C in `bias` from p.offsets_start (after the bias),
//   transposed like the scales: C[n, g] at g * scale_stride + n; the GEMMs add C[n, g] to the weights they dequantize, the GEMVs
//   the offsets times x's sums over a group (or over a word of it).
// - X_RMS_NORM (the GEMVs: gemv_coop, gemv_coop4, gemv): x is an RMSNorm's input and the
//   kernel applies the norm itself: x * side (the norm weight, [K]) is read in place of
//   x, and the dot product scaled by the row's inverseSqrt(mean(x^2) + RMS_EPS), the sum
//   of squares gathered as x is read.
override HAS_BIAS: bool = false;
override HAS_OFFSETS: bool = false;
override X_SILU_MUL: bool = false;
override X_RMS_NORM: bool = false;
override RMS_EPS: f32 = 0.0;

struct Params {
  m: u32,                 // rows of x (product of its leading live dims)
  n: u32,                 // output features
  k: u32,                 // input features
  weight_row_words: u32,  // u32 words per packed weight row
  scale_stride: u32,      // length of a scales row (N padded to a multiple of 4)
  group_size: u32,
  split0: u32,            // outputs written to `out`
  split1: u32,            // outputs written to `out` and `out1`
  residual: u32,          // 1: add `side` (a residual [M, N]) to the output
  silu_mul_out: u32,      // 1: write silu(gate) * up of the two halves of the outputs
  k_splits: u32,          // GEMMs: workgroups along K per tile (1: the GEMM stores the outputs)
  offsets_start: u32,     // HAS_OFFSETS: where C starts in `bias`
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> weights: array<u32>;
@group(0) @binding(3) var<storage, read> scales: array<f32>;
// The bias, then the offsets (HAS_OFFSETS) from p.offsets_start, as vec4s: N, the offsets' start
// and the scales' stride are multiples of 4. Any buffer when neither HAS_BIAS nor HAS_OFFSETS.
@group(0) @binding(4) var<storage, read> bias: array<vec4<f32>>;
@group(0) @binding(5) var<uniform> p: Params;
// The residual (p.residual) or the norm weight (X_RMS_NORM), never both: one binding
// keeps the kernels within WebGPU's default of 8 storage buffers per stage.
@group(0) @binding(6) var<storage, read> side: array<f32>;  // any buffer when neither
// Written only with several outputs; else a spare buffer each (never one bound elsewhere
// in the dispatch: WebGPU refuses writable bindings that alias).
@group(0) @binding(7) var<storage, read_write> out1: array<f32>;
@group(0) @binding(8) var<storage, read_write> out2: array<f32>;

// Where row m of x starts, in vec4s.
fn x_row_start(m: u32) -> u32 {
  if (X_SILU_MUL) {
    return m * (p.k / 2u);
  }
  return m * (p.k / 4u);
}

// unary.wgsl's sigmoid, so that the fused MLP computes what the unfused ops do.
fn sigmoid(v: vec4<f32>) -> vec4<f32> {
  let e = exp(-abs(v));
  return select(e / (1.0 + e), 1.0 / (1.0 + e), v >= vec4<f32>(0.0));
}

// Values 4i .. 4i + 3 of the row of x starting at `row` (x_row_start).
fn x_vec(row: u32, i: u32) -> vec4<f32> {
  if (X_SILU_MUL) {
    let gate = x[row + i];
    return (gate * sigmoid(gate)) * x[row + p.k / 4u + i];
  }
  if (X_RMS_NORM) {
    let weight = vec4<f32>(side[4u * i], side[4u * i + 1u], side[4u * i + 2u], side[4u * i + 3u]);
    return x[row + i] * weight;
  }
  return x[row + i];
}

// X_RMS_NORM: the sum of squares of x values 4i .. 4i + 3 of a row (the norm's input).
fn x_squares(row: u32, i: u32) -> f32 {
  let v = x[row + i];
  return dot(v, v);
}

// X_RMS_NORM: the norm's scale of a row, from the sum of squares of its K values.
fn inverse_rms(sum_squares: f32) -> f32 {
  return inverseSqrt(sum_squares / f32(p.k) + RMS_EPS);
}

// Value i of the bias binding.
fn bias_at(i: u32) -> f32 {
  return bias[i / 4u][i % 4u];
}

// Stores output n of row m of x: the dot product plus the bias and the residual.
fn store(m: u32, n: u32, value: f32) {
  var result = value;
  if (HAS_BIAS) {
    result += bias_at(n);
  }
  if (p.residual != 0u) {
    result += side[m * p.split0 + n];  // a row of N: p.split0 (one output)
  }
  if (n < p.split0) {
    out[m * p.split0 + n] = result;
  } else if (n < p.split1) {
    out1[m * (p.split1 - p.split0) + n - p.split0] = result;
  } else {
    out2[m * (p.n - p.split1) + n - p.split1] = result;
  }
}

// For the kernels that compute 4 consecutive outputs n0 .. n0 + 3 per thread or team
// (N is a multiple of 4): outputs past N read the last weight row and the scales that
// follow row N (robust access covers the buffer's end); they are never written.
fn weight_row(n: u32) -> u32 {
  return min(n, p.n - 1u) * p.weight_row_words;
}

fn scales4(first: u32) -> vec4<f32> {
  return vec4<f32>(scales[first], scales[first + 1u], scales[first + 2u], scales[first + 3u]);
}

// HAS_OFFSETS: C[n, g], stored transposed like the scales (past N as the scales are).
fn offset_at(n: u32, g: u32) -> f32 {
  return bias_at(p.offsets_start + g * p.scale_stride + n);
}

// HAS_OFFSETS: C[n, g] of outputs first .. first + 3 (first a multiple of 4).
fn offsets4(first: u32, g: u32) -> vec4<f32> {
  return bias[(p.offsets_start + g * p.scale_stride + first) / 4u];
}
