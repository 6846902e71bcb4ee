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
// and weighted values): each lane dots its 16 dims, two quad swaps add the four partial
// scores, each lane accumulates its 16 dims of the values. Every key and value a lane
// loads serves its QUAD_HEADS heads: loads are gathers there, lane by lane, and cost
// far more than the arithmetic (SwiftShader, SmolLM2's 3 heads per kv head: 2.0x faster
// than a quad per head at 511 rows).
//
// The caches are bound as words: f32 values, or with CACHE_F16 (an f16 program's caches)
// float16 values packed two per word: half the bytes, and where HEAD_DIM is a multiple of
// 8 half the gathers. `store_new_rows` puts this call's keys and values into float16
// caches first (f32 caches get buffer copies).
//
// Needs HEAD_DIM a multiple of 4, at most 64 (attention.py picks sdpa.wgsl otherwise).
// Grid: (x, y) flatten ceil(seq_len * q_heads / QUAD_HEADS * 4 / WORKGROUP_SIZE)
// workgroups.
enable subgroups;
// Quad operations sit in the loop over this row's keys, whose trip count differs between
// rows but never within a quad.
diagnostic(off, subgroup_uniformity);

override HEAD_DIM: u32 = 64u;
// Query heads per quad, 1 to 4, dividing the heads per kv head (attention.py's
// cpu_quad_heads). Written out as up to four named heads, not an array: SwiftShader
// spills private arrays indexed in a loop.
override QUAD_HEADS: u32 = 1u;
override CACHE_F16: bool = false;

struct Params {
  seq_len: u32,
  q_heads: u32,
  kv_heads: u32,
  chunk: u32,   // unused: sdpa.wgsl's key split
  splits: u32,  // unused
  scale: f32,
}

