// out[m, n] = sum_k x[m, k] * scale[k / group_size, n] * q[n, k] (+ bias[n]), f32.
//
// Weights stay packed: row n holds K 4-bit values, two per byte, low nibble first, each
// stored as q + 8 (q in [-8, 7]); read as u32 words, word w of a row holds k = 8w .. 8w+7
// in nibbles 0..7. Scales are stored transposed: [K / group_size, N padded], so the
// scale of (n, group g) is scales[g * scale_stride + n]. K and group_size are multiples
// of 8, so a word never straddles two groups and a row of x is a whole number of vec4s.
//
// Entry points by adapter kind (linear.py chooses): on CPU-emulated adapters threads that
// each walk their own weight rows (`gemv` for one row of x, `gemv_rows` for more); on GPUs
// `gemv_coop` / `gemv_coop4` for decode (coalesced weight reads) and for prefill `gemm`
// (64x64 tiles) or `gemm_wide` (128x128 tiles, where they and their splits are many), each
// with K split over workgroups where the tiles are few, summed by `gemm_reduce`.
//
// Fusions the runtime makes (runtime/fusion.py) that change what is read and written:
// - p.residual (a parameter, not an override: the kernels for CPU adapters take a second
//   or more to compile on SwiftShader, and one pipeline then serves the linears with and
//   without a residual): out = x W^T (+ bias) + residual, `side` [M, N] like out.
// - X_SILU_MUL: x rows hold 2K values, a gate then an up projection; the linear reads
//   silu(gate) * up in their place (the Llama MLP's down projection).
// - several outputs: linears that read one x, their weights concatenated by rows; output
//   n < split0 goes to `out` (rows of split0), n < split1 to `out1` (rows of
//   split1 - split0), the rest to `out2`. One output: split0 = split1 = N.
// - p.silu_mul_out (the kernels for CPU adapters): the weight rows are a gate
//   projection's then an up projection's (N / 2 each) and the linear writes
//   silu(gate) * up, N / 2 values a row, to `out` (split0 = split1 = N / 2): a thread
//   computes the gate's and the up's rows of its outputs (the Llama MLP's gate and up
//   projections and its silu · mul in one dispatch). gemv_rows reads the parameter, like
//   p.residual (one pipeline for all linears: it compiles for over a second on
//   SwiftShader; the branches cost it 1.5-2.5 %); gemv, whose pipelines compile in a tenth
//   of that, also takes it as the override OUT_SILU_MUL (as a parameter, the untaken
//   epilogue slowed its LM head 1.1x on SwiftShader).
// - X_RMS_NORM (the GEMVs: gemv_coop, gemv_coop4, gemv): x is an RMSNorm's input and the
//   kernel applies the norm itself: x * side (the norm weight, [K]) is read in place of
//   x, and the dot product scaled by the row's inverseSqrt(mean(x^2) + RMS_EPS), the sum
//   of squares gathered as x is read (decode's RMSNorm costs no dispatch).
override HAS_BIAS: bool = false;
override X_SILU_MUL: bool = false;
override X_RMS_NORM: bool = false;
override OUT_SILU_MUL: bool = false;  // gemv: p.silu_mul_out
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
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> weights: array<u32>;
@group(0) @binding(3) var<storage, read> scales: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;  // any buffer when !HAS_BIAS
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

// The 8 signed 4-bit values of a word, split by parity of k (matching x_even / x_odd), for
// the kernels for GPUs (those for CPU adapters unpack by masks: see gemv). Converted
// through i32: a signed conversion to f32 is one instruction where an unsigned one may
// take several (the nibbles are small either way).
fn q4_even(word: u32) -> vec4<f32> {
  let bytes = vec4<u32>(word, word >> 8u, word >> 16u, word >> 24u);
  return vec4<f32>(bitcast<vec4<i32>>(bytes & vec4<u32>(0xFu))) - 8.0;
}

fn q4_odd(word: u32) -> vec4<f32> {
  let bytes = vec4<u32>(word >> 4u, word >> 12u, word >> 20u, word >> 28u);
  return vec4<f32>(bitcast<vec4<i32>>(bytes & vec4<u32>(0xFu))) - 8.0;
}

// Stores output n of row m of x: the dot product plus the bias and the residual.
fn store(m: u32, n: u32, value: f32) {
  var result = value;
  if (HAS_BIAS) {
    result += bias[n];
  }
  if (p.residual != 0u) {
    result += side[m * p.n + n];
  }
  if (n < p.split0) {
    out[m * p.split0 + n] = result;
  } else if (n < p.split1) {
    out1[m * (p.split1 - p.split0) + n - p.split0] = result;
  } else {
    out2[m * (p.n - p.split1) + n - p.split1] = result;
  }
}

// p.silu_mul_out: silu(gate) * up for outputs o0 .. o0 + 3 from the gate's and the up's
// sums, the bias added to each first (as the gate and up projections add theirs), in
// the unfused ops' order.
fn silu_mul4(o0: u32, gate: vec4<f32>, up: vec4<f32>) -> vec4<f32> {
  var g = gate;
  var u = up;
  if (HAS_BIAS) {
    let b = p.split0 + o0;
    g += vec4<f32>(bias[o0], bias[o0 + 1u], bias[o0 + 2u], bias[o0 + 3u]);
    u += vec4<f32>(bias[b], bias[b + 1u], bias[b + 2u], bias[b + 3u]);
  }
  return (g * sigmoid(g)) * u;
}

// p.silu_mul_out: stores outputs o0 .. o0 + 3 of row m, those below N / 2.
fn store_silu_mul4(m: u32, o0: u32, values: vec4<f32>) {
  for (var j = 0u; j < 4u; j++) {
    if (o0 + j < p.split0) {
      out[m * p.split0 + o0 + j] = values[j];
    }
  }
}

// How many values a row of the output holds: N, or N / 2 with p.silu_mul_out.
fn stored_outputs() -> u32 {
  return select(p.n, p.split0, p.silu_mul_out != 0u);
}

