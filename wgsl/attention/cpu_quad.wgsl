// A quad's share of the CPU attention kernel: lane j holds dims [16 j, 16 j + 16) of q and
// of the outputs of QUAD_HEADS query heads of one row, which share a kv head, with each
// head's online softmax (running max, rescaled sum and weighted values).
#include "attention/cpu_bindings.wgsl"
#include "attention/rope.wgsl"

// Query heads per quad, 1 to 4, dividing the heads per kv head. Written out as up to four
// named heads, not an array: SwiftShader spills private arrays indexed in a loop.
override QUAD_HEADS: u32 = 1u;
// A decode step of RoPE and sdpa_with_kv_cache fused: q and this call's key arrive before
// their rotary embedding, and the kernel stores the new key and value in the caches.
override ROPE_DECODE: bool = false;

const LANES: u32 = 4u;

// A lane's 16 dims of a row of q, k, v or the output.
struct Dims {
  a: vec4<f32>,
  b: vec4<f32>,
  c: vec4<f32>,
  d: vec4<f32>,
}

// One head's online softmax so far.
struct Head {
  running_max: f32,
  weight_sum: f32,
  acc: Dims,
}

// Vec4 `index` of the row at `base` in `q`, `k_cache` or `v_cache`; zero past HEAD_DIM
// (a lane's last vec4s when HEAD_DIM < 64).
fn q_vec4(base: u32, index: u32) -> vec4<f32> {
  return select(vec4<f32>(), q[base + min(index, VEC4S - 1u)], index < VEC4S);
}

// The loop over keys reads these. With HEAD_DIM 64 every lane's dims are in the row, so
// the guard is left out of the loop's loads.
fn key_vec4(base: u32, index: u32) -> vec4<f32> {
  if (VEC4S == 4u * LANES) {
    return k_cache[base + index];
  }
  return select(vec4<f32>(), k_cache[base + min(index, VEC4S - 1u)], index < VEC4S);
}

fn value_vec4(base: u32, index: u32) -> vec4<f32> {
  if (VEC4S == 4u * LANES) {
    return v_cache[base + index];
  }
  return select(vec4<f32>(), v_cache[base + min(index, VEC4S - 1u)], index < VEC4S);
}

// The lane's dims (from vec4 `first`) of the cached key or value row at `base`.
fn cached_key(base: u32, first: u32) -> Dims {
  return Dims(key_vec4(base, first), key_vec4(base, first + 1u), key_vec4(base, first + 2u), key_vec4(base, first + 3u));
}

fn cached_value(base: u32, first: u32) -> Dims {
  return Dims(value_vec4(base, first), value_vec4(base, first + 1u), value_vec4(base, first + 2u), value_vec4(base, first + 3u));
}

// ROPE_DECODE: vec4 `index` of a q or k row (two pairs of dims) rotated by table row
// rope_first.row; unchanged otherwise.
fn rotated(x: vec4<f32>, index: u32) -> vec4<f32> {
  if (!ROPE_DECODE) {
    return x;
  }
  let first = rope_first.row * (HEAD_DIM / 2u) + 2u * min(index, VEC4S - 1u);
  return rotate_pairs(x, rope_table[first], rope_table[first + 1u]);
}

// The lane's dims (from vec4 `first`) of the query row at `base`, scaled.
fn query(base: u32, first: u32) -> Dims {
  return Dims(
    rotated(q_vec4(base, first), first) * p.scale, rotated(q_vec4(base, first + 1u), first + 1u) * p.scale,
    rotated(q_vec4(base, first + 2u), first + 2u) * p.scale, rotated(q_vec4(base, first + 3u), first + 3u) * p.scale,
  );
}

// ROPE_DECODE: vec4 `index` of this call's key or value of the kv head at `base`.
fn new_key_vec4(base: u32, index: u32) -> vec4<f32> {
  return select(vec4<f32>(), k_new[base + min(index, VEC4S - 1u)], index < VEC4S);
}

fn new_value_vec4(base: u32, index: u32) -> vec4<f32> {
  return select(vec4<f32>(), v_new[base + min(index, VEC4S - 1u)], index < VEC4S);
}

// ROPE_DECODE: stores the lane's vec4 `index` of the new key and value at `cache_base`.
fn store_new(cache_base: u32, index: u32, key: vec4<f32>, value: vec4<f32>) {
  if (index < VEC4S) {
    k_cache[cache_base + index] = key;
    v_cache[cache_base + index] = value;
  }
}

// This lane's part of the dot product of a query and a key: its 16 dims.
fn lane_dot(query: Dims, key: Dims) -> f32 {
  return dot(query.a, key.a) + dot(query.b, key.b) + dot(query.c, key.c) + dot(query.d, key.d);
}

// The quad's score of a key: the four lanes' partial dots added up.
fn score(query: Dims, key: Dims) -> f32 {
  var s = lane_dot(query, key);
  s += quadSwapX(s);
  s += quadSwapY(s);
  return s;
}

// A head with one more key: its new running max, the rescale of what the head has summed
// (exp(old max - new max)), the key's weight (exp(score - new max)) and (this lane's
// dims of) its value.
fn attend(head: Head, new_max: f32, rescale: f32, weight: f32, value: Dims) -> Head {
  return Head(
    new_max,
    head.weight_sum * rescale + weight,
    Dims(
      head.acc.a * rescale + weight * value.a, head.acc.b * rescale + weight * value.b,
      head.acc.c * rescale + weight * value.c, head.acc.d * rescale + weight * value.d,
    ),
  );
}