struct Position {
  input_pos: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> k: array<vec4<f32>>;  // store_new_rows'
@group(0) @binding(4) var<storage, read> v: array<vec4<f32>>;  // store_new_rows'
@group(0) @binding(5) var<storage, read_write> k_cache: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read_write> v_cache: array<vec4<u32>>;
@group(0) @binding(7) var<uniform> p: Params;
@group(0) @binding(8) var<uniform> position: Position;

// One quad per workgroup: these adapters run a workgroup on one core, and a decode step
// has a quad per kv head only (SwiftShader, SmolLM2 at 1,000 keys: 31 ms per token
// against 58 with 64 threads per workgroup).
const WORKGROUP_SIZE: u32 = 4u;  // attention.py's CPU_WORKGROUP_SIZE
const LANES: u32 = 4u;
override VEC4S: u32 = HEAD_DIM / 4u;
// The first of a row's last two vec4s (paired_dims' rows have at least two).
override LAST_PAIR: u32 = max(VEC4S, 2u) - 2u;
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

// Vec4 `index` of the row at `base` (both in vec4s of f32 values) in `q`; zero past
// HEAD_DIM (a lane's last vec4s when HEAD_DIM < 64).
fn q_vec4(base: u32, index: u32) -> vec4<f32> {
  return select(vec4<f32>(), q[base + min(index, VEC4S - 1u)], index < VEC4S);
}

// Four float16 values (two words) as f32.
fn halves4(words: vec2<u32>) -> vec4<f32> {
  return vec4<f32>(unpack2x16float(words.x), unpack2x16float(words.y));
}

// Vec4 `i` of a cache (in vec4s of f32 values) from the vec4 of words holding it: itself
// with f32 values; with float16 values, half of words[i / 2].
fn cache_vec4(words: vec4<u32>, i: u32) -> vec4<f32> {
  if (CACHE_F16) {
    return halves4(select(words.xy, words.zw, i % 2u == 1u));
  }
  return bitcast<vec4<f32>>(words);
}

// Where in a cache's words vec4 `i` lies.
fn word_of(i: u32) -> u32 {
  return select(i, i / 2u, CACHE_F16);
}

// Vec4 `index` of the cache row at `base` (as q_vec4's); zero past HEAD_DIM.
fn key_vec4(base: u32, index: u32) -> vec4<f32> {
  let i = base + min(index, VEC4S - 1u);
  return select(vec4<f32>(), cache_vec4(k_cache[word_of(i)], i), index < VEC4S);
}

fn value_vec4(base: u32, index: u32) -> vec4<f32> {
  let i = base + min(index, VEC4S - 1u);
  return select(vec4<f32>(), cache_vec4(v_cache[word_of(i)], i), index < VEC4S);
}

// The lane's 16 dims (from vec4 `first`) of a float16 cache row at `base` whose HEAD_DIM
// is a multiple of 8, given the vec4s of words holding its vec4s first, first + 1 and
// first + 2, first + 3 (even: the row's start and `first` are): two loads where f32
// values take four, and each load is a gather there, lane by lane. Zero past HEAD_DIM.
fn paired_dims(w0: vec4<u32>, w1: vec4<u32>, first: u32) -> Dims {
  let zero = vec4<f32>();
  return Dims(
    select(zero, halves4(w0.xy), first < VEC4S), select(zero, halves4(w0.zw), first < VEC4S),
    select(zero, halves4(w1.xy), first + 2u < VEC4S), select(zero, halves4(w1.zw), first + 2u < VEC4S),
  );
}

fn key_dims(base: u32, first: u32) -> Dims {
  if (CACHE_F16 && VEC4S % 2u == 0u) {
    let pairs = (base + vec2<u32>(min(first, LAST_PAIR), min(first + 2u, LAST_PAIR))) / 2u;
    return paired_dims(k_cache[pairs.x], k_cache[pairs.y], first);
  }
  return Dims(key_vec4(base, first), key_vec4(base, first + 1u), key_vec4(base, first + 2u), key_vec4(base, first + 3u));
}

fn value_dims(base: u32, first: u32) -> Dims {
  if (CACHE_F16 && VEC4S % 2u == 0u) {
    let pairs = (base + vec2<u32>(min(first, LAST_PAIR), min(first + 2u, LAST_PAIR))) / 2u;
    return paired_dims(v_cache[pairs.x], v_cache[pairs.y], first);
  }
  return Dims(value_vec4(base, first), value_vec4(base, first + 1u), value_vec4(base, first + 2u), value_vec4(base, first + 3u));
}

// The lane's dims (from vec4 `first`) of the query row at `base`, scaled.
fn query(base: u32, first: u32) -> Dims {
  return Dims(
    q_vec4(base, first) * p.scale, q_vec4(base, first + 1u) * p.scale,
    q_vec4(base, first + 2u) * p.scale, q_vec4(base, first + 3u) * p.scale,
  );
}

// The quad's score of a key: the four lanes' partial dots added up.
fn score(query: Dims, key: Dims) -> f32 {
  var s = dot(query.a, key.a) + dot(query.b, key.b) + dot(query.c, key.c) + dot(query.d, key.d);
  s += quadSwapX(s);
  s += quadSwapY(s);
  return s;
}

// A head's softmax with one more key: its score and (this lane's dims of) its value.
fn attend(head: Head, s: f32, value: Dims) -> Head {
  let new_max = max(head.running_max, s);
  let rescale = exp(head.running_max - new_max);
  let weight = exp(s - new_max);
  return Head(
    new_max,
    head.weight_sum * rescale + weight,
    Dims(
      head.acc.a * rescale + weight * value.a, head.acc.b * rescale + weight * value.b,
      head.acc.c * rescale + weight * value.c, head.acc.d * rescale + weight * value.d,
    ),
  );
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

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
  @builtin(local_invocation_index) lid: u32,
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let thread = (wg.x + wg.y * groups.x) * WORKGROUP_SIZE + lid;
  let quads_per_row = p.q_heads / QUAD_HEADS;
  // A whole quad is past the last task or none of it: no lane leaves a quad early.
  let task = thread / LANES;  // row * quads_per_row + quad of the row
  if (task >= p.seq_len * quads_per_row) {
    return;
  }
  let lane = thread % LANES;
  let row = task / quads_per_row;
  let first_head = (task % quads_per_row) * QUAD_HEADS;
  let kv_head = first_head / (p.q_heads / p.kv_heads);
  let first = lane * 4u;  // this lane's first vec4 of a row

  // Heads first_head .. first_head + QUAD_HEADS - 1: their rows follow each other in q.
  let q_base = (row * p.q_heads + first_head) * VEC4S;
  let q0 = query(q_base, first);
  var q1 = Dims();
  var q2 = Dims();
  var q3 = Dims();
  if (QUAD_HEADS > 1u) {
    q1 = query(q_base + VEC4S, first);
  }
  if (QUAD_HEADS > 2u) {
    q2 = query(q_base + 2u * VEC4S, first);
  }
  if (QUAD_HEADS > 3u) {
    q3 = query(q_base + 3u * VEC4S, first);
  }

  let keys = position.input_pos + row + 1u;  // causal: up to and including this row's position
  var h0 = Head(LOWEST, 0.0, Dims());
  var h1 = h0;
  var h2 = h0;
  var h3 = h0;
  for (var key = 0u; key < keys; key++) {
    let base = (key * p.kv_heads + kv_head) * VEC4S;
    let key_row = key_dims(base, first);
    let value_row = value_dims(base, first);
    h0 = attend(h0, score(q0, key_row), value_row);
    if (QUAD_HEADS > 1u) {
      h1 = attend(h1, score(q1, key_row), value_row);
    }
    if (QUAD_HEADS > 2u) {
      h2 = attend(h2, score(q2, key_row), value_row);
    }
    if (QUAD_HEADS > 3u) {
      h3 = attend(h3, score(q3, key_row), value_row);
    }
  }

  store_head(h0, q_base, first);
  if (QUAD_HEADS > 1u) {
    store_head(h1, q_base + VEC4S, first);
  }
  if (QUAD_HEADS > 2u) {
    store_head(h2, q_base + 2u * VEC4S, first);
  }
  if (QUAD_HEADS > 3u) {
    store_head(h3, q_base + 3u * VEC4S, first);
  }
}

// With CACHE_F16: this call's keys and values (rows [0, seq_len) of k and v, f32) into the
// caches' rows from input_pos, as float16, a thread per 4 dims, before `main` reads them.
// Grid: (x, y) flatten ceil(seq_len * kv_heads * HEAD_DIM / 4 / 64) workgroups.
@compute @workgroup_size(64)
fn store_new_rows(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let index = gid.x + gid.y * groups.x * 64u;  // vec4 of the new rows
  if (index >= p.seq_len * p.kv_heads * VEC4S) {
    return;
  }
  let dst = position.input_pos * p.kv_heads * VEC4S + index;  // vec4 of the caches
  let word = 2u * (dst % 2u);
  let key = k[index];
  let value = v[index];
  k_cache[dst / 2u][word] = pack2x16float(key.xy);
  k_cache[dst / 2u][word + 1u] = pack2x16float(key.zw);
  v_cache[dst / 2u][word] = pack2x16float(value.xy);
  v_cache[dst / 2u][word + 1u] = pack2x16float(value.zw);
}
