// Causal scaled dot-product attention over a KV cache for CPU adapters (SwiftShader,
// lavapipe), f32, in one pass with no workgroup memory and no barriers. The same layouts,
// grouped-query heads and Params as sdpa.wgsl; every key is read from the caches (this
// call's rows were copied there before the dispatch).
//
// Such adapters run a workgroup's invocations one SIMD batch after another, and every
// barrier switches between the batches: sdpa.wgsl's reductions made attention a fifth of
// a SmolLM2 decode step on SwiftShader. Here a quad (4 neighbouring invocations, which
// those adapters run as SIMD lanes) owns one query row of QUAD_HEADS query heads that
// share a kv head; lane j holds dims [16 j, 16 j + 16) of q and of the outputs. The quad
// walks the row's keys once with an online softmax per head (running max, rescaled sum
// and weighted values), four keys at a time (KEY_BLOCK): each lane dots its 16 dims
// with each key, three quad swaps add the four lanes' partial scores up so that lane j
// holds key j's, each lane accumulates its 16 dims of the values. Every key and value a lane
// loads serves its QUAD_HEADS heads: loads are gathers there, lane by lane, and cost
// far more than the arithmetic (SwiftShader, SmolLM2's 3 heads per kv head: 2.0x faster
// than a quad per head at 511 rows).
//
// With ROPE_DECODE (a decode step of RoPE and sdpa_with_kv_cache fused, one row: see
// attention.py's RopeSdpaWithKvCache) q and this call's key arrive before their rotary
// embedding (interleaved pairs, as sdpa.wgsl's ROPE), and the caches hold the keys
// before the position only: the quad rotates q as it loads it, attends the cached
// keys, then the new key (rotated) and value, read from k_new and v_new, and stores them
// in the caches at the position (each quad of the kv head stores the same values; none
// reads that cache row). One dispatch per layer and token instead of the RoPE op's, two
// cache copies and this one.
//
// Several rows per quad (QUAD_ROWS 2 or 4; attention.py's kernel for calls of several
// rows, a prefill's, takes 2, and 4 once the graph's upgrades are built): with 4, the
// quad takes rows 4t .. 4t + 3 of its heads, and every
// key and value it loads serves all their heads (SmolLM2, 3 heads a quad: 12 row-heads a
// load). The quad walks the keys of its last row; each row weights those past its own
// position 0 in the blocks' validity, so the last rows' few extra keys cost no code of
// their own (SwiftShader natively, a 511-row prefill's attention 1.35-1.5x faster than
// two rows a quad; its pipeline compiles in ~1.1 s against ~0.6, see attention.py's
// CPU_QUAD_ROWS). Never with ROPE_DECODE or key splits.
//
// Key split (p.splits > 1; attention.py splits decode rows of many keys): a decode step
// has a quad per kv head only, fewer than the cores can share out evenly (SmolLM2's 3 on
// 2 cores: one core walks two heads' keys while the other waits). With splits, quad
// (task, split) walks an even share of the row's keys (ceil(keys / splits)) and writes
// its heads' running max, sum and weighted values to `partials`; the last split attends
// and stores this call's key (ROPE_DECODE). Then `combine` merges them.
//
// Needs HEAD_DIM a multiple of 4, at most 64 (attention.py picks sdpa.wgsl otherwise).
// Grid: (x, y) flatten ceil(splits * ceil(seq_len / QUAD_ROWS) * q_heads / QUAD_HEADS * 4 /
// WORKGROUP_SIZE) workgroups.
enable subgroups;
// Quad operations sit in the loop over this row's keys, whose trip count differs between
// rows but never within a quad.
diagnostic(off, subgroup_uniformity);

