// gemv_coop4, the GPUs' decode GEMV for large N (the gate/up linear, the LM head): a team
// of COOP_THREADS threads per COOP4_OUTPUTS outputs, COOP4_TEAMS teams per workgroup (see
// coop_common.wgsl). Each staged x value a thread reads serves 4 weight rows, and a
// workgroup covers COOP4_TEAMS * 4 consecutive outputs (their scales share cache lines);
// with few outputs it leaves the GPU underfilled, where gemv_coop is faster.
// Grid: (x, y) flatten the blocks of COOP4_TEAMS * COOP4_OUTPUTS outputs, z = m.
#include "linear/coop_common.wgsl"

const COOP4_TEAMS: u32 = 8u;
const COOP4_OUTPUTS: u32 = 4u;

var<workgroup> partial4: array<vec4<f32>, COOP_THREADS * COOP4_TEAMS>;

// dot_staged of 4 weight rows' words at one word of the stage.
fn dot_staged4(words: vec4<u32>, w: u32) -> vec4<f32> {
  return vec4<f32>(dot_staged(words.x, w), dot_staged(words.y, w), dot_staged(words.z, w), dot_staged(words.w, w));
}

@compute @workgroup_size(COOP_THREADS, COOP4_TEAMS)
fn gemv_coop4(
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(local_invocation_index) thread: u32,
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let n0 = ((wg.x + wg.y * groups.x) * COOP4_TEAMS + lid.y) * COOP4_OUTPUTS;
  let m = wg.z;
  let x_row = x_row_start(m);
  let row0 = weight_row(n0);
  let row1 = weight_row(n0 + 1u);
  let row2 = weight_row(n0 + 2u);
  let row3 = weight_row(n0 + 3u);
  var sum = vec4<f32>();
  var squares = 0.0;
  for (var first = 0u; first < p.k / 4u; first += STAGE_VECS) {
    workgroupBarrier();  // the last stage is read
    squares += stage_x(thread, COOP_THREADS * COOP4_TEAMS, x_row, first);
    workgroupBarrier();
    let first_word = first / 2u;
    let words = min(STAGE_VECS, p.k / 4u - first) / 2u;
    // Two words of each row per step, loaded together (as in gemv_coop).
    var w = lid.x;
    for (; w + COOP_THREADS < words; w += 2u * COOP_THREADS) {
      let k = first_word + w;
      let k_next = k + COOP_THREADS;
      let words_now = vec4<u32>(weights[row0 + k], weights[row1 + k], weights[row2 + k], weights[row3 + k]);
      let words_next = vec4<u32>(weights[row0 + k_next], weights[row1 + k_next], weights[row2 + k_next], weights[row3 + k_next]);
      sum += dot_staged4(words_now, w) * scales4(scale_index(k, n0));
      sum += dot_staged4(words_next, w + COOP_THREADS) * scales4(scale_index(k_next, n0));
      if (HAS_OFFSETS) {
        sum += offsets4(n0, word_group(k)) * x_word_sums[w] + offsets4(n0, word_group(k_next)) * x_word_sums[w + COOP_THREADS];
      }
    }
    if (w < words) {
      let k = first_word + w;
      let words_now = vec4<u32>(weights[row0 + k], weights[row1 + k], weights[row2 + k], weights[row3 + k]);
      sum += dot_staged4(words_now, w) * scales4(scale_index(k, n0));
      if (HAS_OFFSETS) {
        sum += offsets4(n0, word_group(k)) * x_word_sums[w];
      }
    }
  }
  partial4[thread] = sum;
  partial_squares[thread] = squares;
  for (var stride = COOP_THREADS / 2u; stride > 0u; stride /= 2u) {
    workgroupBarrier();
    if (lid.x < stride) {
      partial4[thread] += partial4[thread + stride];
    }
  }
  if (X_RMS_NORM) {
    sum_squares(thread, COOP_THREADS * COOP4_TEAMS);
  }
  if (lid.x == 0u) {
    var total = partial4[thread];
    if (X_RMS_NORM) {
      total *= inverse_rms(partial_squares[0]);
    }
    for (var j = 0u; j < COOP4_OUTPUTS; j++) {
      if (n0 + j < p.n) {
        store(m, n0 + j, total[j]);
      }
    }
  }
}
