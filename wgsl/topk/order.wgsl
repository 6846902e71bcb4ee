// What every top-k pass shares: its parameters, and the pick order (largest value first,
// ties by the lower index; NaN is never picked).

struct Params {
  n: u32,          // logits in the row
  k: u32,          // picks wanted (<= K_MAX)
  chunk: u32,      // logits per first-pass chunk
  drawn: u32,      // append_pick: 1 if sample_pick drew the token, 0: the top 1
  penalty: f32,
  bounded: u32,    // chunk_top_k_lanes: 1 if lane_threshold ran
}

@group(0) @binding(2) var<uniform> p: Params;

const NEG_INF: f32 = -3.0e38;  // below every finite f32 logit we can meet; WGSL has no inf literal
const POS_INF: f32 = 3.0e38;   // above them: the "previous pick" before the first
const NO_INDEX: u32 = 0xffffffffu;  // the index of a missing pick

// (v, i) comes after (pv, pi) in pick order: smaller value, or equal value and larger index.
fn after(v: f32, i: u32, pv: f32, pi: u32) -> bool {
  return v < pv || (v == pv && i > pi);
}

// (v, i) is a better pick than (bv, bi).
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
  return v > bv || (v == bv && i < bi);
}

// after(v, i, pv, pi) and better(v, i, bv, bi) without branches (`&` and `|` do not
// short-circuit), for the passes of CPU adapters, which run a branch under a lane mask anyway.
fn takes(v: f32, i: u32, pv: f32, pi: u32, bv: f32, bi: u32) -> bool {
  let after_previous = (v < pv) | ((v == pv) & (i > pi));
  let better_than_best = (v > bv) | ((v == bv) & (i < bi));
  return after_previous & better_than_best;
}