// For the kernels that compute 4 consecutive outputs n0 .. n0 + 3 per thread or team:
// outputs past N read the last weight row and scales past N (the exporter pads a scales
// row to a multiple of 4 columns; robust access covers any other layout's end); they are
// never written.
fn weight_row(n: u32) -> u32 {
  return min(n, p.n - 1u) * p.weight_row_words;
}

fn scales4(first: u32) -> vec4<f32> {
  return vec4<f32>(scales[first], scales[first + 1u], scales[first + 2u], scales[first + 3u]);
}

// --- kernels for CPU adapters: no shared memory, no barriers, no shifts --------------
// Workgroups that reduce over K with barriers cost far more than the arithmetic on
// CPU-emulated adapters (SwiftShader, lavapipe), which run a workgroup's invocations one
// SIMD batch after another. There every thread walks its own weight rows; the x rows are
// read by every thread and stay in cache. On such adapters a load costs far more than an
// arithmetic instruction (each is a gather, lane by lane), so a thread makes each value
// it loads serve several products: `gemv` (decode; linear_q4gsw_quads.wgsl, as it needs
// subgroups) computes 16 outputs of one row of x per thread; `gemv_rows` (below: prefill,
// and decode where gemv cannot run) computes ROWS_OUTPUTS outputs for 4 * ROW_QUADS rows
// of x, so that each x value serves ROWS_OUTPUTS weights and each unpacked word 8 or 16
// rows (SwiftShader, SmolLM2's linears at 64 rows: 16 outputs 1.9x faster than 4, and
// 4 outputs were 2x the tiled GEMM, whose barriers cost more than they save). Its x
// values come from x_slots, which the module appended to this one defines: with
// subgroups (linear_q4gsw_quads.wgsl) lane j of a quad loads those of row j of each 4
// and hands them to the other lanes by quad swaps, three shuffles instead of three
// gathers (8 rows with quads against 4 rows without: 1.4x; 8 rows alone 1.15-1.2x);
// without, every lane loads them all (linear_q4gsw_no_quads.wgsl).
// Accumulators are scalars or vectors, never private arrays indexed in a loop
// (SwiftShader spills those: ~1.8x slower). And no loop nested in the loop over K: the
// values a loop carries are spilled and blended under the lane mask every iteration, and
// a loop over the words of a group inside the loop over groups cost gemv_rows 1.35x and
// gemv 1.6-1.7x (SwiftShader, SmolLM2's shapes). So gemv_rows takes a step of
// STEP_WORDS words per iteration (written out) and applies the step's group scales at
// its end: 4 words (32 values) where groups are a multiple of 32 values, else 1 (1.15x
// slower than steps of 4, 1.15x faster than the nested loops).
//
// Nibbles are taken out of a word by masks alone (q4_places_lo / _hi), never shifted:
// SwiftShader's JIT has no vector shift by a per-lane amount, and a WGSL shift is one, so
// each costs a handful of scalar instructions (SwiftShader, decode shapes of SmolLM2:
// 1.2-2x faster than shifting as q4_even / q4_odd do). Nibble j masked in place is
// (q + 8) * 16^j, exact in f32; the x value it multiplies is scaled by 16^-j instead
// (x_word, once per word for all of a thread's outputs). The top nibble, its
// bit 3 flipped, converts as a signed value to q * 16^7 itself; the other seven carry the
// + 8, which each group takes off once as 8 times the sum of their x (offset_sum).
//
// ROW_QUADS: gemv_rows' rows of x per thread, in quads: 2 (8 rows) or 4 (16 rows). 16 rows
// make each unpacked word serve twice as many products and a step's group scales twice as
// many words' sums (SwiftShader natively, SmolLM2's linears at 511 rows: 1.17-1.24x
// faster; 256 rows 1.07-1.11x; at 40 rows and below slower: half as many workgroups leave
// a core idle). But the kernel is twice as long, and SwiftShader's JIT compiles it in
// ~3.2 s in Chromium against ~1.3 (4.1-4.5 s natively against 1.5-1.7), so linear.py
// builds the 8-row kernel with the graph and the 16-row one after it (build_upgrades).
// Grid of gemv_rows: (x, y) flatten the blocks of ROWS_THREADS threads, z = ceil(m /
// (4 * ROW_QUADS)).
const ROWS_THREADS: u32 = 64u;  // linear.py's ROWS_THREADS
const ROWS_OUTPUTS: u32 = 16u;  // linear.py's ROWS_OUTPUTS
override ROW_QUADS: u32 = 2u;  // 2 or 4: linear.py's GEMV_ROWS and UPGRADE_ROWS, in quads
override STEP_WORDS: u32 = 4u;  // 4 or 1: words per step of gemv_rows, within one group
const PLACES_LO = vec4<f32>(1.0, 0.0625, 0.00390625, 0.000244140625);  // 16^-j, j = 0 .. 3
const PLACES_HI = vec4<f32>(1.52587890625e-05, 9.5367431640625e-07, 5.9604644775390625e-08, 3.725290298461914e-09);

// Nibbles 0..3 (k = 8w .. 8w + 3) of a word, each (q + 8) * 16^j. Masked one by one
// rather than as a splat of the word and a vector of masks (see add_q4_places: in
// SwiftShader that vector is built through the stack; gemv_rows 1.025x faster).
fn q4_places_lo(word: u32) -> vec4<f32> {
  let w = bitcast<i32>(word);
  return vec4<f32>(f32(w & 0xF), f32(w & 0xF0), f32(w & 0xF00), f32(w & 0xF000));
}

// Nibbles 4..7 of a word: (q + 8) * 16^j, but q * 16^7 for the top one.
fn q4_places_hi(word: u32) -> vec4<f32> {
  let w = bitcast<i32>(word);
  let top = bitcast<i32>(word ^ 0x80000000u) & bitcast<i32>(0xF0000000u);
  return vec4<f32>(f32(w & 0xF0000), f32(w & 0xF00000), f32(w & 0xF000000), f32(top));
}

