// A token drawn from the top k on the GPU, so that sampled decoding runs ahead of the host
// as greedy decoding does (the next step takes the token on the GPU, the host learns it
// later). The draw the host's sampler makes, with the uniform draw.u in [0, 1) the host
// drew for this step: weights exp((logit - largest) / temperature) over the k picks; kept,
// the shortest prefix whose share of their total reaches top_p; the pick, the first kept
// one whose running sum of weights exceeds u times the kept ones' total (the last kept one
// if rounding leaves none). Written to result[K_MAX]; (NEG_INF, none) if no pick is finite.
#include "topk/order.wgsl"

struct Draw {
  temperature: f32,
  top_p: f32,
  u: f32,
}

@group(0) @binding(3) var<storage, read_write> result: array<vec2<u32>>;
@group(0) @binding(8) var<uniform> draw: Draw;

override K_MAX: u32 = 64u;

fn draw_weight(i: u32, largest: f32) -> f32 {
  return exp((bitcast<f32>(result[i].x) - largest) / draw.temperature);
}

@compute @workgroup_size(1)
fn sample_pick() {
  var picks = 0u;  // finite ones: the merge marks missing picks with no index
  while (picks < p.k && result[picks].y != NO_INDEX) {
    picks++;
  }
  if (picks == 0u) {
    result[K_MAX] = vec2<u32>(bitcast<u32>(NEG_INF), NO_INDEX);
    return;
  }
  let largest = bitcast<f32>(result[0].x);
  var total = 0.0;
  for (var i = 0u; i < picks; i++) {
    total += draw_weight(i, largest);
  }
  var kept = 0u;
  var kept_total = 0.0;
  var share = 0.0;
  for (var i = 0u; i < picks; i++) {
    let weight = draw_weight(i, largest);
    kept++;
    kept_total += weight;
    share += weight / total;
    if (share >= draw.top_p) {
      break;
    }
  }
  let point = draw.u * kept_total;
  var chosen = kept - 1u;
  var running = 0.0;
  for (var i = 0u; i < kept; i++) {
    running += draw_weight(i, largest);
    if (running > point) {
      chosen = i;
      break;
    }
  }
  result[K_MAX] = result[chosen];
}
