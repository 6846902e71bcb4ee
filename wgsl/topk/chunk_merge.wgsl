// Top-k of one row of logits for GPUs, in two passes: each workgroup picks the top k of its
// chunk (chunk_top_k), then one workgroup picks the top k of all chunks' candidates
// (merge_top_k). Every round picks the best (value, index) pair ordered strictly after the
// previous pick, so nothing is written back or masked.
#include "topk/order.wgsl"

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> candidates: array<vec2<u32>>;  // (bits of value, index)
@group(0) @binding(3) var<storage, read_write> result: array<vec2<u32>>;

const THREADS: u32 = 256u;

var<workgroup> best_value: array<f32, THREADS>;
var<workgroup> best_index: array<u32, THREADS>;

// The best of every thread's (bv, bi) as (bits of value, index), the same for all threads.
fn workgroup_best(thread: u32, bv: f32, bi: u32) -> vec2<u32> {
  best_value[thread] = bv;
  best_index[thread] = bi;
  for (var stride = THREADS / 2u; stride > 0u; stride /= 2u) {
    workgroupBarrier();
    if (thread < stride && better(best_value[thread + stride], best_index[thread + stride], best_value[thread], best_index[thread])) {
      best_value[thread] = best_value[thread + stride];
      best_index[thread] = best_index[thread + stride];
    }
  }
  workgroupBarrier();
  let best = vec2<u32>(bitcast<u32>(best_value[0]), best_index[0]);
  workgroupBarrier();  // all have read slot 0 before the next round writes it
  return best;
}

@compute @workgroup_size(THREADS)
fn chunk_top_k(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) thread: u32) {
  let start = group.x * p.chunk;
  let end = min(start + p.chunk, p.n);
  var previous_value = POS_INF;
  var previous_index = NO_INDEX;
  for (var round = 0u; round < p.k; round++) {
    var bv = NEG_INF;
    var bi = NO_INDEX;
    for (var i = start + thread; i < end; i += THREADS) {
      let v = logits[i];
      if (v == v && after(v, i, previous_value, previous_index) && better(v, i, bv, bi)) {
        bv = v;
        bi = i;
      }
    }
    let best = workgroup_best(thread, bv, bi);
    previous_value = bitcast<f32>(best.x);
    previous_index = best.y;
    if (thread == 0u) {
      candidates[group.x * p.k + round] = best;
    }
  }
}

@compute @workgroup_size(THREADS)
fn merge_top_k(@builtin(local_invocation_index) thread: u32) {
  let total = ((p.n + p.chunk - 1u) / p.chunk) * p.k;
  var previous_value = POS_INF;
  var previous_index = NO_INDEX;
  for (var round = 0u; round < p.k; round++) {
    var bv = NEG_INF;
    var bi = NO_INDEX;
    for (var c = thread; c < total; c += THREADS) {
      let pair = candidates[c];
      let v = bitcast<f32>(pair.x);
      let i = pair.y;
      if (i != NO_INDEX && after(v, i, previous_value, previous_index) && better(v, i, bv, bi)) {
        bv = v;
        bi = i;
      }
    }
    let best = workgroup_best(thread, bv, bi);
    previous_value = bitcast<f32>(best.x);
    previous_index = best.y;
    if (thread == 0u) {
      result[round] = best;
    }
  }
}
