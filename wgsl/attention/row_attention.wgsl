// One workgroup's attention of one query row and head over a range of its keys, shared
// by the split and whole_row kernels. The keys' scores fit in workgroup memory, so the
// softmax needs no rescaling: scores, their max, exp(score - max) and its sum, then the
// weighted sum of values, each thread summing 4 dims (one of DIM_GROUPS) over every
// subsets-th key.
#include "attention/rows.wgsl"
#include "common/reduce.wgsl"

// Threads a workgroup of either kernel: each a key's score at a time, then a dim group's
// values over every SUBSETS-th key.
const WORKGROUP_SIZE: u32 = 256u;
const MAX_CHUNK: u32 = 1024u;
const MAX_HEAD_DIM: u32 = 256u;

var<workgroup> scaled_q: array<vec4<f32>, MAX_HEAD_DIM / 4u>;  // q * scale, zero past HEAD_DIM
var<workgroup> weights: array<f32, MAX_CHUNK>;  // scores, then exp(score - max)
var<workgroup> reduction: array<f32, WORKGROUP_SIZE>;
// [SUBSETS][DIM_GROUPS * 4]: a thread's weighted value sums of 4 dims over its subset of keys
var<workgroup> subset_sums: array<vec4<f32>, WORKGROUP_SIZE>;

// The subsets of the keys: each of a dim group's threads sums every SUBSETS-th key's values
// (derived from HEAD_DIM, never set by the host).
override SUBSETS: u32 = WORKGROUP_SIZE / DIM_GROUPS;

// The loops below read 16 or 4 elements per step as straight-line code, which the GPU
// issues together: memory latency, not bandwidth, bounds a workgroup's time here.

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
// i = subset, subset + SUBSETS, ... below `count`: the cached ones, then the new.
fn chunk_values(first: u32, count: u32, subset: u32, kv_head: u32, dim: u32) -> vec4<f32> {
  let cached = clamp(cached_len(), first, first + count) - first;
  let first_new = subset + (max(cached, subset) - subset + SUBSETS - 1u) / SUBSETS * SUBSETS;
  return weighted_values(true, subset, cached, SUBSETS, first, kv_head, dim)
    + weighted_values(false, first_new, count, SUBSETS, first, kv_head, dim);
}

// weights[i] <- exp(score of key first + i - their max) for i < count, by the whole
// workgroup (it holds barriers, which also publish weights[]); returns (that max, the sum
// of the weights).
fn softmax_weights(thread: u32, first: u32, count: u32, kv_head: u32) -> vec2<f32> {
  var thread_max = LOWEST;
  for (var i = thread; i < count; i += WORKGROUP_SIZE) {
    let s = score(first + i, kv_head);
    weights[i] = s;
    thread_max = max(thread_max, s);
  }
  let max_score = workgroup_max(thread, WORKGROUP_SIZE, thread_max);
  var thread_sum = 0.0;
  for (var i = thread; i < count; i += WORKGROUP_SIZE) {
    let w = exp(weights[i] - max_score);
    weights[i] = w;
    thread_sum += w;
  }
  return vec2<f32>(max_score, workgroup_sum(thread, WORKGROUP_SIZE, thread_sum));
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

// out[q_base ..] <- the sums of the subsets' weighted values (subset_sums, after a
// barrier), divided by `denominator`; or, when splitting, into `partials` at `slot`.
fn store_output(thread: u32, q_base: u32, denominator: f32, slot: u32) {
  for (var d = thread; d < HEAD_DIM; d += WORKGROUP_SIZE) {
    var total = 0.0;
    for (var s = 0u; s < SUBSETS; s++) {
      total += subset_sums[s * DIM_GROUPS + d / 4u][d % 4u];
    }
    if (p.splits == 1u) {
      out[q_base + d] = total / denominator;
    } else {
      partials[slot + 2u + d] = total;
    }
  }
}

// The attention of query row `row` and head `head` over its keys [first, first + count),
// split `split` of p.splits (the workgroup's whole work in either kernel): the output,
// or with several splits (max, sum, weighted values) into `partials`.
fn attend(thread: u32, head: u32, row: u32, split: u32, first: u32, count: u32) {
  let group_size = p.q_heads / p.kv_heads;
  let kv_head = head / group_size;
  let q_base = (row * p.q_heads + head) * HEAD_DIM;

  load_scaled_q(thread, q_base, row);
  if (UPDATE_CACHE && split == 0u && head % group_size == 0u) {
    store_new_row(thread, WORKGROUP_SIZE, row, kv_head);
  }
  workgroupBarrier();

  let softmax = softmax_weights(thread, first, count, kv_head);

  let dim_group = thread % DIM_GROUPS;
  let subset = thread / DIM_GROUPS;
  if (subset < SUBSETS) {
    subset_sums[subset * DIM_GROUPS + dim_group] = chunk_values(first, count, subset, kv_head, 4u * dim_group);
  }
  workgroupBarrier();

  let slot = ((row * p.q_heads + head) * p.splits + split) * (HEAD_DIM + 2u);
  if (p.splits > 1u && thread == 0u) {
    partials[slot] = softmax.x;
    partials[slot + 1u] = softmax.y;
  }
  store_output(thread, q_base, softmax.y, slot);
}
