// gemv, for CPU adapters with subgroups (decode: one row of x): each thread computes
// GEMV_OUTPUTS consecutive outputs, so that each x value serves GEMV_OUTPUTS weights, and
// loads its weights a chunk of 4 words (32 values) at a time. A storage load there is a
// gather, lane by lane, while a quad broadcast is one SIMD shuffle: lane j of a quad loads
// the x values of the chunk's word j and hands them to the other three. Workgroups of
// GEMV_THREADS threads keep the small linears spread over the cores.
// A quad's threads take consecutive outputs: a quad whose first output is past N leaves
// whole; in the others every thread stays to the end (outputs past N read the last
// weight row, weight_row, and are never stored).
// X_RMS_NORM: each lane also sums the squares of the norm's input at the words it loads,
// and the quad adds them up: the four lanes load every word of the row once.
// OUT_SILU_MUL (p.silu_mul_out fixed in the pipeline, so that the other linears' pipelines
// run no untaken epilogue): a thread computes 8 outputs of silu(gate) * up, totals a and b
// the gate's rows of them, c and d the up's.
// Grid: (x, y) flatten the blocks of GEMV_THREADS threads, z = m.
#include "linear/cpu_common.wgsl"

override OUT_SILU_MUL: bool = false;
const GEMV_THREADS: u32 = 8u;
const GEMV_OUTPUTS: u32 = 16u;

// `weights` as chunks of 4 words: gemv's group sizes are multiples of 32 values, so a
// row is a whole number of chunks and a chunk never straddles two groups.
@group(0) @binding(2) var<storage, read> weight_chunks: array<vec4<u32>>;

// The 32 x values of a chunk as x_word gives them (lo_j, hi_j: word j's), and the sum
// of their offset_sums.
struct XChunk {
  lo0: vec4<f32>, hi0: vec4<f32>, lo1: vec4<f32>, hi1: vec4<f32>,
  lo2: vec4<f32>, hi2: vec4<f32>, lo3: vec4<f32>, hi3: vec4<f32>,
  offset_sum: f32,
}

// A chunk of a weight row times its x values, the + 8 of 28 nibbles included.
fn dot_chunk(words: vec4<u32>, xc: XChunk) -> f32 {
  let sum = add_q4_places(0.0, words.x, xc.lo0, xc.hi0);
  let sum2 = add_q4_places(sum, words.y, xc.lo1, xc.hi1);
  let sum3 = add_q4_places(sum2, words.z, xc.lo2, xc.hi2);
  return add_q4_places(sum3, words.w, xc.lo3, xc.hi3);
}

// dot_chunk of the chunk at `chunk` of 4 weight rows (starting at rows[i], in chunks).
fn dot_chunks4(rows: vec4<u32>, chunk: u32, xc: XChunk) -> vec4<f32> {
  return vec4<f32>(
    dot_chunk(weight_chunks[rows.x + chunk], xc),
    dot_chunk(weight_chunks[rows.y + chunk], xc),
    dot_chunk(weight_chunks[rows.z + chunk], xc),
    dot_chunk(weight_chunks[rows.w + chunk], xc),
  );
}

// Where the weight rows of outputs first .. first + 3 start, in chunks.
fn chunk_rows4(first: u32) -> vec4<u32> {
  return weight_rows4(first) / 4u;
}

@compute @workgroup_size(GEMV_THREADS)
fn gemv(
  @builtin(local_invocation_index) lid: u32,
  @builtin(workgroup_id) wg: vec3<u32>,
  @builtin(num_workgroups) groups: vec3<u32>,
) {
  let silu_mul = OUT_SILU_MUL;
  let outputs = select(GEMV_OUTPUTS, GEMV_OUTPUTS / 2u, silu_mul);
  let n0 = ((wg.x + wg.y * groups.x) * GEMV_THREADS + lid) * outputs;
  let lane = lid % 4u;  // in the quad
  if (quad_past_n(n0, lane, outputs)) {
    return;
  }
  let m = wg.z;
  let x_row = x_row_start(m);
  let firsts = block_rows(n0, silu_mul);
  let rows_a = chunk_rows4(firsts.x);
  let rows_b = chunk_rows4(firsts.y);
  let rows_c = chunk_rows4(firsts.z);
  let rows_d = chunk_rows4(firsts.w);
  let chunks_per_group = p.group_size / 32u;
  var total_a = vec4<f32>();
  var total_b = vec4<f32>();
  var total_c = vec4<f32>();
  var total_d = vec4<f32>();
  // One loop, a chunk per iteration, each scaled by its group's scales (no loop over a
  // group's chunks nested in it: see cpu_common.wgsl).
  var squares = 0.0;  // X_RMS_NORM: of the norm's input at this lane's words
  for (var chunk = 0u; chunk < p.k / 32u; chunk++) {
    // This lane's word of the chunk.
    let word = 4u * chunk + lane;
    let x = x_word(x_row, word);
    if (X_RMS_NORM) {
      squares += x_squares(x_row, 2u * word) + x_squares(x_row, 2u * word + 1u);
    }
    var offset_sum = x.offset_sum;
    offset_sum += quadSwapX(offset_sum);
    offset_sum += quadSwapY(offset_sum);
    let xc = XChunk(
      quadBroadcast(x.lo, 0u), quadBroadcast(x.hi, 0u), quadBroadcast(x.lo, 1u), quadBroadcast(x.hi, 1u),
      quadBroadcast(x.lo, 2u), quadBroadcast(x.hi, 2u), quadBroadcast(x.lo, 3u), quadBroadcast(x.hi, 3u),
      offset_sum,
    );
    let scale = (chunk / chunks_per_group) * p.scale_stride;
    let offset = 8.0 * offset_sum;
    total_a += (dot_chunks4(rows_a, chunk, xc) - offset) * scale_vec(scale + firsts.x);
    total_b += (dot_chunks4(rows_b, chunk, xc) - offset) * scale_vec(scale + firsts.y);
    total_c += (dot_chunks4(rows_c, chunk, xc) - offset) * scale_vec(scale + firsts.z);
    total_d += (dot_chunks4(rows_d, chunk, xc) - offset) * scale_vec(scale + firsts.w);
    if (HAS_OFFSETS) {
      // The chunk's sum of x: offset_sum's 28 values and the quad's 4 top ones.
      var top = x.hi.w;
      top += quadSwapX(top);
      top += quadSwapY(top);
      let x_sum = offset_sum + top * TOP_PLACE;
      let g = chunk / chunks_per_group;
      total_a += x_sum * offsets4(firsts.x, g);
      total_b += x_sum * offsets4(firsts.y, g);
      total_c += x_sum * offsets4(firsts.z, g);
      total_d += x_sum * offsets4(firsts.w, g);
    }
  }
  if (X_RMS_NORM) {
    // The quad's lanes loaded every word of the row once.
    squares += quadSwapX(squares);
    squares += quadSwapY(squares);
    let scale = inverse_rms(squares);
    total_a *= scale;
    total_b *= scale;
    total_c *= scale;
    total_d *= scale;
  }
  if (silu_mul) {
    store_silu_mul4(m, n0, silu_mul4(n0, total_a, total_c));
    store_silu_mul4(m, n0 + 4u, silu_mul4(n0 + 4u, total_b, total_d));
    return;
  }
  store_row16(m, n0, Outputs16(total_a, total_b, total_c, total_d));
}
