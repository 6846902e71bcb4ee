// Top-k of one row of logits, largest first, ties broken by the lower index, NaN never
// chosen. Two passes: each workgroup picks the top k of its chunk (chunk_top_k), then one
// workgroup picks the top k of all chunks' candidates (merge_top_k). Every round picks
// the largest (value, index) pair ordered strictly after the previous pick, so nothing
// is written back or masked. apply_penalty rescales a few logits in place first
// (repetition penalty, as in CTRL / Hugging Face): those of the tokens in a window of the
// last tokens fed, which append_pick extends on the GPU. sample_pick may draw a token from
// the k picks (sampled decoding, see there).

struct Params {
  n: u32,          // logits in the row
  k: u32,          // picks wanted (<= K_MAX)
  chunk: u32,      // logits per first-pass workgroup
  drawn: u32,      // append_pick: 1 if sample_pick drew the token, 0: the top 1
  penalty: f32,
  bounded: u32,    // chunk_top_k_lanes: 1 if lane_threshold ran
}

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> candidates: array<vec2<u32>>;  // (bits of value, index)
@group(0) @binding(2) var<uniform> p: Params;
@group(0) @binding(3) var<storage, read_write> result: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read_write> penalized_logits: array<f32>;
// The tokens fed, a ring of RING ids, then the count ever written (the next slot is
// count % RING). The penalty's window: the last min(count, WINDOW) of them.
@group(0) @binding(5) var<storage, read_write> history: array<u32>;

override K_MAX: u32 = 64u;
override RING: u32 = 512u;  // topk.py's 2 * PENALIZED_MAX
override WINDOW: u32 = 256u;  // topk.py's PENALIZED_MAX
const THREADS: u32 = 256u;
const NEG_INF: f32 = -3.0e38;  // below every finite f32 logit we can meet; WGSL has no inf literal

var<workgroup> best_value: array<f32, THREADS>;
var<workgroup> best_index: array<u32, THREADS>;

// (v, i) comes after (pv, pi) in pick order: smaller value, or equal value and larger index.
fn after(v: f32, i: u32, pv: f32, pi: u32) -> bool {
  return v < pv || (v == pv && i > pi);
}

// (v, i) is a better pick than (bv, bi).
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
  return v > bv || (v == bv && i < bi);
}

// Reduce every thread's best pair to thread 0's slot.
fn reduce_best(thread: u32) {
  for (var stride = THREADS / 2u; stride > 0u; stride /= 2u) {
    workgroupBarrier();
    if (thread < stride && better(best_value[thread + stride], best_index[thread + stride], best_value[thread], best_index[thread])) {
      best_value[thread] = best_value[thread + stride];
      best_index[thread] = best_index[thread + stride];
    }
  }
  workgroupBarrier();
}

@compute @workgroup_size(256)
fn chunk_top_k(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) thread: u32) {
  let start = group.x * p.chunk;
  let end = min(start + p.chunk, p.n);
  var previous_value = 3.0e38;
  var previous_index = 0xffffffffu;
  for (var round = 0u; round < p.k; round++) {
    var bv = NEG_INF;
    var bi = 0xffffffffu;
    for (var i = start + thread; i < end; i += THREADS) {
      let v = logits[i];
      if (v == v && after(v, i, previous_value, previous_index) && better(v, i, bv, bi)) {
        bv = v;
        bi = i;
      }
    }
    best_value[thread] = bv;
    best_index[thread] = bi;
    reduce_best(thread);
    previous_value = best_value[0];
    previous_index = best_index[0];
    if (thread == 0u) {
      candidates[group.x * p.k + round] = vec2<u32>(bitcast<u32>(previous_value), previous_index);
    }
    workgroupBarrier();
  }
}

@compute @workgroup_size(256)
fn merge_top_k(@builtin(local_invocation_index) thread: u32) {
  let total = ((p.n + p.chunk - 1u) / p.chunk) * p.k;
  var previous_value = 3.0e38;
  var previous_index = 0xffffffffu;
  for (var round = 0u; round < p.k; round++) {
    var bv = NEG_INF;
    var bi = 0xffffffffu;
    for (var c = thread; c < total; c += THREADS) {
      let pair = candidates[c];
      let v = bitcast<f32>(pair.x);
      let i = pair.y;
      if (i != 0xffffffffu && after(v, i, previous_value, previous_index) && better(v, i, bv, bi)) {
        bv = v;
        bi = i;
      }
    }
    best_value[thread] = bv;
    best_index[thread] = bi;
    reduce_best(thread);
    previous_value = best_value[0];
    previous_index = best_index[0];
    if (thread == 0u) {
      result[round] = vec2<u32>(bitcast<u32>(previous_value), previous_index);
    }
    workgroupBarrier();
  }
}

// A thread per place in the window; each token once, at its last place there.
// Grid: WINDOW / 64 workgroups.
@compute @workgroup_size(64)
fn apply_penalty(@builtin(global_invocation_id) gid: vec3<u32>) {
  let count = history[RING];
  let length = min(count, WINDOW);
  if (gid.x >= length) {
    return;
  }
  let at = count - length + gid.x;
  let i = history[at % RING];
  for (var later = at + 1u; later < count; later++) {
    if (history[later % RING] == i) {
      return;
    }
  }
  if (i < p.n) {
    let v = penalized_logits[i];
    penalized_logits[i] = select(v * p.penalty, v / p.penalty, v > 0.0);
  }
}

// The run's token (its top 1, or the one sample_pick drew) appended to the window: the
// next step, which takes that token on the GPU, penalizes it too.
@compute @workgroup_size(1)
fn append_pick() {
  let count = history[RING];
  history[count % RING] = result[select(0u, K_MAX, p.drawn != 0u)].y;
  history[RING] = count + 1u;
}

