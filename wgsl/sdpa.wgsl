// Causal scaled dot-product attention over a KV cache, grouped-query, f32: the first of
// two passes (the second, sdpa_combine.wgsl, merges split results).
//
// Layouts (contiguous): q and out [S, Hq, D]; k and v [S, Hkv, D] (this call's new keys
// and values); k_cache and v_cache [C, Hkv, D], read as vec4s (their buffers hold whole
// vec4s): one load where D is a multiple of 4, up to 1.7x faster on an H200 than four
// scalar loads. Query row s sits at absolute position input_pos + s and attends keys
// [0, input_pos + s]; query head h reads kv head h / (Hq / Hkv). Keys below
// `cached_len` come from the caches, later ones from k/v.
//
// With UPDATE_CACHE the same dispatch also stores k/v at cache rows
// [input_pos, input_pos + S) (sdpa_with_kv_cache), with cached_len = input_pos: the
// attention never reads the rows being written, so one dispatch does both without a
// race. Without it (custom_sdpa after update_cache ops) cached_len covers every key.
//
// Two entry points. `main`, grid (Hq, S, splits): a workgroup takes one query head and
// row and the keys [split * chunk, (split + 1) * chunk) of that row (split-KV, so that a
// single decode row still fills the GPU). Its keys' scores fit in workgroup memory, so
// the softmax needs no rescaling: scores, their max, exp(score - max) and its sum, then
// the weighted sum of values. With one split that is the output; with several, (max,
// sum, weighted values) go to `partials` for the combine pass. `whole_row`, grid (Hq, S):
// a larger workgroup takes one query head and row and all its keys (up to MAX_CHUNK), so
// that a decode step's attention is one dispatch with no combine pass (attention.py picks
// it where that is faster: rows of up to WHOLE_ROW_MAX_KEYS keys). A prefill's many rows
// run sdpa_tiled.wgsl's `tiled` instead where it can, appended to this module.
//
// With ROPE, q and k arrive before their rotary embedding, which is applied here as they
// are read (interleaved pairs, Meta / llama2.c layout): query row s and new key
// input_pos + s at row rope_first + s of `rope_table` (cos, sin pairs [rows, HEAD_DIM / 2]),
// and the rotated keys go to the cache. HEAD_DIM is then a multiple of 4 (attention.py).
//
// The caches are bound as words: f32 values, or with CACHE_F16 (an f16 program's caches,
// for HEAD_DIM a multiple of 4: attention.py) float16 values packed two per word, which
// halves their bytes. Every key and value is then attended as the cache holds it: this
// call's new ones rounded to float16 too.
override UPDATE_CACHE: bool = true;
override ROPE: bool = false;
override CACHE_F16: bool = false;
override HEAD_DIM: u32 = 64u;  // at most 256

struct Params {
  seq_len: u32,
  q_heads: u32,
  kv_heads: u32,
  chunk: u32,   // keys per split, at most MAX_CHUNK
  splits: u32,  // the grid's; splits past a row's keys return at once
  scale: f32,
}

// The position, read here rather than written into Params: a decode step changes no
// parameter and no grid of this op, so the host need not touch it (attention.py).
struct Position {
  input_pos: u32,
}

