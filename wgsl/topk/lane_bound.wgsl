// A bound no top-k logit lies below, for CPU adapters: each chunk's largest logit
// (chunk_max_lanes), then the k-th largest of those (lane_threshold). At least k logits
// reach it, so none of the top k lies below it; chunk_top_k_lanes stops scanning a chunk
// at it, and most chunks hold none of the top k. With fewer chunks than k there is no
// such bound: NEG_INF.
#include "topk/order.wgsl"
#include "topk/lanes.wgsl"

// Grid: as chunk_top_k_lanes'.
@compute @workgroup_size(LANE_THREADS)
fn chunk_max_lanes(
  @builtin(local_invocation_index) thread: u32,
  @builtin(workgroup_id) group: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let chunk = lane_index(group, groups, thread);
  let start = chunk * p.chunk;
  if (start >= p.n) {
    return;
  }
  var largest = NEG_INF;
  for (var i = start; i < min(start + p.chunk, p.n); i++) {
    let v = logits[i];
    largest = select(largest, v, v > largest);  // NaN: never greater
  }
  chunk_maxima[chunk] = largest;
}

@compute @workgroup_size(1)
fn lane_threshold() {
  let chunks = (p.n + p.chunk - 1u) / p.chunk;
  var previous_value = NEG_INF;
  if (chunks >= p.k) {
    previous_value = POS_INF;
    var previous_index = NO_INDEX;
    for (var round = 0u; round < p.k; round++) {
      var bv = NEG_INF;
      var bi = NO_INDEX;
      for (var c = 0u; c < chunks; c++) {
        let v = chunk_maxima[c];
        let take = takes(v, c, previous_value, previous_index, bv, bi);
        bv = select(bv, v, take);
        bi = select(bi, c, take);
      }
      previous_value = bv;
      previous_index = bi;
    }
  }
  chunk_maxima[chunks] = previous_value;
}
