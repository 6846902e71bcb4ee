// Top-k of one row of logits for CPU adapters, with no barriers: each invocation picks the
// top k of its own chunk of p.chunk logits in up to k scans (chunk_top_k_lanes), stopping
// at the first pick below lane_threshold's bound; then each invocation of
// merge_top_k_lanes merges `level.group` of the lists of k candidates into one, level
// after level until one is left. The host keeps every invocation's loop short enough for
// llvmpipe, which stops a loop after 65,535 iterations.
#include "topk/order.wgsl"
#include "topk/lanes.wgsl"

struct Level {
  lists: u32,  // lists of p.k candidates in `candidates`
  group: u32,  // lists merged by each invocation
}

@group(0) @binding(6) var<uniform> level: Level;
@group(0) @binding(7) var<storage, read_write> merged: array<vec2<u32>>;

// Grid: (x, y) flatten ceil(chunks / LANE_THREADS) workgroups.
@compute @workgroup_size(LANE_THREADS)
fn chunk_top_k_lanes(
  @builtin(local_invocation_index) thread: u32,
  @builtin(workgroup_id) group: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let chunk = lane_index(group, groups, thread);
  let start = chunk * p.chunk;
  if (start >= p.n) {
    return;
  }
  let end = min(start + p.chunk, p.n);
  let threshold = select(NEG_INF, chunk_maxima[(p.n + p.chunk - 1u) / p.chunk], p.bounded != 0u);
  var previous_value = POS_INF;
  var previous_index = NO_INDEX;
  var done = false;  // past the chunk's logits at or above the threshold: no more picks
  for (var round = 0u; round < p.k; round++) {
    var bv = NEG_INF;
    var bi = NO_INDEX;
    if (!done) {
      for (var i = start; i < end; i++) {
        let v = logits[i];
        let take = (v == v) & takes(v, i, previous_value, previous_index, bv, bi);
        bv = select(bv, v, take);
        bi = select(bi, i, take);
      }
      done = bv < threshold;
      bi = select(bi, NO_INDEX, done);
    }
    candidates[chunk * p.k + round] = vec2<u32>(bitcast<u32>(bv), bi);
    previous_value = bv;
    previous_index = bi;
  }
}

// Grid: (x, y) flatten ceil(ceil(level.lists / level.group) / LANE_THREADS) workgroups.
@compute @workgroup_size(LANE_THREADS)
fn merge_top_k_lanes(
  @builtin(local_invocation_index) thread: u32,
  @builtin(workgroup_id) group: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let list = lane_index(group, groups, thread);
  let first = list * level.group;
  if (first >= level.lists) {
    return;
  }
  let end = min(first + level.group, level.lists) * p.k;
  var previous_value = POS_INF;
  var previous_index = NO_INDEX;
  for (var round = 0u; round < p.k; round++) {
    var bv = NEG_INF;
    var bi = NO_INDEX;
    for (var c = first * p.k; c < end; c++) {
      let pair = candidates[c];
      let v = bitcast<f32>(pair.x);
      let take = (pair.y != NO_INDEX) & takes(v, pair.y, previous_value, previous_index, bv, bi);
      bv = select(bv, v, take);
      bi = select(bi, pair.y, take);
    }
    merged[list * p.k + round] = vec2<u32>(bitcast<u32>(bv), bi);
    previous_value = bv;
    previous_index = bi;
  }
}