// x values 8w .. 8w + 7 of a row, as the nibbles of word w meet them: scaled to their
// places (lo: 8w .. 8w + 3, hi: 8w + 4 .. 8w + 7), and the sum of those whose nibbles
// carry the + 8 (all but the top one).
struct XWord {
  lo: vec4<f32>,
  hi: vec4<f32>,
  offset_sum: f32,
}

fn x_word(x_row: u32, w: u32) -> XWord {
  let xa = x_vec(x_row, 2u * w);
  let xb = x_vec(x_row, 2u * w + 1u);
  let offset = xa + vec4<f32>(xb.xyz, 0.0);
  return XWord(xa * PLACES_LO, xb * PLACES_HI, offset.x + offset.y + offset.z + offset.w);
}

// `sum` plus one word of weights times its 8 x values (placed), the + 8 of 7 nibbles
// included. Written out as scalars, nibble by nibble, with no vector in between: in
// SwiftShader's JIT (Subzero) every vector a shader builds is a set of SIMD values
// copied through the stack, and each dot() of two built vectors added such copies to the
// 8 multiply-adds (SmolLM2's decode shapes: 1.2x faster than dot() of q4_places_lo / _hi).
fn add_q4_places(sum: f32, word: u32, x_lo: vec4<f32>, x_hi: vec4<f32>) -> f32 {
  let w = bitcast<i32>(word);
  var s = sum + f32(w & 0xF) * x_lo.x;
  s += f32(w & 0xF0) * x_lo.y;
  s += f32(w & 0xF00) * x_lo.z;
  s += f32(w & 0xF000) * x_lo.w;
  s += f32(w & 0xF0000) * x_hi.x;
  s += f32(w & 0xF00000) * x_hi.y;
  s += f32(w & 0xF000000) * x_hi.z;
  return s + f32(bitcast<i32>(word ^ 0x80000000u) & bitcast<i32>(0xF0000000u)) * x_hi.w;
}

// The words at w of 4 weight rows (starting at rows[i], in words), unpacked.
struct Words4 {
  a_lo: vec4<f32>, a_hi: vec4<f32>, b_lo: vec4<f32>, b_hi: vec4<f32>,
  c_lo: vec4<f32>, c_hi: vec4<f32>, d_lo: vec4<f32>, d_hi: vec4<f32>,
}

fn words4(rows: vec4<u32>, w: u32) -> Words4 {
  let a = weights[rows.x + w];
  let b = weights[rows.y + w];
  let c = weights[rows.z + w];
  let d = weights[rows.w + w];
  return Words4(
    q4_places_lo(a), q4_places_hi(a), q4_places_lo(b), q4_places_hi(b),
    q4_places_lo(c), q4_places_hi(c), q4_places_lo(d), q4_places_hi(d),
  );
}

// `sum` plus one output's unpacked word (lo, hi) times a row's x values at that word,
// written out as scalars (see add_q4_places; gemv_rows at SmolLM2's prefill shapes: 1.1x
// faster than a dot() of each half added to the sum).
fn add_word8(sum: f32, lo: vec4<f32>, hi: vec4<f32>, x: XWord) -> f32 {
  var s = sum + lo.x * x.lo.x;
  s += lo.y * x.lo.y;
  s += lo.z * x.lo.z;
  s += lo.w * x.lo.w;
  s += hi.x * x.hi.x;
  s += hi.y * x.hi.y;
  s += hi.z * x.hi.z;
  return s + hi.w * x.hi.w;
}

// `sums` of 4 outputs plus a row's x values at a word times their unpacked words.
fn add_words4(sums: vec4<f32>, u: Words4, x: XWord) -> vec4<f32> {
  return vec4<f32>(
    add_word8(sums.x, u.a_lo, u.a_hi, x), add_word8(sums.y, u.b_lo, u.b_hi, x),
    add_word8(sums.z, u.c_lo, u.c_hi, x), add_word8(sums.w, u.d_lo, u.d_hi, x),
  );
}

// Where the weight rows of outputs first .. first + 3 start, in words.
fn weight_rows4(first: u32) -> vec4<u32> {
  return vec4<u32>(weight_row(first), weight_row(first + 1u), weight_row(first + 2u), weight_row(first + 3u));
}

// ROWS_OUTPUTS outputs of one row of x, 4 at a time.
struct Outputs16 {
  a: vec4<f32>,
  b: vec4<f32>,
  c: vec4<f32>,
  d: vec4<f32>,
}

// A row's sums over words of one group, and the offset_sum of their x values.
struct RowSums {
  sums: Outputs16,
  offset_sum: f32,
}

// A row's x values at a word for each of a quad's 4 slots (x_slots): slot s of lane j
// is row j ^ s of the 4 rows (so each lane holds all 4, and lane j's slot 0 is row j).
struct XSlots {
  s0: XWord,
  s1: XWord,
  s2: XWord,
  s3: XWord,
}

// `sums` plus one row's x values at a word times the words of 16 outputs (u0 .. u3).
fn add_word(sums: RowSums, u0: Words4, u1: Words4, u2: Words4, u3: Words4, x: XWord) -> RowSums {
  let s = sums.sums;
  return RowSums(
    Outputs16(add_words4(s.a, u0, x), add_words4(s.b, u1, x), add_words4(s.c, u2, x), add_words4(s.d, u3, x)),
    sums.offset_sum + x.offset_sum,
  );
}

// What a gemv_rows thread reads: the weight rows of its 16 outputs (n0 + 4b .. n0 + 4b + 3:
// rows_b, in words), and where its quads of 4 rows of x start, in its lane's slot order
// (x_q: rows m0 + 4q .. m0 + 4q + 3; see XSlots).
struct RowsThread {
  rows0: vec4<u32>, rows1: vec4<u32>, rows2: vec4<u32>, rows3: vec4<u32>,
  x_q0: vec4<u32>, x_q1: vec4<u32>, x_q2: vec4<u32>, x_q3: vec4<u32>,
}

