// What the GPUs' decode kernels (gemv_coop, gemv_coop4: teams of COOP_THREADS threads)
// share. The workgroup first stages (up to STAGE_VECS vec4s at a time) the x values its
// teams read: x as the linear sees it (silu(gate) * up, or x times the norm weight),
// computed once per workgroup rather than once per output, and, with X_RMS_NORM, the sum
// of squares of the norm's input; with HAS_OFFSETS, the stage's group sums of x, which
// the teams' lanes then multiply by their outputs' offsets. Then the team's threads read
// consecutive words of their weight rows (coalesced), each sums its share with every
// word's group scale applied, and the partial sums are added in workgroup memory.
#include "linear/common.wgsl"
#include "linear/q4_shifts.wgsl"

const COOP_THREADS: u32 = 32u;
const STAGE_VECS: u32 = 512u;  // 2,048 x values: 8 KiB of workgroup memory
const COOP_MAX_THREADS: u32 = 256u;  // threads of the larger workgroup (gemv_coop's)

// The groups a stage meets at most (groups hold 8 values or more).
const STAGE_GROUPS: u32 = STAGE_VECS / 2u + 1u;

var<workgroup> x_stage: array<vec4<f32>, STAGE_VECS>;
var<workgroup> partial_squares: array<f32, COOP_MAX_THREADS>;  // X_RMS_NORM
// HAS_OFFSETS: the sums of the staged x values of each group the stage meets.
var<workgroup> x_group_sums: array<f32, STAGE_GROUPS>;

// x values [4 first, 4 (first + STAGE_VECS)) of the row at `x_row` into x_stage, by the
// workgroup's `threads`; returns this thread's sum of squares of the norm's input over
// them (X_RMS_NORM). Barriers must surround it.
fn stage_x(thread: u32, threads: u32, x_row: u32, first: u32) -> f32 {
  var squares = 0.0;
  let count = min(STAGE_VECS, p.k / 4u - first);
  for (var i = thread; i < count; i += threads) {
    x_stage[i] = x_vec(x_row, first + i);
    if (X_RMS_NORM) {
      squares += x_squares(x_row, first + i);
    }
  }
  return squares;
}

// The 8 x values at one word (xa, xb) times the word, unpacked by shifts (cheap on GPUs).
fn dot_q4(word: u32, xa: vec4<f32>, xb: vec4<f32>) -> f32 {
  return dot(q4_even(word), vec4<f32>(xa.x, xa.z, xb.x, xb.z)) + dot(q4_odd(word), vec4<f32>(xa.y, xa.w, xb.y, xb.w));
}

// The 8 staged x values at word w of the stage (xa, xb) times an unpacked word.
fn dot_staged(word: u32, w: u32) -> f32 {
  return dot_q4(word, x_stage[2u * w], x_stage[2u * w + 1u]);
}

// Where the scale of word k_word of output n is in `scales`.
fn scale_index(k_word: u32, n: u32) -> u32 {
  return (k_word * 8u / p.group_size) * p.scale_stride + n;
}

// X_RMS_NORM: partial_squares[0] <- the sum of the workgroup's `threads` partial squares
// (each staged x value was squared by one thread), after a barrier.
fn sum_squares(thread: u32, threads: u32) {
  for (var stride = threads / 2u; stride > 0u; stride /= 2u) {
    workgroupBarrier();
    if (thread < stride) {
      partial_squares[thread] += partial_squares[thread + stride];
    }
  }
  workgroupBarrier();
}

// HAS_OFFSETS: the groups the stage from vec4 `first` meets: (the first, how many).
fn stage_groups(first: u32) -> vec2<u32> {
  let end = 4u * min(first + STAGE_VECS, p.k / 4u);
  let g0 = 4u * first / p.group_size;
  return vec2<u32>(g0, (end - 1u) / p.group_size + 1u - g0);
}

// HAS_OFFSETS: x_group_sums <- the sums of the staged values of each group the stage meets
// (a group straddling two stages: its values in this one), by the workgroup's `threads`.
// Barriers must surround it.
fn sum_stage_groups(thread: u32, threads: u32, first: u32) {
  let groups = stage_groups(first);
  let group_vecs = p.group_size / 4u;
  let end = min(first + STAGE_VECS, p.k / 4u);
  for (var r = thread; r < groups.y; r += threads) {
    let g = groups.x + r;
    var total = 0.0;
    for (var i = max(g * group_vecs, first); i < min((g + 1u) * group_vecs, end); i++) {
      let v = x_stage[i - first];
      total += (v.x + v.y) + (v.z + v.w);
    }
    x_group_sums[r] = total;
  }
}

// HAS_OFFSETS: a team lane's share of the offsets of output n times the stage's group sums.
fn stage_offsets(lane: u32, n: u32, first: u32) -> f32 {
  let groups = stage_groups(first);
  var total = 0.0;
  for (var r = lane; r < groups.y; r += COOP_THREADS) {
    total += offset_at(n, groups.x + r) * x_group_sums[r];
  }
  return total;
}

// HAS_OFFSETS: stage_offsets of outputs n0 .. n0 + 3.
fn stage_offsets4(lane: u32, n0: u32, first: u32) -> vec4<f32> {
  let groups = stage_groups(first);
  var total = vec4<f32>();
  for (var r = lane; r < groups.y; r += COOP_THREADS) {
    total += offsets4(n0, groups.x + r) * x_group_sums[r];
  }
  return total;
}