// The RoPE table row of query row 0 (the rotary op's own position SymInt): read like the
// position, so that a decode step changes nothing here.
struct FirstRow {
  row: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
// Per (row, head, split): max score, sum of exp(score - max), then HEAD_DIM weighted sums.
@group(0) @binding(1) var<storage, read_write> partials: array<f32>;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> k: array<f32>;
@group(0) @binding(4) var<storage, read> v: array<f32>;
@group(0) @binding(5) var<storage, read_write> k_cache: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read_write> v_cache: array<vec4<u32>>;
@group(0) @binding(7) var<uniform> p: Params;
@group(0) @binding(8) var<uniform> position: Position;
// Without ROPE any buffers stand in for these: they are never read.
@group(0) @binding(9) var<storage, read> rope_table: array<vec2<f32>>;
@group(0) @binding(10) var<uniform> rope_first: FirstRow;

const WORKGROUP_SIZE: u32 = 64u;  // main's
const ROW_THREADS: u32 = 256u;  // whole_row's
const MAX_CHUNK: u32 = 1024u;
const MAX_HEAD_DIM: u32 = 256u;
// Derived from HEAD_DIM (the host sets neither): each thread sums the values of 4
// consecutive dims (one of DIM_GROUPS) over every SUBSETS-th key (ROW_SUBSETS-th in
// whole_row).
override DIM_GROUPS: u32 = (HEAD_DIM + 3u) / 4u;
override SUBSETS: u32 = WORKGROUP_SIZE / DIM_GROUPS;
override ROW_SUBSETS: u32 = ROW_THREADS / DIM_GROUPS;
// The most negative finite f32: the max of no scores, which exp() maps to 0.
const LOWEST: f32 = -0x1.fffffep+127f;  // -FLT_MAX, exactly (a rounded decimal can exceed it)

var<workgroup> scaled_q: array<vec4<f32>, MAX_HEAD_DIM / 4u>;  // q * scale, zero past HEAD_DIM
var<workgroup> weights: array<f32, MAX_CHUNK>;  // scores, then exp(score - max)
var<workgroup> reduction: array<f32, ROW_THREADS>;
// [subsets][DIM_GROUPS * 4]: a thread's weighted value sums of 4 dims over its subset of keys
var<workgroup> subset_sums: array<vec4<f32>, ROW_THREADS>;

// Keys below it are in the caches; with UPDATE_CACHE this call's rows are still in k / v.
fn cached_len() -> u32 {
  if (UPDATE_CACHE) {
    return position.input_pos;
  }
  return position.input_pos + p.seq_len;
}

// Offset of element 0 of key (or value) `key` for kv head `kv_head`, in the caches for
// keys below cached_len, else in k / v.
fn row_offset(key: u32, kv_head: u32) -> u32 {
  let cached = cached_len();
  if (key < cached) {
    return (key * p.kv_heads + kv_head) * HEAD_DIM;
  }
  return ((key - cached) * p.kv_heads + kv_head) * HEAD_DIM;
}

// The loops below read 16 or 4 elements per step as straight-line code, which the GPU
// issues together: memory latency, not bandwidth, bounds a workgroup's time here.

// Elements [i, i + 4) of a cache: one load where rows are whole vec4s (then i is always a
// multiple of 4), else two, shifted. Past a row's end they belong to the next row or are
// whatever robust access returns at the buffer's end: they only reach accumulator lanes
// that are never written out.
fn shifted(a: vec4<f32>, b: vec4<f32>, shift: u32) -> vec4<f32> {
  switch (shift) {
    case 0u: { return a; }
    case 1u: { return vec4<f32>(a.yzw, b.x); }
    case 2u: { return vec4<f32>(a.zw, b.xy); }
    default: { return vec4<f32>(a.w, b.xyz); }
  }
}

// Four float16 values (two words) as f32.
fn halves4(words: vec2<u32>) -> vec4<f32> {
  return vec4<f32>(unpack2x16float(words.x), unpack2x16float(words.y));
}

// With CACHE_F16 (i a multiple of 4), half of the vec4 of words holding elements
// [i - i % 8, i - i % 8 + 8).
fn cached_halves4(words: vec4<u32>, i: u32) -> vec4<f32> {
  return halves4(select(words.xy, words.zw, (i & 4u) != 0u));
}

fn cached_key4(i: u32) -> vec4<f32> {
  if (CACHE_F16) {
    return cached_halves4(k_cache[i / 8u], i);
  }
  if (HEAD_DIM % 4u == 0u) {
    return bitcast<vec4<f32>>(k_cache[i / 4u]);
  }
  return shifted(bitcast<vec4<f32>>(k_cache[i / 4u]), bitcast<vec4<f32>>(k_cache[i / 4u + 1u]), i % 4u);
}

fn cached_value4(i: u32) -> vec4<f32> {
  if (CACHE_F16) {
    return cached_halves4(v_cache[i / 8u], i);
  }
  if (HEAD_DIM % 4u == 0u) {
    return bitcast<vec4<f32>>(v_cache[i / 4u]);
  }
  return shifted(bitcast<vec4<f32>>(v_cache[i / 4u]), bitcast<vec4<f32>>(v_cache[i / 4u + 1u]), i % 4u);
}

// A new key's or value's dims as the cache holds them: rounded to float16 with CACHE_F16.
fn as_cached(x: vec4<f32>) -> vec4<f32> {
  if (CACHE_F16) {
    return halves4(vec2<u32>(pack2x16float(x.xy), pack2x16float(x.zw)));
  }
  return x;
}

fn new_key4(i: u32) -> vec4<f32> {
  return vec4<f32>(k[i], k[i + 1u], k[i + 2u], k[i + 3u]);
}

// Dims [4g, 4g + 4) of a q or k row (two rotated pairs) at table row `t`; unchanged
// without ROPE.
fn rotated(x: vec4<f32>, t: u32, g: u32) -> vec4<f32> {
  if (!ROPE) {
    return x;
  }
  let first = t * (HEAD_DIM / 2u) + 2u * g;
  let a = rope_table[first];
  let b = rope_table[first + 1u];
  return vec4<f32>(x.x * a.x - x.y * a.y, x.x * a.y + x.y * a.x, x.z * b.x - x.w * b.y, x.z * b.y + x.w * b.x);
}

// The table row of new key `key` (one of this call's): its offset from input_pos, from
// rope_first.
fn new_key_row(key: u32) -> u32 {
  return rope_first.row + key - position.input_pos;
}

fn score(key: u32, kv_head: u32) -> f32 {
  let from_cache = key < cached_len();
  let base = row_offset(key, kv_head);
  let t = new_key_row(key);  // read only for new keys with ROPE
  var sum = vec4<f32>();
  var g = 0u;  // groups of 4 dims
  for (; g + 4u <= HEAD_DIM / 4u; g += 4u) {
    let d = base + 4u * g;
    var a: vec4<f32>;
    var b: vec4<f32>;
    var c: vec4<f32>;
    var e: vec4<f32>;
    if (from_cache) {
      a = cached_key4(d);
      b = cached_key4(d + 4u);
      c = cached_key4(d + 8u);
      e = cached_key4(d + 12u);
    } else {
      a = as_cached(rotated(new_key4(d), t, g));
      b = as_cached(rotated(new_key4(d + 4u), t, g + 1u));
      c = as_cached(rotated(new_key4(d + 8u), t, g + 2u));
      e = as_cached(rotated(new_key4(d + 12u), t, g + 3u));
    }
    sum += a * scaled_q[g] + b * scaled_q[g + 1u] + c * scaled_q[g + 2u] + e * scaled_q[g + 3u];
  }
  for (; g < HEAD_DIM / 4u; g++) {
    if (from_cache) {
      sum += cached_key4(base + 4u * g) * scaled_q[g];
    } else {
      sum += as_cached(rotated(new_key4(base + 4u * g), t, g)) * scaled_q[g];
    }
  }
  // The last dims of rows that are no whole vec4s (f32 caches only).
  for (var d = HEAD_DIM & ~3u; d < HEAD_DIM; d++) {
    if (from_cache) {
      sum.x += bitcast<f32>(k_cache[(base + d) / 4u][(base + d) % 4u]) * scaled_q[d / 4u][d % 4u];
    } else {
      sum.x += k[base + d] * scaled_q[d / 4u][d % 4u];
    }
  }
  return sum.x + sum.y + sum.z + sum.w;
}

// Elements [i, i + 4) of a value row (see cached_key4 past the row's end).
fn value4(from_cache: bool, i: u32) -> vec4<f32> {
  if (from_cache) {
    return cached_value4(i);
  }
  return as_cached(vec4<f32>(v[i], v[i + 1u], v[i + 2u], v[i + 3u]));
}

// Sum of weights[i] * value row (first + i) over dims [dim, dim + 4), for i from `start`
// in steps of `stride` up to `end`, all of whose keys are cached (or all new).
fn weighted_values(from_cache: bool, start: u32, end: u32, stride: u32, first: u32, kv_head: u32, dim: u32) -> vec4<f32> {
  var acc = vec4<f32>();
  var i = start;
  for (; i + 3u * stride < end; i += 4u * stride) {
    let v0 = value4(from_cache, row_offset(first + i, kv_head) + dim);
    let v1 = value4(from_cache, row_offset(first + i + stride, kv_head) + dim);
    let v2 = value4(from_cache, row_offset(first + i + 2u * stride, kv_head) + dim);
    let v3 = value4(from_cache, row_offset(first + i + 3u * stride, kv_head) + dim);
    acc += weights[i] * v0 + weights[i + stride] * v1 + weights[i + 2u * stride] * v2 + weights[i + 3u * stride] * v3;
  }
  for (; i < end; i += stride) {
    acc += weights[i] * value4(from_cache, row_offset(first + i, kv_head) + dim);
  }
  return acc;
}

// Sum of weights[i] * value row (first + i) over dims [dim, dim + 4) for the keys
// i = subset, subset + subsets, ... below `count`: the cached ones, then the new.
fn chunk_values(first: u32, count: u32, subset: u32, subsets: u32, kv_head: u32, dim: u32) -> vec4<f32> {
  let cached = clamp(cached_len(), first, first + count) - first;
  let first_new = subset + (max(cached, subset) - subset + subsets - 1u) / subsets * subsets;
  return weighted_values(true, subset, cached, subsets, first, kv_head, dim)
    + weighted_values(false, first_new, count, subsets, first, kv_head, dim);
}

// Called by every one of the workgroup's `threads` threads (it holds barriers).
fn workgroup_max(thread: u32, threads: u32, value: f32) -> f32 {
  reduction[thread] = value;
  workgroupBarrier();
  for (var stride = threads / 2u; stride > 0u; stride /= 2u) {
    if (thread < stride) {
      reduction[thread] = max(reduction[thread], reduction[thread + stride]);
    }
    workgroupBarrier();
  }
  let result = reduction[0];
  workgroupBarrier();  // reduction[] is reused next
  return result;
}

fn workgroup_sum(thread: u32, threads: u32, value: f32) -> f32 {
  reduction[thread] = value;
  workgroupBarrier();
  for (var stride = threads / 2u; stride > 0u; stride /= 2u) {
    if (thread < stride) {
      reduction[thread] += reduction[thread + stride];
    }
    workgroupBarrier();
  }
  let result = reduction[0];
  workgroupBarrier();
  return result;
}

// weights[i] <- exp(score of key first + i - their max) for i < count, by the workgroup's
// `threads` threads (it holds barriers, which also publish weights[]); returns (that max,
// the sum of the weights).
fn softmax_weights(thread: u32, threads: u32, first: u32, count: u32, kv_head: u32) -> vec2<f32> {
  var thread_max = LOWEST;
  for (var i = thread; i < count; i += threads) {
    let s = score(first + i, kv_head);
    weights[i] = s;
    thread_max = max(thread_max, s);
  }
  let max_score = workgroup_max(thread, threads, thread_max);
  var thread_sum = 0.0;
  for (var i = thread; i < count; i += threads) {
    let w = exp(weights[i] - max_score);
    weights[i] = w;
    thread_sum += w;
  }
  return vec2<f32>(max_score, workgroup_sum(thread, threads, thread_sum));
}

// scaled_q <- this row and head's q (rotated with ROPE) times the scale. By the threads
// below DIM_GROUPS; a barrier must follow before scaled_q is read.
fn load_scaled_q(thread: u32, q_base: u32, row: u32) {
  if (thread < DIM_GROUPS) {
    var q4 = vec4<f32>();
    for (var j = 0u; j < 4u; j++) {
      if (4u * thread + j < HEAD_DIM) {
        q4[j] = q[q_base + 4u * thread + j];
      }
    }
    scaled_q[thread] = rotated(q4, rope_first.row + row, thread) * p.scale;
  }
}

// Elements [i, i + 4) of both caches (i a multiple of 4) <- key and value (as_cached's:
// float16 keeps them exactly).
fn store_cached4(i: u32, key: vec4<f32>, value: vec4<f32>) {
  if (CACHE_F16) {
    let word = 2u * ((i / 4u) % 2u);  // of the vec4 of words holding elements i - i % 8 ..
    k_cache[i / 8u][word] = pack2x16float(key.xy);
    k_cache[i / 8u][word + 1u] = pack2x16float(key.zw);
    v_cache[i / 8u][word] = pack2x16float(value.xy);
    v_cache[i / 8u][word + 1u] = pack2x16float(value.zw);
  } else {
    k_cache[i / 4u] = bitcast<vec4<u32>>(key);
    v_cache[i / 4u] = bitcast<vec4<u32>>(value);
  }
}

// With UPDATE_CACHE, this call's key (rotated with ROPE) and value of `row` and `kv_head`
// into the caches, by one workgroup of `threads` threads per kv head.
fn store_new_row(thread: u32, threads: u32, row: u32, kv_head: u32) {
  let src = (row * p.kv_heads + kv_head) * HEAD_DIM;
  let dst = ((position.input_pos + row) * p.kv_heads + kv_head) * HEAD_DIM;
  if (HEAD_DIM % 4u == 0u) {  // always with ROPE or CACHE_F16
    for (var g = thread; g < HEAD_DIM / 4u; g += threads) {
      let key = as_cached(rotated(new_key4(src + 4u * g), rope_first.row + row, g));
      store_cached4(dst + 4u * g, key, value4(false, src + 4u * g));
    }
    return;
  }
  for (var d = thread; d < HEAD_DIM; d += threads) {
    k_cache[(dst + d) / 4u][(dst + d) % 4u] = bitcast<u32>(k[src + d]);
    v_cache[(dst + d) / 4u][(dst + d) % 4u] = bitcast<u32>(v[src + d]);
  }
}

// out[q_base ..] <- the sums of the subsets' weighted values (subset_sums, after a
// barrier), divided by `denominator`; or, when splitting, into `partials` at `slot`.
fn store_output(thread: u32, threads: u32, subsets: u32, q_base: u32, denominator: f32, slot: u32) {
  for (var d = thread; d < HEAD_DIM; d += threads) {
    var total = 0.0;
    for (var s = 0u; s < subsets; s++) {
      total += subset_sums[s * DIM_GROUPS + d / 4u][d % 4u];
    }
    if (p.splits == 1u) {
      out[q_base + d] = total / denominator;
    } else {
      partials[slot + 2u + d] = total;
    }
  }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) thread: u32) {
  let head = group.x;
  let row = group.y;
  let split = group.z;
  let group_size = p.q_heads / p.kv_heads;
  let kv_head = head / group_size;
  let keys = position.input_pos + row + 1u;  // causal: up to and including this row's position
  let first = split * p.chunk;
  if (first >= keys) {
    return;  // a split past this row's keys (rows differ in length): nothing to do
  }
  let count = min(p.chunk, keys - first);
  let q_base = (row * p.q_heads + head) * HEAD_DIM;

  load_scaled_q(thread, q_base, row);
  if (UPDATE_CACHE && split == 0u && head % group_size == 0u) {
    store_new_row(thread, WORKGROUP_SIZE, row, kv_head);
  }
  workgroupBarrier();

  let softmax = softmax_weights(thread, WORKGROUP_SIZE, first, count, kv_head);
  let max_score = softmax.x;
  let weight_sum = softmax.y;

  let dim_group = thread % DIM_GROUPS;
  let subset = thread / DIM_GROUPS;
  if (subset < SUBSETS) {
    subset_sums[subset * DIM_GROUPS + dim_group] = chunk_values(first, count, subset, SUBSETS, kv_head, 4u * dim_group);
  }
  workgroupBarrier();

  let slot = ((row * p.q_heads + head) * p.splits + split) * (HEAD_DIM + 2u);
  if (p.splits > 1u && thread == 0u) {
    partials[slot] = max_score;
    partials[slot + 1u] = weight_sum;
  }
  store_output(thread, WORKGROUP_SIZE, SUBSETS, q_base, weight_sum, slot);
}