// A quad of a thread's rows (as XSlots orders them), RowSums each or 16 outputs each.
struct QuadSums {
  s0: RowSums, s1: RowSums, s2: RowSums, s3: RowSums,
}
struct QuadTotals {
  t0: Outputs16, t1: Outputs16, t2: Outputs16, t3: Outputs16,
}

// A thread's ROW_QUADS quads of rows (q2, q3 unused with 2).
struct RowsSums {
  q0: QuadSums, q1: QuadSums, q2: QuadSums, q3: QuadSums,
}
struct RowsTotals {
  q0: QuadTotals, q1: QuadTotals, q2: QuadTotals, q3: QuadTotals,
}

// `s` plus word w of the thread's 16 outputs (u0 .. u3, unpacked) times a quad of rows of
// x (x_rows: where they start, in slot order).
fn add_quad_word(s: QuadSums, u0: Words4, u1: Words4, u2: Words4, u3: Words4, x_rows: vec4<u32>, w: u32) -> QuadSums {
  let x = x_slots(x_rows, w);
  return QuadSums(
    add_word(s.s0, u0, u1, u2, u3, x.s0), add_word(s.s1, u0, u1, u2, u3, x.s1),
    add_word(s.s2, u0, u1, u2, u3, x.s2), add_word(s.s3, u0, u1, u2, u3, x.s3),
  );
}

// `s` plus word w of the thread's 16 outputs times its rows of x: each word unpacked
// once for all the rows, the x values of 4 rows at a time.
fn add_rows_word(s: RowsSums, t: RowsThread, w: u32) -> RowsSums {
  let u0 = words4(t.rows0, w);
  let u1 = words4(t.rows1, w);
  let u2 = words4(t.rows2, w);
  let u3 = words4(t.rows3, w);
  var sums = s;
  sums.q0 = add_quad_word(s.q0, u0, u1, u2, u3, t.x_q0, w);
  sums.q1 = add_quad_word(s.q1, u0, u1, u2, u3, t.x_q1, w);
  if (ROW_QUADS > 2u) {
    sums.q2 = add_quad_word(s.q2, u0, u1, u2, u3, t.x_q2, w);
    sums.q3 = add_quad_word(s.q3, u0, u1, u2, u3, t.x_q3, w);
  }
  return sums;
}

// `total` plus a row's sums of words of one group, the + 8 taken off, times the group's
// scales.
fn add_group(total: Outputs16, group: RowSums, scales: Outputs16) -> Outputs16 {
  let offset = 8.0 * group.offset_sum;
  let s = group.sums;
  return Outputs16(
    total.a + (s.a - offset) * scales.a, total.b + (s.b - offset) * scales.b,
    total.c + (s.c - offset) * scales.c, total.d + (s.d - offset) * scales.d,
  );
}

// `t` plus a quad of rows' sums of words of one group, times the group's scales.
fn add_quad_group(t: QuadTotals, s: QuadSums, scales: Outputs16) -> QuadTotals {
  return QuadTotals(add_group(t.t0, s.s0, scales), add_group(t.t1, s.s1, scales), add_group(t.t2, s.s2, scales), add_group(t.t3, s.s3, scales));
}

// `t` plus the thread's sums `s` of words of group g, scaled (firsts: the weight rows of
// the thread's 4 blocks, see gemv_rows).
fn add_rows_group(t: RowsTotals, s: RowsSums, firsts: vec4<u32>, g: u32) -> RowsTotals {
  let scale = g * p.scale_stride;
  let scales = Outputs16(
    scales4(scale + firsts.x), scales4(scale + firsts.y), scales4(scale + firsts.z), scales4(scale + firsts.w),
  );
  var totals = t;
  totals.q0 = add_quad_group(t.q0, s.q0, scales);
  totals.q1 = add_quad_group(t.q1, s.q1, scales);
  if (ROW_QUADS > 2u) {
    totals.q2 = add_quad_group(t.q2, s.q2, scales);
    totals.q3 = add_quad_group(t.q3, s.q3, scales);
  }
  return totals;
}

// Stores outputs n0 .. n0 + 15 of row m, those below M and N.
fn store_row16(m: u32, n0: u32, totals: Outputs16) {
  if (m >= p.m) {
    return;
  }
  let by_four = array<vec4<f32>, 4>(totals.a, totals.b, totals.c, totals.d);
  for (var j = 0u; j < ROWS_OUTPUTS; j++) {
    if (n0 + j < p.n) {
      store(m, n0 + j, by_four[j / 4u][j % 4u]);
    }
  }
}

// p.silu_mul_out: stores outputs o0 .. o0 + 7 of row m, those below M and N / 2: silu
// of the gate's sums (a, b) times the up's (c, d).
fn store_row_silu_mul8(m: u32, o0: u32, totals: Outputs16) {
  if (m >= p.m) {
    return;
  }
  store_silu_mul4(m, o0, silu_mul4(o0, totals.a, totals.c));
  store_silu_mul4(m, o0 + 4u, silu_mul4(o0 + 4u, totals.b, totals.d));
}

// Row m of a thread's totals: its 16 outputs from n0, or 8 of silu(gate) * up.
fn store_thread_row(m: u32, n0: u32, totals: Outputs16) {
  if (p.silu_mul_out != 0u) {
    store_row_silu_mul8(m, n0, totals);
  } else {
    store_row16(m, n0, totals);
  }
}

// Stores a quad of a thread's rows (m0 .. m0 + 3, in its lane's slot order).
fn store_quad(m0: u32, lane: u32, n0: u32, t: QuadTotals) {
  store_thread_row(m0 + lane, n0, t.t0);
  store_thread_row(m0 + (lane ^ 1u), n0, t.t1);
  store_thread_row(m0 + (lane ^ 2u), n0, t.t2);
  store_thread_row(m0 + (lane ^ 3u), n0, t.t3);
}

// Stores a thread's totals (its outputs from n0): its quads of rows from m0.
fn store_rows(m0: u32, lane: u32, n0: u32, t: RowsTotals) {
  store_quad(m0, lane, n0, t.q0);
  store_quad(m0 + 4u, lane, n0, t.q1);
  if (ROW_QUADS > 2u) {
    store_quad(m0 + 8u, lane, n0, t.q2);
    store_quad(m0 + 12u, lane, n0, t.q3);
  }
}

