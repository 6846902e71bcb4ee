// What the GPUs' prefill GEMMs (gemm, gemm_wide: one workgroup of 16x16 threads per tile
// of out) share. Per step of input features, x and the dequantized weights (scale * q,
// the same f32 products PyTorch dequantizes to) are staged in workgroup memory, k-major
// so that each thread reads its rows / columns as vec4s.
// Split K (p.k_splits > 1): a workgroup's time goes mostly to waiting on each step's
// loads, so a grid of few tiles leaves a large GPU idle; each tile then gets p.k_splits
// workgroups (grid z), each summing an even share of the steps, which write their sums
// to out[(z * M + m) * N + n], out being the graph's scratch buffer, and gemm_reduce adds
// them up and stores the outputs.
// Grid: (ceil(N / tile), ceil(M / tile), p.k_splits).
#include "linear/common.wgsl"
#include "linear/q4_shifts.wgsl"

const TILE: u32 = 64u;  // gemm's output tile side
const TILE_K: u32 = 32u;  // gemm's input features per step
const WIDE_TILE: u32 = 128u;
const WIDE_TILE_K: u32 = 16u;

// Both kernels' stages, [k][m / 4] and [k][n / 4]: TILE_K x TILE or WIDE_TILE_K x WIDE_TILE.
var<workgroup> x_tile: array<vec4<f32>, TILE_K * TILE / 4u>;
var<workgroup> w_tile: array<vec4<f32>, TILE_K * TILE / 4u>;

// Stages x at rows m0 .. m0 + tile - 1, values k0 .. k0 + tile_k - 1 (zeros past M or
// K), by the workgroup's 256 threads.
fn stage_x_tile(lid: u32, m0: u32, k0: u32, tile: u32, tile_k: u32) {
  for (var e = lid; e < tile * tile_k / 4u; e += 256u) {
    let row = e / (tile_k / 4u);
    let kq = e % (tile_k / 4u);
    let kv = k0 / 4u + kq;
    var v = vec4<f32>(0.0);
    if (m0 + row < p.m && kv < p.k / 4u) {
      v = x_vec(x_row_start(m0 + row), kv);
    }
    for (var c = 0u; c < 4u; c++) {
      x_tile[(4u * kq + c) * (tile / 4u) + row / 4u][row % 4u] = v[c];
    }
  }
}

// Stages the dequantized weights of outputs n0 .. n0 + tile - 1, values k0 ..
// k0 + tile_k - 1 (zeros past N or K), a word at a time; with HAS_OFFSETS each plus its
// group's offset (scale * q + C[n, g], as an exact GGUF weight dequantizes).
fn stage_w_tile(lid: u32, n0: u32, k0: u32, tile: u32, tile_k: u32) {
  for (var e = lid; e < tile * tile_k / 8u; e += 256u) {
    let col = e / (tile_k / 8u);
    let wq = e % (tile_k / 8u);
    let w = k0 / 8u + wq;
    let n = n0 + col;
    var even = vec4<f32>(0.0);
    var odd = vec4<f32>(0.0);
    if (n < p.n && w * 8u < p.k) {
      let word = weights[n * p.weight_row_words + w];
      let scale = scales[(w * 8u) / p.group_size * p.scale_stride + n];
      even = scale * q4_even(word);
      odd = scale * q4_odd(word);
      if (HAS_OFFSETS) {
        let offset = offset_at(n, (w * 8u) / p.group_size);
        even += offset;
        odd += offset;
      }
    }
    for (var c = 0u; c < 4u; c++) {
      w_tile[(8u * wq + 2u * c) * (tile / 4u) + col / 4u][col % 4u] = even[c];
      w_tile[(8u * wq + 2u * c + 1u) * (tile / 4u) + col / 4u][col % 4u] = odd[c];
    }
  }
}

// Split z's share of K, [x, y): whole steps of tile_k (the last split's last step may
// pass K, as a lone workgroup's last step may; the stages hold zeros there).
fn split_range(z: u32, tile_k: u32) -> vec2<u32> {
  let split_steps = (p.k + tile_k * p.k_splits - 1u) / (tile_k * p.k_splits);
  let k_begin = z * split_steps * tile_k;
  return vec2<u32>(k_begin, min(p.k, k_begin + split_steps * tile_k));
}

// Outputs first_n .. first_n + 3 of row m: stored, or with split K split z's sums.
fn store_row(z: u32, m: u32, first_n: u32, values: vec4<f32>) {
  if (m >= p.m) {
    return;
  }
  for (var j = 0u; j < 4u; j++) {
    let n = first_n + j;
    if (n < p.n) {
      if (p.k_splits > 1u) {
        out[(z * p.m + m) * p.n + n] = values[j];
      } else {
        store(m, n, values[j]);
      }
    }
  }
}
