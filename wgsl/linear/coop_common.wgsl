// What the GPUs' decode kernels (gemv_coop, gemv_coop4: teams of COOP_THREADS threads)
// share. The workgroup first stages (up to STAGE_VECS vec4s at a time) the x values its
// teams read: x as the linear sees it (silu(gate) * up, or x times the norm weight),
// computed once per workgroup rather than once per output, and, with X_RMS_NORM, the sum
// of squares of the norm's input; with HAS_OFFSETS, the sum of the 8 x values of each
// word. Then the team's threads read consecutive words of their weight rows (coalesced),
// each sums its share with every word's group scale applied (and with HAS_OFFSETS its
// group's offset times the word's x sum, read beside the scale), and the partial sums are
// added in workgroup memory.
#include "linear/common.wgsl"
#include "linear/q4_shifts.wgsl"

const COOP_THREADS: u32 = 32u;
const STAGE_VECS: u32 = 512u;  // 2,048 x values: 8 KiB of workgroup memory
const COOP_MAX_THREADS: u32 = 256u;  // threads of a workgroup of either kernel

var<workgroup> x_stage: array<vec4<f32>, STAGE_VECS>;
var<workgroup> partial_squares: array<f32, COOP_MAX_THREADS>;  // X_RMS_NORM
// HAS_OFFSETS: the sum of the 8 staged x values of each word.
var<workgroup> x_word_sums: array<f32, STAGE_VECS / 2u>;

// x values [4 first, 4 (first + STAGE_VECS)) of the row at `x_row` into x_stage, by the
// workgroup's `threads`; returns this thread's sum of squares of the norm's input over
// them (X_RMS_NORM). Barriers must surround it.
fn stage_x(thread: u32, threads: u32, x_row: u32, first: u32) -> f32 {
  if (HAS_OFFSETS) {
    return stage_x_words(thread, threads, x_row, first);
  }
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

// stage_x a word (two vec4s) a thread, with the word's x sum into x_word_sums.
fn stage_x_words(thread: u32, threads: u32, x_row: u32, first: u32) -> f32 {
  var squares = 0.0;
  let words = min(STAGE_VECS, p.k / 4u - first) / 2u;
  for (var w = thread; w < words; w += threads) {
    let a = x_vec(x_row, first + 2u * w);
    let b = x_vec(x_row, first + 2u * w + 1u);
    x_stage[2u * w] = a;
    x_stage[2u * w + 1u] = b;
    x_word_sums[w] = dot(a + b, vec4<f32>(1.0));
    if (X_RMS_NORM) {
      squares += x_squares(x_row, first + 2u * w) + x_squares(x_row, first + 2u * w + 1u);
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
  return word_group(k_word) * p.scale_stride + n;
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

// The group of word k_word of a row.
fn word_group(k_word: u32) -> u32 {
  return k_word * 8u / p.group_size;
}