// Whether every output of a quad (whose thread at `lane` starts at output n0, each lane
// `outputs` after the last) is past the stored ones: such a quad leaves whole; in the
// others every thread stays, as the kernel may run quad operations.
fn quad_past_n(n0: u32, lane: u32, outputs: u32) -> bool {
  return n0 - lane * outputs >= stored_outputs();
}

// The first weight rows of the 4 blocks of 4 outputs of a thread whose first output is
// n0 (gemv's totals a .. d, gemv_rows' Outputs16 a .. d): n0 .. n0 + 15, or with
// `silu_mul` the gate's rows of its 8 outputs (a, b), then the up's (c, d).
fn block_rows(n0: u32, silu_mul: bool) -> vec4<u32> {
  let up = select(n0 + 8u, p.split0 + n0, silu_mul);
  return vec4<u32>(n0, n0 + 4u, up, up + 4u);
}

// Where the x rows of slots 0 .. 3 of a lane start, for the 4 rows from `first` (rows
// past M repeat the last one: in bounds, never stored).
fn slot_rows(first: u32, lane: u32) -> vec4<u32> {
  let last = p.m - 1u;
  return vec4<u32>(
    x_row_start(min(first + lane, last)), x_row_start(min(first + (lane ^ 1u), last)),
    x_row_start(min(first + (lane ^ 2u), last)), x_row_start(min(first + (lane ^ 3u), last)),
  );
}

@compute @workgroup_size(ROWS_THREADS)
fn gemv_rows(
  @builtin(local_invocation_index) lid: u32,
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  // A thread's outputs: ROWS_OUTPUTS from n0, or half as many with p.silu_mul_out,
  // each needing a gate's and an up's row.
  let silu_mul = p.silu_mul_out != 0u;
  let outputs = select(ROWS_OUTPUTS, ROWS_OUTPUTS / 2u, silu_mul);
  let n0 = ((wg.x + wg.y * groups.x) * ROWS_THREADS + lid) * outputs;
  let lane = lid % 4u;  // in the quad
  // Threads past N in a quad that stays (x_slots may be quad operations) read the last
  // weight row.
  if (quad_past_n(n0, lane, outputs)) {
    return;
  }
  let firsts = block_rows(n0, silu_mul);
  let m0 = wg.z * 4u * ROW_QUADS;
  let t = RowsThread(
    weight_rows4(firsts.x), weight_rows4(firsts.y), weight_rows4(firsts.z), weight_rows4(firsts.w),
    slot_rows(m0, lane), slot_rows(m0 + 4u, lane), slot_rows(m0 + 8u, lane), slot_rows(m0 + 12u, lane),
  );
  let words_per_group = p.group_size / 8u;
  var totals = RowsTotals();
  for (var w = 0u; w < p.k / 8u; w += STEP_WORDS) {
    var sums = add_rows_word(RowsSums(), t, w);
    if (STEP_WORDS == 4u) {
      sums = add_rows_word(sums, t, w + 1u);
      sums = add_rows_word(sums, t, w + 2u);
      sums = add_rows_word(sums, t, w + 3u);
    }
    totals = add_rows_group(totals, sums, firsts, w / words_per_group);
  }
  store_rows(m0, lane, n0, totals);
}

// --- gemv_coop, gemv_coop4: teams of COOP_THREADS threads, x staged in workgroup memory --
// The GPU decode kernels. The workgroup first stages (up to STAGE_VECS vec4s at a time) the
// x values its teams read: x as the linear sees it (silu(gate) * up, or x times the norm
// weight), computed once per workgroup rather than once per output, and, with
// X_RMS_NORM, the sum of squares of the norm's input. Then the team's threads read
// consecutive words of their weight rows (coalesced), each sums its share with every
// word's group scale applied, and the partial sums are added in workgroup memory.
// Natively on an H200 at the 1B's shapes, against reading x per output (scratch
// variants, BENCHMARKS.md): q/k/v 21 vs 26 µs, the down projection (K = 8,192, silu) 36
// vs 40, gate/up 32-34 vs 35 (before the unrolling below; `python -m devtools.gemv_probe`
// times the kernels as they are).
// Grid: (x, y) flatten the blocks of a workgroup's outputs, z = m.
const COOP_THREADS: u32 = 32u;
const STAGE_VECS: u32 = 512u;  // 2,048 x values: 8 KiB of workgroup memory

var<workgroup> x_stage: array<vec4<f32>, STAGE_VECS>;

// x values [4 first, 4 (first + STAGE_VECS)) of the row at `x_row` into x_stage, by the
// workgroup's `threads`; returns this thread's sum of squares of the norm's input over
// them (X_RMS_NORM). Barriers must surround it.
fn stage_x(thread: u32, threads: u32, x_row: u32, first: u32) -> f32 {
  var squares = 0.0;
  let count = min(STAGE_VECS, p.k / 4u - first);
  for (var i = thread; i < count; i += threads) {
    x_stage[i] = x_vec(x_row, first + i);
    if (X_RMS_NORM) {
      squares += x_squares(x_row, first + i);
    }
  }
  return squares;
}

// The 8 x values at one word (xa, xb) times the word, unpacked by shifts (cheap on GPUs).
fn dot_q4(word: u32, xa: vec4<f32>, xb: vec4<f32>) -> f32 {
  return dot(q4_even(word), vec4<f32>(xa.x, xa.z, xb.x, xb.z)) + dot(q4_odd(word), vec4<f32>(xa.y, xa.w, xb.y, xb.w));
}

// The 8 staged x values at word w of the stage (xa, xb) times an unpacked word.
fn dot_staged(word: u32, w: u32) -> f32 {
  return dot_q4(word, x_stage[2u * w], x_stage[2u * w + 1u]);
}

