// gemv_coop, the GPUs' decode GEMV: a team of COOP_THREADS threads per output, COOP_ROWS
// outputs per workgroup (see coop_common.wgsl).
// Grid: (x, y) flatten the blocks of COOP_ROWS outputs, z = m.
#include "linear/coop_common.wgsl"

const COOP_ROWS: u32 = 8u;

var<workgroup> partial: array<f32, COOP_THREADS * COOP_ROWS>;

@compute @workgroup_size(COOP_THREADS, COOP_ROWS)
fn gemv_coop(
  @builtin(local_invocation_id) lid: vec3<u32>,
  @builtin(local_invocation_index) thread: u32,
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let n = (wg.x + wg.y * groups.x) * COOP_ROWS + lid.y;
  let read_n = min(n, p.n - 1u);  // outputs past N read the last row, never written
  let m = wg.z;
  let x_row = x_row_start(m);
  let row = read_n * p.weight_row_words;
  var sum = 0.0;
  var squares = 0.0;
  for (var first = 0u; first < p.k / 4u; first += STAGE_VECS) {
    workgroupBarrier();  // the last stage is read
    squares += stage_x(thread, COOP_THREADS * COOP_ROWS, x_row, first);
    workgroupBarrier();
    let first_word = first / 2u;
    let words = min(STAGE_VECS, p.k / 4u - first) / 2u;
    // Four words of the row per step, loaded together: memory latency, not bandwidth,
    // bounds a team.
    let lanes = COOP_THREADS;
    var w = lid.x;
    for (; w + 3u * lanes < words; w += 4u * lanes) {
      let k = first_word + w;
      let four = vec4<u32>(weights[row + k], weights[row + k + lanes], weights[row + k + 2u * lanes], weights[row + k + 3u * lanes]);
      let four_scales = vec4<f32>(
        scales[scale_index(k, read_n)],
        scales[scale_index(k + lanes, read_n)],
        scales[scale_index(k + 2u * lanes, read_n)],
        scales[scale_index(k + 3u * lanes, read_n)],
      );
      let products = vec4<f32>(dot_staged(four.x, w), dot_staged(four.y, w + lanes), dot_staged(four.z, w + 2u * lanes), dot_staged(four.w, w + 3u * lanes));
      sum += dot(four_scales, products);
      if (HAS_OFFSETS) {
        let four_offsets = vec4<f32>(
          offset_at(read_n, word_group(k)),
          offset_at(read_n, word_group(k + lanes)),
          offset_at(read_n, word_group(k + 2u * lanes)),
          offset_at(read_n, word_group(k + 3u * lanes)),
        );
        sum += dot(four_offsets, vec4<f32>(x_word_sums[w], x_word_sums[w + lanes], x_word_sums[w + 2u * lanes], x_word_sums[w + 3u * lanes]));
      }
    }
    for (; w < words; w += lanes) {
      let k = first_word + w;
      sum += scales[scale_index(k, read_n)] * dot_staged(weights[row + k], w);
      if (HAS_OFFSETS) {
        sum += offset_at(read_n, word_group(k)) * x_word_sums[w];
      }
    }
  }
  partial[thread] = sum;
  partial_squares[thread] = squares;
  for (var stride = COOP_THREADS / 2u; stride > 0u; stride /= 2u) {
    workgroupBarrier();
    if (lid.x < stride) {
      partial[thread] += partial[thread + stride];
    }
  }
  if (X_RMS_NORM) {
    sum_squares(thread, COOP_THREADS * COOP_ROWS);
  }
  if (lid.x == 0u && n < p.n) {
    var total = partial[thread];
    if (X_RMS_NORM) {
      total *= inverse_rms(partial_squares[0]);
    }
    store(m, n, total);
  }
}
