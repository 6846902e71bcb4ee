// Causal scaled dot-product attention over a KV cache, grouped-query, f32.
//
// Layouts (contiguous): q and out [S, Hq, D]; k and v [S, Hkv, D] (this call's new keys
// and values); k_cache and v_cache [C, Hkv, D]. Query row s sits at absolute position
// input_pos + s and attends keys [0, input_pos + s]; query head h reads kv head
// h / (Hq / Hkv). Keys below `cached_len` come from the caches, later ones from k/v.
//
// With UPDATE_CACHE the same dispatch also stores k/v at cache rows
// [input_pos, input_pos + S) (sdpa_with_kv_cache), with cached_len = input_pos: the
// attention never reads the rows being written, so one dispatch does both without a
// race. Without it (custom_sdpa after update_cache ops) cached_len covers every key.
//
// One workgroup per (query head, query row). Keys go in blocks of WORKGROUP_SIZE: each
// thread scores one key, then each thread accumulates its own head dims over the
// block's keys with an online softmax (running max m; sums rescaled when m grows).
override UPDATE_CACHE: bool = true;

struct Params {
  seq_len: u32,
  q_heads: u32,
  kv_heads: u32,
  head_dim: u32,
  input_pos: u32,
  cached_len: u32,
  scale: f32,
  _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(5) var<storage, read_write> v_cache: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;

const WORKGROUP_SIZE: u32 = 64u;
const DIMS_PER_THREAD: u32 = 4u;  // head_dim <= WORKGROUP_SIZE * DIMS_PER_THREAD = 256
const MAX_HEAD_DIM: u32 = 256u;
// The most negative finite f32: a running max that starts here rescales by exp() to 0.
const LOWEST: f32 = -3.40282347e38;

var<workgroup> scaled_q: array<f32, MAX_HEAD_DIM>;
var<workgroup> block_scores: array<f32, WORKGROUP_SIZE>;
var<workgroup> block_weights: array<f32, WORKGROUP_SIZE>;
var<workgroup> partial_sums: array<f32, WORKGROUP_SIZE>;

// Offset of element 0 of key/value `key` for kv head `kv_head`, and whether it lies in
// the caches (true) or in this call's k/v (false).
fn key_offset(key: u32, kv_head: u32) -> u32 {
  if (key < p.cached_len) {
    return (key * p.kv_heads + kv_head) * p.head_dim;
  }
  return ((key - p.cached_len) * p.kv_heads + kv_head) * p.head_dim;
}

fn key_element(key: u32, offset: u32) -> f32 {
  if (key < p.cached_len) {
    return k_cache[offset];
  }
  return k[offset];
}

fn value_element(key: u32, offset: u32) -> f32 {
  if (key < p.cached_len) {
    return v_cache[offset];
  }
  return v[offset];
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) thread: u32) {
  let head = group.x;
  let row = group.y;
  let head_dim = p.head_dim;
  let kv_head = head / (p.q_heads / p.kv_heads);
  let q_base = (row * p.q_heads + head) * head_dim;

  for (var d = thread; d < head_dim; d += WORKGROUP_SIZE) {
    scaled_q[d] = q[q_base + d] * p.scale;
  }
  if (UPDATE_CACHE && head % (p.q_heads / p.kv_heads) == 0u) {
    let src = (row * p.kv_heads + kv_head) * head_dim;
    let dst = ((p.input_pos + row) * p.kv_heads + kv_head) * head_dim;
    for (var d = thread; d < head_dim; d += WORKGROUP_SIZE) {
      k_cache[dst + d] = k[src + d];
      v_cache[dst + d] = v[src + d];
    }
  }
  workgroupBarrier();

  let keys = p.input_pos + row + 1u;  // causal: up to and including this row's position
  var running_max = LOWEST;           // the same in every thread of the workgroup
  var weight_sum = 0.0;               // this thread's keys' share of the softmax denominator
  var acc: array<f32, DIMS_PER_THREAD>;
  for (var block = 0u; block < keys; block += WORKGROUP_SIZE) {
    let key = block + thread;
    var score = LOWEST;
    if (key < keys) {
      let offset = key_offset(key, kv_head);
      score = 0.0;
      for (var d = 0u; d < head_dim; d++) {
        score += scaled_q[d] * key_element(key, offset + d);
      }
    }
    block_scores[thread] = score;
    workgroupBarrier();

    let block_keys = min(WORKGROUP_SIZE, keys - block);
    var block_max = block_scores[0];
    for (var i = 1u; i < block_keys; i++) {
      block_max = max(block_max, block_scores[i]);
    }
    let new_max = max(running_max, block_max);
    let rescale = exp(running_max - new_max);
    var weight = 0.0;
    if (key < keys) {
      weight = exp(score - new_max);
    }
    block_weights[thread] = weight;
    weight_sum = weight_sum * rescale + weight;
    running_max = new_max;
    workgroupBarrier();

    for (var c = 0u; c < DIMS_PER_THREAD; c++) {
      let d = thread + c * WORKGROUP_SIZE;
      if (d < head_dim) {
        var sum = acc[c] * rescale;
        for (var i = 0u; i < block_keys; i++) {
          let value_key = block + i;
          sum += block_weights[i] * value_element(value_key, key_offset(value_key, kv_head) + d);
        }
        acc[c] = sum;
      }
    }
    workgroupBarrier();  // the next block overwrites block_scores and block_weights
  }

  partial_sums[thread] = weight_sum;
  workgroupBarrier();
  for (var stride = WORKGROUP_SIZE / 2u; stride > 0u; stride /= 2u) {
    if (thread < stride) {
      partial_sums[thread] += partial_sums[thread + stride];
    }
    workgroupBarrier();
  }
  let inv_total = 1.0 / partial_sums[0];
  for (var c = 0u; c < DIMS_PER_THREAD; c++) {
    let d = thread + c * WORKGROUP_SIZE;
    if (d < head_dim) {
      out[q_base + d] = acc[c] * inv_total;
    }
  }
}