// dot_staged of 4 weight rows' words at one word of the stage.
fn dot_staged4(words: vec4<u32>, w: u32) -> vec4<f32> {
  return vec4<f32>(dot_staged(words.x, w), dot_staged(words.y, w), dot_staged(words.z, w), dot_staged(words.w, w));
}

// Where the scale of word k_word of output n is in `scales`.
fn scale_index(k_word: u32, n: u32) -> u32 {
  return (k_word * 8u / p.group_size) * p.scale_stride + n;
}

// --- gemv_coop: a team per output, COOP_ROWS outputs per workgroup
const COOP_ROWS: u32 = 8u;  // linear.py's COOP_ROWS

var<workgroup> partial: array<f32, COOP_THREADS * COOP_ROWS>;
var<workgroup> partial_squares: array<f32, COOP_THREADS * COOP_ROWS>;  // X_RMS_NORM

@compute @workgroup_size(COOP_THREADS, COOP_ROWS)
fn gemv_coop(
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(local_invocation_index) thread: u32,
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let n = (wg.x + wg.y * groups.x) * COOP_ROWS + lid.y;
  let read_n = min(n, p.n - 1u);  // outputs past N read the last row, never written
  let m = wg.z;
  let x_row = x_row_start(m);
  let row = read_n * p.weight_row_words;
  var sum = 0.0;
  var squares = 0.0;
  for (var first = 0u; first < p.k / 4u; first += STAGE_VECS) {
    workgroupBarrier();  // the last stage is read
    squares += stage_x(thread, COOP_THREADS * COOP_ROWS, x_row, first);
    workgroupBarrier();
    let first_word = first / 2u;
    let words = min(STAGE_VECS, p.k / 4u - first) / 2u;
    // Four words of the row per step, loaded together: memory latency, not bandwidth,
    // bounds a team (H200, 1B down projection: 21-26 µs against 34-36 one word per step).
    let lanes = COOP_THREADS;
    var w = lid.x;
    for (; w + 3u * lanes < words; w += 4u * lanes) {
      let k = first_word + w;
      let four = vec4<u32>(weights[row + k], weights[row + k + lanes], weights[row + k + 2u * lanes], weights[row + k + 3u * lanes]);
      let four_scales = vec4<f32>(
        scales[scale_index(k, read_n)],
        scales[scale_index(k + lanes, read_n)],
        scales[scale_index(k + 2u * lanes, read_n)],
        scales[scale_index(k + 3u * lanes, read_n)],
      );
      let products = vec4<f32>(dot_staged(four.x, w), dot_staged(four.y, w + lanes), dot_staged(four.z, w + 2u * lanes), dot_staged(four.w, w + 3u * lanes));
      sum += dot(four_scales, products);
    }
    for (; w < words; w += lanes) {
      let k = first_word + w;
      sum += scales[scale_index(k, read_n)] * dot_staged(weights[row + k], w);
    }
  }
  partial[thread] = sum;
  partial_squares[thread] = squares;
  for (var stride = COOP_THREADS / 2u; stride > 0u; stride /= 2u) {
    workgroupBarrier();
    if (lid.x < stride) {
      partial[thread] += partial[thread + stride];
    }
  }
  if (X_RMS_NORM) {
    sum_squares(thread, COOP_THREADS * COOP_ROWS);
  }
  if (lid.x == 0u && n < p.n) {
    var total = partial[thread];
    if (X_RMS_NORM) {
      total *= inverse_rms(partial_squares[0]);
    }
    store(m, n, total);
  }
}

// X_RMS_NORM: partial_squares[0] <- the sum of the workgroup's `threads` partial squares
// (each staged x value was squared by one thread), after a barrier.
fn sum_squares(thread: u32, threads: u32) {
  for (var stride = threads / 2u; stride > 0u; stride /= 2u) {
    workgroupBarrier();
    if (thread < stride) {
      partial_squares[thread] += partial_squares[thread + stride];
    }
  }
  workgroupBarrier();
}

// --- gemv_coop4: a team per 4 outputs, COOP4_TEAMS teams per workgroup
// For large N (the gate/up linear, the LM head): each staged x value a thread reads serves
// 4 weight rows, and a workgroup covers COOP4_TEAMS * 4 consecutive outputs (their scales
// share cache lines). With few outputs it leaves the GPU underfilled: gemv_coop is faster
// there (linear.py chooses; H200, N = 128,256, K = 2,048: 96 us vs 137 us).
const COOP4_TEAMS: u32 = 4u;
const COOP4_OUTPUTS: u32 = 4u;  // linear.py's COOP4_OUTPUTS_PER_WORKGROUP = 16

var<workgroup> partial4: array<vec4<f32>, COOP_THREADS * COOP4_TEAMS>;