override HEAD_DIM: u32 = 64u;
// Query heads per quad, 1 to 4, dividing the heads per kv head (attention.py's
// cpu_quad_heads). Written out as up to four named heads, not an array: SwiftShader
// spills private arrays indexed in a loop.
override QUAD_HEADS: u32 = 1u;
// Query rows per quad, 1, 2 or 4 (attention.py's CPU_QUAD_ROWS for calls of several rows,
// CPU_UPGRADE_QUAD_ROWS once the graph's upgrades are built).
override QUAD_ROWS: u32 = 1u;
override ROPE_DECODE: bool = false;

struct Params {
  seq_len: u32,
  q_heads: u32,
  kv_heads: u32,
  chunk: u32,   // unused: sdpa.wgsl's keys per split (here even shares)
  splits: u32,  // key splits per row
  scale: f32,
}

struct Position {
  input_pos: u32,
}

// ROPE_DECODE: the RoPE table row of the query row (the RoPE op's position SymInt).
struct FirstRow {
  row: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<vec4<f32>>;
// With splits: per (row, head, split) max, sum, HEAD_DIM weighted sums; else unbound.
@group(0) @binding(1) var<storage, read_write> partials: array<f32>;
@group(0) @binding(2) var<storage, read> q: array<vec4<f32>>;
// ROPE_DECODE: this call's key and value ([1, 1, kv_heads, HEAD_DIM]); else unbound.
@group(0) @binding(3) var<storage, read> k_new: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> v_new: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> k_cache: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> v_cache: array<vec4<f32>>;
@group(0) @binding(7) var<uniform> p: Params;
@group(0) @binding(8) var<uniform> position: Position;
// ROPE_DECODE: cos, sin pairs [rows, HEAD_DIM / 2] and the query row's row of them.
@group(0) @binding(9) var<storage, read> rope_table: array<vec2<f32>>;
@group(0) @binding(10) var<uniform> rope_first: FirstRow;

// One quad per workgroup: these adapters run a workgroup on one core, and a decode step
// has a quad per kv head only (SwiftShader, SmolLM2 at 1,000 keys: 31 ms per token
// against 58 with 64 threads per workgroup).
const WORKGROUP_SIZE: u32 = 4u;  // attention.py's CPU_WORKGROUP_SIZE
const LANES: u32 = 4u;
override VEC4S: u32 = HEAD_DIM / 4u;
// The most negative finite f32: the running max before any key.
const LOWEST: f32 = -0x1.fffffep+127f;

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

// The loop over keys reads these. With HEAD_DIM 64 every lane's dims are in the row and
// the guard is left out: SwiftShader, SmolLM2's decode at 1,024 keys, 1.1x faster.
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
  let a = rope_table[first];
  let b = rope_table[first + 1u];
  return vec4<f32>(x.x * a.x - x.y * a.y, x.x * a.y + x.y * a.x, x.z * b.x - x.w * b.y, x.z * b.y + x.w * b.x);
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
// (total_sums). All the heads' scores, then their maxes and exps, then
// their sums: SwiftShader's JIT emits code in the order written, each head's steps wait
// on each other, and the CPU overlaps only work near in the instruction stream, so the
// heads' steps written side by side overlap (SmolLM2's 3 heads per quad, decode at 1,024
// keys: 1.05-1.1x faster than a head at a time).
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

// The loop over cached keys takes them KEY_BLOCK at a time: lane j of the quad ends up
// with the whole score of the block's key j, so a head's softmax costs two exps per block
// (the rescale, and the four keys' weights side by side in the lanes) where it cost two
// per key in every lane, and its weighted values are rescaled once per block. Natively
// on SwiftShader, SmolLM2, submits alternating: the 30 layers' attention of a 511-token
// prefill 1.2x faster than a key at a time, of a decode step at 1,024 keys 1.1x (most
// of a decode step's attention is the loads, which blocks do not change).
const KEY_BLOCK: u32 = 4u;

// Lane j's whole score of the block's key j, from each lane's partial dots with the
// block's 4 keys (`partial`): a reduce-scatter over the quad in three swaps (pairs of
// lanes first add up the keys of their parity, then of their half).
fn block_score(partial: vec4<f32>, lane: u32) -> f32 {
  let odd = (lane & 1u) != 0u;
  let upper = (lane & 2u) != 0u;
  let pair = select(partial.xz, partial.yw, odd) + quadSwapX(select(partial.yw, partial.xz, odd));
  return select(pair.x, pair.y, upper) + quadSwapY(select(pair.y, pair.x, upper));
}

// A head's partial dots with the block's keys.
fn block_partials(query: Dims, k0: Dims, k1: Dims, k2: Dims, k3: Dims) -> vec4<f32> {
  return vec4<f32>(lane_dot(query, k0), lane_dot(query, k1), lane_dot(query, k2), lane_dot(query, k3));
}

// A head and this lane's weight of the block's key (block_weights).
struct BlockStep {
  head: Head,
  weight: f32,
}

// A head with the block's scores (lane j's of key j; past the row's keys, `valid` false):
// its running max moved to the block's, what it has summed rescaled, the lane's weight
// added to the lane's share of the weight sum (added up over the quad by total_sums).
fn rescaled_for_block(head: Head, lane_score: f32, valid: bool) -> BlockStep {
  let masked = select(LOWEST, lane_score, valid);
  var block_max = max(masked, quadSwapX(masked));
  block_max = max(block_max, quadSwapY(block_max));
  let new_max = max(head.running_max, block_max);
  let rescale = exp(head.running_max - new_max);
  let weight = select(0.0, exp(masked - new_max), valid);
  let acc = Dims(head.acc.a * rescale, head.acc.b * rescale, head.acc.c * rescale, head.acc.d * rescale);
  return BlockStep(Head(new_max, head.weight_sum * rescale + weight, acc), weight);
}

// The weights of a row's heads (up to 4) for one key of a block.
struct HeadWeights {
  h0: f32,
  h1: f32,
  h2: f32,
  h3: f32,
}

// Lane j's weights of the block's key j for a row's heads, their sums rescaled to the
// block's max: all heads' partial dots, then scores, then softmax steps, written side by
// side (see attend_key).
fn block_weights(
  heads: ptr<function, RowHeads>, queries: RowQueries, k0: Dims, k1: Dims, k2: Dims, k3: Dims, lane: u32, valid: bool,
) -> HeadWeights {
  let p0 = block_partials(queries.q0, k0, k1, k2, k3);
  var p1 = vec4<f32>();
  var p2 = vec4<f32>();
  var p3 = vec4<f32>();
  if (QUAD_HEADS > 1u) {
    p1 = block_partials(queries.q1, k0, k1, k2, k3);
  }
  if (QUAD_HEADS > 2u) {
    p2 = block_partials(queries.q2, k0, k1, k2, k3);
  }
  if (QUAD_HEADS > 3u) {
    p3 = block_partials(queries.q3, k0, k1, k2, k3);
  }
  let s0 = block_score(p0, lane);
  var s1 = 0.0;
  var s2 = 0.0;
  var s3 = 0.0;
  if (QUAD_HEADS > 1u) {
    s1 = block_score(p1, lane);
  }
  if (QUAD_HEADS > 2u) {
    s2 = block_score(p2, lane);
  }
  if (QUAD_HEADS > 3u) {
    s3 = block_score(p3, lane);
  }
  var weights = HeadWeights();
  let b0 = rescaled_for_block((*heads).h0, s0, valid);
  (*heads).h0 = b0.head;
  weights.h0 = b0.weight;
  if (QUAD_HEADS > 1u) {
    let b1 = rescaled_for_block((*heads).h1, s1, valid);
    (*heads).h1 = b1.head;
    weights.h1 = b1.weight;
  }
  if (QUAD_HEADS > 2u) {
    let b2 = rescaled_for_block((*heads).h2, s2, valid);
    (*heads).h2 = b2.head;
    weights.h2 = b2.weight;
  }
  if (QUAD_HEADS > 3u) {
    let b3 = rescaled_for_block((*heads).h3, s3, valid);
    (*heads).h3 = b3.head;
    weights.h3 = b3.weight;
  }
  return weights;
}

// `acc` plus `weight` times (this lane's dims of) `value`.
fn plus_weighted(acc: Dims, weight: f32, value: Dims) -> Dims {
  return Dims(acc.a + weight * value.a, acc.b + weight * value.b, acc.c + weight * value.c, acc.d + weight * value.d);
}

// Lane `index`'s `weight`, in every lane of the quad.
fn quad_weight(weight: f32, index: u32) -> f32 {
  switch (index) {
    case 0u: { return quadBroadcast(weight, 0u); }
    case 1u: { return quadBroadcast(weight, 1u); }
    case 2u: { return quadBroadcast(weight, 2u); }
    default: { return quadBroadcast(weight, 3u); }
  }
}

// A row's heads with the value of the block's key `index` (its weights from lane
// `index`; a constant, as quadBroadcast asks).
fn add_block_value(heads: ptr<function, RowHeads>, weights: HeadWeights, value: Dims, index: u32) {
  (*heads).h0.acc = plus_weighted((*heads).h0.acc, quad_weight(weights.h0, index), value);
  if (QUAD_HEADS > 1u) {
    (*heads).h1.acc = plus_weighted((*heads).h1.acc, quad_weight(weights.h1, index), value);
  }
  if (QUAD_HEADS > 2u) {
    (*heads).h2.acc = plus_weighted((*heads).h2.acc, quad_weight(weights.h2, index), value);
  }
  if (QUAD_HEADS > 3u) {
    (*heads).h3.acc = plus_weighted((*heads).h3.acc, quad_weight(weights.h3, index), value);
  }
}

// After the blocks: a head's weight sum, the lanes' shares added up.
fn quad_total(sum: f32) -> f32 {
  let pair = sum + quadSwapX(sum);
  return pair + quadSwapY(pair);
}

fn total_sums(heads: ptr<function, RowHeads>) {
  (*heads).h0.weight_sum = quad_total((*heads).h0.weight_sum);
  (*heads).h1.weight_sum = quad_total((*heads).h1.weight_sum);
  (*heads).h2.weight_sum = quad_total((*heads).h2.weight_sum);
  (*heads).h3.weight_sum = quad_total((*heads).h3.weight_sum);
}

// The quad's rows' heads with the value of the block's key `index` (add_block_value).
fn add_values(
  heads0: ptr<function, RowHeads>, heads1: ptr<function, RowHeads>, heads2: ptr<function, RowHeads>,
  heads3: ptr<function, RowHeads>, weights0: HeadWeights, weights1: HeadWeights, weights2: HeadWeights,
  weights3: HeadWeights, value: Dims, index: u32,
) {
  add_block_value(heads0, weights0, value, index);
  if (QUAD_ROWS > 1u) {
    add_block_value(heads1, weights1, value, index);
  }
  if (QUAD_ROWS > 2u) {
    add_block_value(heads2, weights2, value, index);
    add_block_value(heads3, weights3, value, index);
  }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
  @builtin(local_invocation_index) lid: u32,
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let thread = (wg.x + wg.y * groups.x) * WORKGROUP_SIZE + lid;
  let quads_per_row = p.q_heads / QUAD_HEADS;
  // A whole quad is past the last task or none of it: no lane leaves a quad early.
  let tasks = (p.seq_len + QUAD_ROWS - 1u) / QUAD_ROWS * quads_per_row;
  if (thread / LANES >= tasks * p.splits) {
    return;
  }
  let split = thread / LANES / tasks;
  let task = thread / LANES % tasks;  // row / QUAD_ROWS * quads_per_row + quad of the row
  let lane = thread % LANES;
  let row = task / quads_per_row * QUAD_ROWS;  // the quad's first row
  let first_head = (task % quads_per_row) * QUAD_HEADS;
  let kv_head = first_head / (p.q_heads / p.kv_heads);
  let first = lane * 4u;  // this lane's first vec4 of a row

  // The quad's rows row .. row + QUAD_ROWS - 1, those past the call's last attending it
  // again (stored once). Heads first_head .. first_head + QUAD_HEADS - 1 of a row follow
  // each other in q.
  let last_row = min(row + QUAD_ROWS - 1u, p.seq_len - 1u);
  let row_step = p.q_heads * VEC4S;
  let q_base = (row * p.q_heads + first_head) * VEC4S;
  let queries0 = row_queries(q_base, first);
  var queries1 = RowQueries();
  var queries2 = RowQueries();
  var queries3 = RowQueries();
  if (QUAD_ROWS > 1u) {
    queries1 = row_queries(q_base + (min(row + 1u, last_row) - row) * row_step, first);
  }
  if (QUAD_ROWS > 2u) {
    queries2 = row_queries(q_base + (min(row + 2u, last_row) - row) * row_step, first);
    queries3 = row_queries(q_base + (last_row - row) * row_step, first);
  }

  // Causal: row r attends keys up to and including its position, input_pos + r.
  let keys = position.input_pos + row + 1u;
  var heads0 = no_keys_yet();
  var heads1 = heads0;
  var heads2 = heads0;
  var heads3 = heads0;
  // This split's keys [first_key, end_key) of the quad's last row, of which the caches
  // hold those before `cached` (ROPE_DECODE: all but the last, this call's); a row
  // attends the first keys + (its row - row) of them, each block's keys past that
  // weighted 0.
  let last_keys = keys + last_row - row;
  let chunk = (last_keys + p.splits - 1u) / p.splits;
  let first_key = split * chunk;
  let end_key = min(last_keys, first_key + chunk);
  let cached = select(end_key, min(end_key, keys - 1u), ROPE_DECODE);
  // Keys past `cached` in the last block: the last cached key again, weighted 0.
  let last = cached - 1u;  // read only where the loop runs, cached > 0
  for (var key = first_key; key < cached; key += KEY_BLOCK) {
    let base0 = (key * p.kv_heads + kv_head) * VEC4S;
    let base1 = (min(key + 1u, last) * p.kv_heads + kv_head) * VEC4S;
    let base2 = (min(key + 2u, last) * p.kv_heads + kv_head) * VEC4S;
    let base3 = (min(key + 3u, last) * p.kv_heads + kv_head) * VEC4S;
    // This lane's key, key + lane, against each row's keys (row r's: keys + r - row).
    let lane_key = key + lane;
    let k0 = cached_key(base0, first);
    let k1 = cached_key(base1, first);
    let k2 = cached_key(base2, first);
    let k3 = cached_key(base3, first);
    let weights0 = block_weights(&heads0, queries0, k0, k1, k2, k3, lane, lane_key < min(cached, keys));
    var weights1 = HeadWeights();
    var weights2 = HeadWeights();
    var weights3 = HeadWeights();
    if (QUAD_ROWS > 1u) {
      weights1 = block_weights(&heads1, queries1, k0, k1, k2, k3, lane, lane_key < min(cached, keys + 1u));
    }
    if (QUAD_ROWS > 2u) {
      weights2 = block_weights(&heads2, queries2, k0, k1, k2, k3, lane, lane_key < min(cached, keys + 2u));
      weights3 = block_weights(&heads3, queries3, k0, k1, k2, k3, lane, lane_key < min(cached, keys + 3u));
    }
    add_values(&heads0, &heads1, &heads2, &heads3, weights0, weights1, weights2, weights3, cached_value(base0, first), 0u);
    add_values(&heads0, &heads1, &heads2, &heads3, weights0, weights1, weights2, weights3, cached_value(base1, first), 1u);
    add_values(&heads0, &heads1, &heads2, &heads3, weights0, weights1, weights2, weights3, cached_value(base2, first), 2u);
    add_values(&heads0, &heads1, &heads2, &heads3, weights0, weights1, weights2, weights3, cached_value(base3, first), 3u);
  }
  total_sums(&heads0);
  if (QUAD_ROWS > 1u) {
    total_sums(&heads1);
  }
  if (QUAD_ROWS > 2u) {
    total_sums(&heads2);
    total_sums(&heads3);
  }
  if (ROPE_DECODE && end_key == keys) {
    let base = kv_head * VEC4S;
    let k = Dims(
      rotated(new_key_vec4(base, first), first), rotated(new_key_vec4(base, first + 1u), first + 1u),
      rotated(new_key_vec4(base, first + 2u), first + 2u), rotated(new_key_vec4(base, first + 3u), first + 3u),
    );
    let v = Dims(
      new_value_vec4(base, first), new_value_vec4(base, first + 1u), new_value_vec4(base, first + 2u), new_value_vec4(base, first + 3u),
    );
    attend_key(&heads0, queries0, k, v);
    let cache_base = (position.input_pos * p.kv_heads + kv_head) * VEC4S;
    store_new(cache_base, first, k.a, v.a);
    store_new(cache_base, first + 1u, k.b, v.b);
    store_new(cache_base, first + 2u, k.c, v.c);
    store_new(cache_base, first + 3u, k.d, v.d);
  }

  if (p.splits > 1u) {
    store_partials(heads0, (row * p.q_heads + first_head) * p.splits + split, first);
    return;
  }
  store_heads(heads0, q_base, first);
  if (QUAD_ROWS > 1u && row + 1u < p.seq_len) {
    store_heads(heads1, q_base + row_step, first);
  }
  if (QUAD_ROWS > 2u && row + 2u < p.seq_len) {
    store_heads(heads2, q_base + 2u * row_step, first);
  }
  if (QUAD_ROWS > 2u && row + 3u < p.seq_len) {
    store_heads(heads3, q_base + 3u * row_step, first);
  }
}

// With splits, the second dispatch: a thread per vec4 of the output (row, head, dims)
// merges the head's splits, out = sum_i a_i exp(m_i - m) / sum_i l_i exp(m_i - m) with
// m = max m_i (sdpa_combine.wgsl's merge, which reduces in workgroup memory with
// barriers: 0.43 ms a dispatch on SwiftShader).
// Grid: (x, y) flatten ceil(seq_len * q_heads * VEC4S / COMBINE_WORKGROUP_SIZE) workgroups.
const COMBINE_WORKGROUP_SIZE: u32 = 64u;  // attention.py's CPU_COMBINE_WORKGROUP_SIZE

@compute @workgroup_size(COMBINE_WORKGROUP_SIZE)
fn combine(
  @builtin(local_invocation_index) lid: u32,
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  // (row * q_heads + head) * VEC4S + the vec4 of the head's dims
  let index = (wg.x + wg.y * groups.x) * COMBINE_WORKGROUP_SIZE + lid;
  if (index >= p.seq_len * p.q_heads * VEC4S) {
    return;
  }
  let first_slot = index / VEC4S * p.splits;
  let dims = 2u + 4u * (index % VEC4S);  // the vec4's first dim in a slot
  var max_score = LOWEST;
  for (var i = 0u; i < p.splits; i++) {
    max_score = max(max_score, partials[(first_slot + i) * (HEAD_DIM + 2u)]);
  }
  var weight_sum = 0.0;
  var total = vec4<f32>();
  for (var i = 0u; i < p.splits; i++) {
    let slot = (first_slot + i) * (HEAD_DIM + 2u);
    let factor = exp(partials[slot] - max_score);
    weight_sum += partials[slot + 1u] * factor;
    let a = slot + dims;
    total += vec4<f32>(partials[a], partials[a + 1u], partials[a + 2u], partials[a + 3u]) * factor;
  }
  out[index] = total / weight_sum;
}