// All of a row's keys (at most MAX_CHUNK: attention.py's WHOLE_ROW_MAX_KEYS) by one
// workgroup of ROW_THREADS: main's work for one split, with 4x the threads. p.splits is 1.
@compute @workgroup_size(ROW_THREADS)
fn whole_row(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) thread: u32) {
  let head = group.x;
  let row = group.y;
  let group_size = p.q_heads / p.kv_heads;
  let kv_head = head / group_size;
  let keys = position.input_pos + row + 1u;
  let q_base = (row * p.q_heads + head) * HEAD_DIM;

  load_scaled_q(thread, q_base, row);
  if (UPDATE_CACHE && head % group_size == 0u) {
    store_new_row(thread, ROW_THREADS, row, kv_head);
  }
  workgroupBarrier();

  let weight_sum = softmax_weights(thread, ROW_THREADS, 0u, keys, kv_head).y;

  let dim_group = thread % DIM_GROUPS;
  let subset = thread / DIM_GROUPS;
  if (subset < ROW_SUBSETS) {
    subset_sums[subset * DIM_GROUPS + dim_group] = chunk_values(0u, keys, subset, ROW_SUBSETS, kv_head, 4u * dim_group);
  }
  workgroupBarrier();
  store_output(thread, ROW_THREADS, ROW_SUBSETS, q_base, weight_sum, 0u);
}