@compute @workgroup_size(COOP_THREADS, COOP4_TEAMS)
fn gemv_coop4(
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(local_invocation_index) thread: u32,
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let n0 = ((wg.x + wg.y * groups.x) * COOP4_TEAMS + lid.y) * COOP4_OUTPUTS;
  let m = wg.z;
  let x_row = x_row_start(m);
  let row0 = weight_row(n0);
  let row1 = weight_row(n0 + 1u);
  let row2 = weight_row(n0 + 2u);
  let row3 = weight_row(n0 + 3u);
  var sum = vec4<f32>();
  var squares = 0.0;
  for (var first = 0u; first < p.k / 4u; first += STAGE_VECS) {
    workgroupBarrier();  // the last stage is read
    squares += stage_x(thread, COOP_THREADS * COOP4_TEAMS, x_row, first);
    workgroupBarrier();
    let first_word = first / 2u;
    let words = min(STAGE_VECS, p.k / 4u - first) / 2u;
    // Two words of each row per step, loaded together (as in gemv_coop; gate/up 27-30 µs
    // against 29-33 one word per step).
    var w = lid.x;
    for (; w + COOP_THREADS < words; w += 2u * COOP_THREADS) {
      let k = first_word + w;
      let k_next = k + COOP_THREADS;
      let words_now = vec4<u32>(weights[row0 + k], weights[row1 + k], weights[row2 + k], weights[row3 + k]);
      let words_next = vec4<u32>(weights[row0 + k_next], weights[row1 + k_next], weights[row2 + k_next], weights[row3 + k_next]);
      sum += dot_staged4(words_now, w) * scales4(scale_index(k, n0));
      sum += dot_staged4(words_next, w + COOP_THREADS) * scales4(scale_index(k_next, n0));
    }
    if (w < words) {
      let k = first_word + w;
      let words_now = vec4<u32>(weights[row0 + k], weights[row1 + k], weights[row2 + k], weights[row3 + k]);
      sum += dot_staged4(words_now, w) * scales4(scale_index(k, n0));
    }
  }
  partial4[thread] = sum;
  partial_squares[thread] = squares;
  for (var stride = COOP_THREADS / 2u; stride > 0u; stride /= 2u) {
    workgroupBarrier();
    if (lid.x < stride) {
      partial4[thread] += partial4[thread + stride];
    }
  }
  if (X_RMS_NORM) {
    sum_squares(thread, COOP_THREADS * COOP4_TEAMS);
  }
  if (lid.x == 0u) {
    var total = partial4[thread];
    if (X_RMS_NORM) {
      total *= inverse_rms(partial_squares[0]);
    }
    for (var j = 0u; j < COOP4_OUTPUTS; j++) {
      if (n0 + j < p.n) {
        store(m, n0 + j, total[j]);
      }
    }
  }
}

// --- gemm, gemm_wide: one workgroup computes a tile of out ---------------------------------
// 16x16 threads. Per step of input features, x and the dequantized weights (scale * q,
// the same f32 products PyTorch dequantizes to) are staged in workgroup memory, k-major
// so that each thread reads its rows / columns as vec4s. `gemm`: 64x64 tiles, a thread
// owning a 4x4 block, steps of TILE_K. `gemm_wide` (linear.py's gemm_plan picks it where
// its tiles, with K split if need be, make enough workgroups): 128x128 tiles, a thread
// owning 8x8 outputs (rows 4 (ty + 16 i) .., columns 4 (tx + 16 j) .., i, j in 0..1),
// steps of WIDE_TILE_K; each staged value serves twice the products (H200, the 1B's
// gate/up at 512 rows: 1.5x faster; it fills a GPU only with 4x the outputs, or its K
// split more).
// Split K (p.k_splits > 1): a workgroup's time goes mostly to waiting on each step's
// loads, so a grid of few tiles (a prefill of a few hundred rows) leaves a large GPU
// idle. linear.py then gives each tile p.k_splits workgroups (grid z), each summing an
// even share of the steps; they write their sums to out[(z * M + m) * N + n], out being
// the graph's scratch buffer, and gemm_reduce adds them up and stores the outputs.
// Grid: (ceil(N / tile), ceil(M / tile), p.k_splits).
const TILE: u32 = 64u;  // linear.py's GEMM_TILE
const TILE_K: u32 = 32u;  // linear.py's GEMM_TILE_K
const WIDE_TILE: u32 = 128u;  // linear.py's GEMM_WIDE_TILE
const WIDE_TILE_K: u32 = 16u;

// Both kernels' stages, [k][m / 4] and [k][n / 4]: TILE_K x TILE or WIDE_TILE_K x WIDE_TILE.
var<workgroup> x_tile: array<vec4<f32>, TILE_K * TILE / 4u>;
var<workgroup> w_tile: array<vec4<f32>, TILE_K * TILE / 4u>;

// Stages x at rows m0 .. m0 + tile - 1, values k0 .. k0 + tile_k - 1 (zeros past M or
// K), by the workgroup's 256 threads.
fn stage_x_tile(lid: u32, m0: u32, k0: u32, tile: u32, tile_k: u32) {
  for (var e = lid; e < tile * tile_k / 4u; e += 256u) {
    let row = e / (tile_k / 4u);
    let kq = e % (tile_k / 4u);
    let kv = k0 / 4u + kq;
    var v = vec4<f32>(0.0);
    if (m0 + row < p.m && kv < p.k / 4u) {
      v = x_vec(x_row_start(m0 + row), kv);
    }
    for (var c = 0u; c < 4u; c++) {
      x_tile[(4u * kq + c) * (tile / 4u) + row / 4u][row % 4u] = v[c];
    }
  }
}

// Stages the dequantized weights of outputs n0 .. n0 + tile - 1, values k0 ..
// k0 + tile_k - 1 (zeros past N or K), a word at a time.
fn stage_w_tile(lid: u32, n0: u32, k0: u32, tile: u32, tile_k: u32) {
  for (var e = lid; e < tile * tile_k / 8u; e += 256u) {
    let col = e / (tile_k / 8u);
    let wq = e % (tile_k / 8u);
    let w = k0 / 8u + wq;
    let n = n0 + col;
    var even = vec4<f32>(0.0);
    var odd = vec4<f32>(0.0);
    if (n < p.n && w * 8u < p.k) {
      let word = weights[n * p.weight_row_words + w];
      let scale = scales[(w * 8u) / p.group_size * p.scale_stride + n];
      even = scale * q4_even(word);
      odd = scale * q4_odd(word);
    }
    for (var c = 0u; c < 4u; c++) {
      w_tile[(8u * wq + 2u * c) * (tile / 4u) + col / 4u][col % 4u] = even[c];
      w_tile[(8u * wq + 2u * c + 1u) * (tile / 4u) + col / 4u][col % 4u] = odd[c];
    }
  }
}

// Split z's share of K, [x, y): whole steps of tile_k (the last split's last step may
// pass K, as a lone workgroup's last step may; the stages hold zeros there).
fn split_range(z: u32, tile_k: u32) -> vec2<u32> {
  let split_steps = (p.k + tile_k * p.k_splits - 1u) / (tile_k * p.k_splits);
  let k_begin = z * split_steps * tile_k;
  return vec2<u32>(k_begin, min(p.k, k_begin + split_steps * tile_k));
}