// --- for CPU adapters (SwiftShader, lavapipe): a first pass with no barriers ------------
// There a workgroup's invocations run one SIMD batch after another and every barrier
// switches between all of them: chunk_top_k, a workgroup of 256 per 2,048 logits with 8
// barriers per pick, made the top 40 of 49,152 logits take SwiftShader 89 ms (the top 1:
// 4.3 ms). Here each invocation picks the top k of its own chunk of p.chunk logits, up to
// k scans of it (chunk_top_k_lanes), in the order above taken without branches (`&` and
// `|` do not short-circuit, and SwiftShader runs a branch under a lane mask anyway),
// stopping at the first pick below a threshold no top-k logit is below (see
// chunk_max_lanes: most chunks hold none of the top k, so most stop after one scan); then
// each invocation of merge_top_k_lanes merges `level.group` of the lists of k candidates
// into one, level after level until one is left. (Loops stay short: llvmpipe stops a loop
// after 65,535 iterations; a merge of 96 lists of 40 by one invocation, 153,600
// iterations, stopped at the 26th of 40 picks there. topk.py keeps k * p.chunk and
// k * k * level.group within 32,768.)
const LANE_THREADS: u32 = 4u;  // topk.py's LANE_THREADS

// Whether (v, i) is a better pick than (bv, bi) that still comes after (pv, pi).
fn takes(v: f32, i: u32, pv: f32, pi: u32, bv: f32, bi: u32) -> bool {
  let after_previous = (v < pv) | ((v == pv) & (i > pi));
  let better_than_best = (v > bv) | ((v == bv) & (i < bi));
  return after_previous & better_than_best;
}

// Each chunk's largest logit, then (lane_threshold) the k-th largest of those: at least k
// logits reach it, so none of the top k lies below it. With fewer chunks than k there is
// no such bound: NEG_INF. chunk_top_k_lanes reads it at chunk_maxima[chunks] if
// p.bounded (topk.py runs these two passes for k >= LANE_BOUND_MIN_K only: for fewer
// picks the scans they save cost less than their dispatches).
@group(0) @binding(9) var<storage, read_write> chunk_maxima: array<f32>;

// The invocation's index in a grid whose (x, y) flatten the workgroups.
fn lane_index(group: vec3<u32>, groups: vec3<u32>, thread: u32) -> u32 {
  return (group.x + group.y * groups.x) * LANE_THREADS + thread;
}

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
    previous_value = 3.0e38;
    var previous_index = 0xffffffffu;
    for (var round = 0u; round < p.k; round++) {
      var bv = NEG_INF;
      var bi = 0xffffffffu;
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
  var previous_value = 3.0e38;
  var previous_index = 0xffffffffu;
  var done = false;  // past the chunk's logits at or above the threshold: no more picks
  for (var round = 0u; round < p.k; round++) {
    var bv = NEG_INF;
    var bi = 0xffffffffu;
    if (!done) {
      for (var i = start; i < end; i++) {
        let v = logits[i];
        let take = (v == v) & takes(v, i, previous_value, previous_index, bv, bi);
        bv = select(bv, v, take);
        bi = select(bi, i, take);
      }
      done = bv < threshold;
      bi = select(bi, 0xffffffffu, done);
    }
    candidates[chunk * p.k + round] = vec2<u32>(bitcast<u32>(bv), bi);
    previous_value = bv;
    previous_index = bi;
  }
}

struct Level {
  lists: u32,  // lists of p.k candidates in `candidates`
  group: u32,  // lists merged by each invocation
}

@group(0) @binding(6) var<uniform> level: Level;
@group(0) @binding(7) var<storage, read_write> merged: array<vec2<u32>>;

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
  var previous_value = 3.0e38;
  var previous_index = 0xffffffffu;
  for (var round = 0u; round < p.k; round++) {
    var bv = NEG_INF;
    var bi = 0xffffffffu;
    for (var c = first * p.k; c < end; c++) {
      let pair = candidates[c];
      let v = bitcast<f32>(pair.x);
      let take = (pair.y != 0xffffffffu) & takes(v, pair.y, previous_value, previous_index, bv, bi);
      bv = select(bv, v, take);
      bi = select(bi, pair.y, take);
    }
    merged[list * p.k + round] = vec2<u32>(bitcast<u32>(bv), bi);
    previous_value = bv;
    previous_index = bi;
  }
}

// --- sample_pick: a token drawn from the top k on the GPU -------------------------------
// So that sampled decoding runs ahead of the host as greedy decoding does (the next step
// takes the token on the GPU, the host learns it later), the draw llm/sampling.py's
// Sampler.pick makes, with the uniform draw.u in [0, 1) the host drew for this step:
// weights exp((logit - largest) / temperature) over the k picks; kept, the shortest
// prefix whose share of their total reaches top_p; the pick, the first kept one whose
// running sum of weights exceeds u times the kept ones' total (the last kept one if
// rounding leaves none). Written to result[K_MAX]; (NEG_INF, none) if no pick is finite.
struct Draw {
  temperature: f32,
  top_p: f32,
  u: f32,
}

@group(0) @binding(8) var<uniform> draw: Draw;

fn draw_weight(i: u32, largest: f32) -> f32 {
  return exp((bitcast<f32>(result[i].x) - largest) / draw.temperature);
}

@compute @workgroup_size(1)
fn sample_pick() {
  var picks = 0u;  // finite ones: merge_top_k marks missing picks with no index
  while (picks < p.k && result[picks].y != 0xffffffffu) {
    picks++;
  }
  if (picks == 0u) {
    result[K_MAX] = vec2<u32>(bitcast<u32>(NEG_INF), 0xffffffffu);
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
