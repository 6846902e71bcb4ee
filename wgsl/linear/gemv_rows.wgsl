// gemv_rows, for CPU adapters (prefill, and decode where gemv cannot run): a thread computes
// ROWS_OUTPUTS outputs for 4 * ROW_QUADS rows of x, so that each x value it loads serves
// ROWS_OUTPUTS weights and each unpacked word 8 or 16 rows. Its x values come from
// x_slots, which the file including this one defines: gemv_rows_quads.wgsl hands them
// round a quad, gemv_rows_no_quads.wgsl loads them in every lane.
// A loop iteration takes a step of STEP_WORDS words (written out, not a nested loop) and
// applies the step's group scales at its end: 4 words (32 values) where groups are a
// multiple of 32 values, else 1.
// ROW_QUADS: rows of x per thread, in quads: 2 (8 rows) or 4 (16 rows: each unpacked word
// serves twice the products, but the kernel is twice as long to compile, so the handler
// builds it after the graph).
// Grid: (x, y) flatten the blocks of ROWS_THREADS threads, z = ceil(m / (4 * ROW_QUADS)).
#include "linear/cpu_common.wgsl"

const ROWS_THREADS: u32 = 64u;
const ROWS_OUTPUTS: u32 = 16u;
override ROW_QUADS: u32 = 2u;  // 2 or 4
override STEP_WORDS: u32 = 4u;  // 4 or 1: words per step, within one group

// Nibbles 0..3 (k = 8w .. 8w + 3) of a word, each (q + 8) * 16^j. Masked one by one
// rather than as a splat of the word and a vector of masks, which SwiftShader builds
// through the stack.
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
// written out as scalars (see add_q4_places).
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

// A row's sums over words of one group, the offset_sum of their x values, and
// (HAS_OFFSETS) the sum of their top x values, placed (XWord.hi.w).
struct RowSums {
  sums: Outputs16,
  offset_sum: f32,
  top_sum: f32,
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
  var top_sum = sums.top_sum;
  if (HAS_OFFSETS) {
    top_sum += x.hi.w;
  }
  return RowSums(
    Outputs16(add_words4(s.a, u0, x), add_words4(s.b, u1, x), add_words4(s.c, u2, x), add_words4(s.d, u3, x)),
    sums.offset_sum + x.offset_sum,
    top_sum,
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
// scales, and with HAS_OFFSETS the group's offsets times the sum of its x values.
fn add_group(total: Outputs16, group: RowSums, scales: Outputs16, offsets: Outputs16) -> Outputs16 {
  let offset = 8.0 * group.offset_sum;
  let s = group.sums;
  var sum = Outputs16(
    total.a + (s.a - offset) * scales.a, total.b + (s.b - offset) * scales.b,
    total.c + (s.c - offset) * scales.c, total.d + (s.d - offset) * scales.d,
  );
  if (HAS_OFFSETS) {
    let x_sum = group.offset_sum + group.top_sum * TOP_PLACE;
    sum = Outputs16(sum.a + x_sum * offsets.a, sum.b + x_sum * offsets.b, sum.c + x_sum * offsets.c, sum.d + x_sum * offsets.d);
  }
  return sum;
}

// `t` plus a quad of rows' sums of words of one group, times the group's scales (and offsets).
fn add_quad_group(t: QuadTotals, s: QuadSums, scales: Outputs16, offsets: Outputs16) -> QuadTotals {
  return QuadTotals(
    add_group(t.t0, s.s0, scales, offsets), add_group(t.t1, s.s1, scales, offsets),
    add_group(t.t2, s.s2, scales, offsets), add_group(t.t3, s.s3, scales, offsets),
  );
}

// `t` plus the thread's sums `s` of words of group g, scaled, offsets added (firsts: the weight rows of
// the thread's 4 blocks, see gemv_rows).
fn add_rows_group(t: RowsTotals, s: RowsSums, firsts: vec4<u32>, g: u32) -> RowsTotals {
  let scale = g * p.scale_stride;
  let scales = Outputs16(
    scale_vec(scale + firsts.x), scale_vec(scale + firsts.y), scale_vec(scale + firsts.z), scale_vec(scale + firsts.w),
  );
  var offsets = Outputs16();
  if (HAS_OFFSETS) {
    offsets = Outputs16(offsets4(firsts.x, g), offsets4(firsts.y, g), offsets4(firsts.z, g), offsets4(firsts.w, g));
  }
  var totals = t;
  totals.q0 = add_quad_group(t.q0, s.q0, scales, offsets);
  totals.q1 = add_quad_group(t.q1, s.q1, scales, offsets);
  if (ROW_QUADS > 2u) {
    totals.q2 = add_quad_group(t.q2, s.q2, scales, offsets);
    totals.q3 = add_quad_group(t.q3, s.q3, scales, offsets);
  }
  return totals;
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