@compute @workgroup_size(256)
fn gemm(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let m0 = wg.y * TILE;
  let n0 = wg.x * TILE;
  let tx = lid % 16u;  // column block: n0 + 4 tx ..
  let ty = lid / 16u;  // row block: m0 + 4 ty ..
  let k_range = split_range(wg.z, TILE_K);
  var acc0 = vec4<f32>(0.0);  // row m0 + 4 ty, columns n0 + 4 tx ..
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  for (var k0 = k_range.x; k0 < k_range.y; k0 += TILE_K) {
    stage_x_tile(lid, m0, k0, TILE, TILE_K);
    stage_w_tile(lid, n0, k0, TILE, TILE_K);
    workgroupBarrier();
    for (var kk = 0u; kk < TILE_K; kk++) {
      let a = x_tile[kk * (TILE / 4u) + ty];
      let b = w_tile[kk * (TILE / 4u) + tx];
      acc0 += a.x * b;
      acc1 += a.y * b;
      acc2 += a.z * b;
      acc3 += a.w * b;
    }
    workgroupBarrier();
  }
  store_row(wg.z, m0 + 4u * ty, n0 + 4u * tx, acc0);
  store_row(wg.z, m0 + 4u * ty + 1u, n0 + 4u * tx, acc1);
  store_row(wg.z, m0 + 4u * ty + 2u, n0 + 4u * tx, acc2);
  store_row(wg.z, m0 + 4u * ty + 3u, n0 + 4u * tx, acc3);
}

// 8 rows of gemm_wide's outputs at 4 columns: a's rows times b (a0 and a1: the rows of
// the thread's two row blocks).
struct Rows8 {
  r0: vec4<f32>, r1: vec4<f32>, r2: vec4<f32>, r3: vec4<f32>,
  r4: vec4<f32>, r5: vec4<f32>, r6: vec4<f32>, r7: vec4<f32>,
}

fn add_products8(acc: Rows8, a0: vec4<f32>, a1: vec4<f32>, b: vec4<f32>) -> Rows8 {
  return Rows8(
    acc.r0 + a0.x * b, acc.r1 + a0.y * b, acc.r2 + a0.z * b, acc.r3 + a0.w * b,
    acc.r4 + a1.x * b, acc.r5 + a1.y * b, acc.r6 + a1.z * b, acc.r7 + a1.w * b,
  );
}

// Stores the 8 rows of a thread's outputs at columns first_n .. first_n + 3 (split z's).
fn store_rows8(z: u32, m0: u32, ty: u32, first_n: u32, acc: Rows8) {
  let m1 = m0 + 4u * (ty + 16u);
  store_row(z, m0 + 4u * ty, first_n, acc.r0);
  store_row(z, m0 + 4u * ty + 1u, first_n, acc.r1);
  store_row(z, m0 + 4u * ty + 2u, first_n, acc.r2);
  store_row(z, m0 + 4u * ty + 3u, first_n, acc.r3);
  store_row(z, m1, first_n, acc.r4);
  store_row(z, m1 + 1u, first_n, acc.r5);
  store_row(z, m1 + 2u, first_n, acc.r6);
  store_row(z, m1 + 3u, first_n, acc.r7);
}

@compute @workgroup_size(256)
fn gemm_wide(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let m0 = wg.y * WIDE_TILE;
  let n0 = wg.x * WIDE_TILE;
  let tx = lid % 16u;
  let ty = lid / 16u;
  var left = Rows8();  // columns n0 + 4 tx ..
  var right = Rows8();  // columns n0 + 4 (tx + 16) ..
  let k_range = split_range(wg.z, WIDE_TILE_K);
  for (var k0 = k_range.x; k0 < k_range.y; k0 += WIDE_TILE_K) {
    stage_x_tile(lid, m0, k0, WIDE_TILE, WIDE_TILE_K);
    stage_w_tile(lid, n0, k0, WIDE_TILE, WIDE_TILE_K);
    workgroupBarrier();
    for (var kk = 0u; kk < WIDE_TILE_K; kk++) {
      let row = kk * (WIDE_TILE / 4u);
      let a0 = x_tile[row + ty];
      let a1 = x_tile[row + ty + 16u];
      left = add_products8(left, a0, a1, w_tile[row + tx]);
      right = add_products8(right, a0, a1, w_tile[row + tx + 16u]);
    }
    workgroupBarrier();
  }
  store_rows8(wg.z, m0, ty, n0 + 4u * tx, left);
  store_rows8(wg.z, m0, ty, n0 + 4u * (tx + 16u), right);
}

// Outputs first_n .. first_n + 3 of row m: stored, or with split K split z's sums.
fn store_row(z: u32, m: u32, first_n: u32, values: vec4<f32>) {
  if (m >= p.m) {
    return;
  }
  for (var j = 0u; j < 4u; j++) {
    let n = first_n + j;
    if (n < p.n) {
      if (p.k_splits > 1u) {
        out[(z * p.m + m) * p.n + n] = values[j];
      } else {
        store(m, n, values[j]);
      }
    }
  }
}

// --- gemm_reduce: the outputs of a split-K gemm, a thread each ---------------------------
// Reads the splits' sums from the scratch buffer gemm wrote, bound in x's slot (a
// binding of its own would be a ninth storage buffer, above WebGPU's default limit of 8
// per stage); the sums of output (m, n) are at (z * M + m) * N + n. Adds them in split
// order and stores the output as gemm does without splits.
// Grid: (x, y) flatten ceil(M * N / REDUCE_THREADS) workgroups.
const REDUCE_THREADS: u32 = 256u;  // linear.py's REDUCE_THREADS

@compute @workgroup_size(REDUCE_THREADS)
fn gemm_reduce(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = gid.x + gid.y * groups.x * REDUCE_THREADS;
  let outputs = p.m * p.n;
  if (i >= outputs) {
    return;
  }
  var total = 0.0;
  for (var z = 0u; z < p.k_splits; z++) {
    let j = z * outputs + i;
    total += x[j / 4u][j % 4u];
  }
  store(i / p.n, i % p.n, total);
}