// The quad's heads of one query row (QUAD_HEADS of h0 .. h3) and their queries. Written
// out as named heads and rows, not arrays: SwiftShader spills private arrays indexed in a
// loop.
struct RowHeads {
  h0: Head,
  h1: Head,
  h2: Head,
  h3: Head,
}

struct RowQueries {
  q0: Dims,
  q1: Dims,
  q2: Dims,
  q3: Dims,
}

fn no_keys_yet() -> RowHeads {
  let head = Head(LOWEST, 0.0, Dims());
  return RowHeads(head, head, head, head);
}

// The lane's dims of the quad's heads' queries of the row whose first head's starts at
// `base`.
fn row_queries(base: u32, first: u32) -> RowQueries {
  var queries = RowQueries();
  queries.q0 = query(base, first);
  if (QUAD_HEADS > 1u) {
    queries.q1 = query(base + VEC4S, first);
  }
  if (QUAD_HEADS > 2u) {
    queries.q2 = query(base + 2u * VEC4S, first);
  }
  if (QUAD_HEADS > 3u) {
    queries.q3 = query(base + 3u * VEC4S, first);
  }
  return queries;
}

// With splits: a head's running max, sum and this lane's dims of its weighted values, at
// `slot` of partials.
fn store_partial(head: Head, slot: u32, first: u32) {
  let base = slot * (HEAD_DIM + 2u);
  if (first == 0u) {
    partials[base] = head.running_max;
    partials[base + 1u] = head.weight_sum;
  }
  let results = array<vec4<f32>, 4>(head.acc.a, head.acc.b, head.acc.c, head.acc.d);
  for (var i = 0u; i < 4u; i++) {
    if (first + i < VEC4S) {
      for (var j = 0u; j < 4u; j++) {
        partials[base + 2u + 4u * (first + i) + j] = results[i][j];
      }
    }
  }
}

// With splits: the row's heads' partial results, the first at `slot` (each head's
// splits follow each other).
fn store_partials(heads: RowHeads, slot: u32, first: u32) {
  store_partial(heads.h0, slot, first);
  if (QUAD_HEADS > 1u) {
    store_partial(heads.h1, slot + p.splits, first);
  }
  if (QUAD_HEADS > 2u) {
    store_partial(heads.h2, slot + 2u * p.splits, first);
  }
  if (QUAD_HEADS > 3u) {
    store_partial(heads.h3, slot + 3u * p.splits, first);
  }
}

// A head's output: this lane's dims of its row at `base`.
fn store_head(head: Head, base: u32, first: u32) {
  let results = array<vec4<f32>, 4>(head.acc.a, head.acc.b, head.acc.c, head.acc.d);
  for (var i = 0u; i < 4u; i++) {
    if (first + i < VEC4S) {
      out[base + first + i] = results[i] / head.weight_sum;
    }
  }
}

// The outputs of a row's heads, whose rows start at `base`.
fn store_heads(heads: RowHeads, base: u32, first: u32) {
  store_head(heads.h0, base, first);
  if (QUAD_HEADS > 1u) {
    store_head(heads.h1, base + VEC4S, first);
  }
  if (QUAD_HEADS > 2u) {
    store_head(heads.h2, base + 2u * VEC4S, first);
  }
  if (QUAD_HEADS > 3u) {
    store_head(heads.h3, base + 3u * VEC4S, first);
  }
}

// A row's heads with one more key after the blocks (ROPE_DECODE's new key): the lane's
// dims of the key and of its value, the heads' sums already added up over the quad
// (total_sums). All the heads' scores, then their maxes and exps, then their sums, written
// side by side: SwiftShader's JIT emits code in the order written and the CPU overlaps
// only work near in the instruction stream, so independent heads' steps overlap.
fn attend_key(heads: ptr<function, RowHeads>, queries: RowQueries, key: Dims, value: Dims) {
  let h = *heads;
  let s0 = score(queries.q0, key);
  var s1 = 0.0;
  var s2 = 0.0;
  var s3 = 0.0;
  if (QUAD_HEADS > 1u) {
    s1 = score(queries.q1, key);
  }
  if (QUAD_HEADS > 2u) {
    s2 = score(queries.q2, key);
  }
  if (QUAD_HEADS > 3u) {
    s3 = score(queries.q3, key);
  }
  let m0 = max(h.h0.running_max, s0);
  let m1 = max(h.h1.running_max, s1);
  let m2 = max(h.h2.running_max, s2);
  let m3 = max(h.h3.running_max, s3);
  let r0 = exp(h.h0.running_max - m0);
  let w0 = exp(s0 - m0);
  var r1 = 0.0;
  var w1 = 0.0;
  var r2 = 0.0;
  var w2 = 0.0;
  var r3 = 0.0;
  var w3 = 0.0;
  if (QUAD_HEADS > 1u) {
    r1 = exp(h.h1.running_max - m1);
    w1 = exp(s1 - m1);
  }
  if (QUAD_HEADS > 2u) {
    r2 = exp(h.h2.running_max - m2);
    w2 = exp(s2 - m2);
  }
  if (QUAD_HEADS > 3u) {
    r3 = exp(h.h3.running_max - m3);
    w3 = exp(s3 - m3);
  }
  (*heads).h0 = attend(h.h0, m0, r0, w0, value);
  if (QUAD_HEADS > 1u) {
    (*heads).h1 = attend(h.h1, m1, r1, w1, value);
  }
  if (QUAD_HEADS > 2u) {
    (*heads).h2 = attend(h.h2, m2, r2, w2, value);
  }
  if (QUAD_HEADS > 3u) {
    (*heads).h3 = attend(h.h3, m3, r3, w3, value);
  }
}
