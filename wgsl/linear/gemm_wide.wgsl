// gemm_wide, the GPUs' prefill GEMM where its tiles make enough workgroups: 128x128 tiles,
// a thread owning 8x8 outputs (rows 4 (ty + 16 i) .., columns 4 (tx + 16 j) .., i, j in
// 0..1), steps of WIDE_TILE_K input features; each staged value serves twice the products
// gemm's do (see gemm_common.wgsl).
#include "linear/gemm_common.wgsl"

// 8 rows of gemm_wide's outputs at 4 columns: a's rows times b (a0 and a1: the rows of
// the thread's two row blocks).
struct Rows8 {
  r0: vec4<f32>, r1: vec4<f32>, r2: vec4<f32>, r3: vec4<f32>,
  r4: vec4<f32>, r5: vec4<f32>, r6: vec4<f32>, r7: vec4<f32>,
}

fn add_products8(acc: Rows8, a0: vec4<f32>, a1: vec4<f32>, b: vec4<f32>) -> Rows8 {
  return Rows8(
    acc.r0 + a0.x * b, acc.r1 + a0.y * b, acc.r2 + a0.z * b, acc.r3 + a0.w * b,
    acc.r4 + a1.x * b, acc.r5 + a1.y * b, acc.r6 + a1.z * b, acc.r7 + a1.w * b,
  );
}

// Stores the 8 rows of a thread's outputs at columns first_n .. first_n + 3 (split z's).
fn store_rows8(z: u32, m0: u32, ty: u32, first_n: u32, acc: Rows8) {
  let m1 = m0 + 4u * (ty + 16u);
  store_row(z, m0 + 4u * ty, first_n, acc.r0);
  store_row(z, m0 + 4u * ty + 1u, first_n, acc.r1);
  store_row(z, m0 + 4u * ty + 2u, first_n, acc.r2);
  store_row(z, m0 + 4u * ty + 3u, first_n, acc.r3);
  store_row(z, m1, first_n, acc.r4);
  store_row(z, m1 + 1u, first_n, acc.r5);
  store_row(z, m1 + 2u, first_n, acc.r6);
  store_row(z, m1 + 3u, first_n, acc.r7);
}

@compute @workgroup_size(256)
fn gemm_wide(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let m0 = wg.y * WIDE_TILE;
  let n0 = wg.x * WIDE_TILE;
  let tx = lid % 16u;
  let ty = lid / 16u;
  var left = Rows8();  // columns n0 + 4 tx ..
  var right = Rows8();  // columns n0 + 4 (tx + 16) ..
  let k_range = split_range(wg.z, WIDE_TILE_K);
  for (var k0 = k_range.x; k0 < k_range.y; k0 += WIDE_TILE_K) {
    stage_x_tile(lid, m0, k0, WIDE_TILE, WIDE_TILE_K);
    stage_w_tile(lid, n0, k0, WIDE_TILE, WIDE_TILE_K);
    workgroupBarrier();
    for (var kk = 0u; kk < WIDE_TILE_K; kk++) {
      let row = kk * (WIDE_TILE / 4u);
      let a0 = x_tile[row + ty];
      let a1 = x_tile[row + ty + 16u];
      left = add_products8(left, a0, a1, w_tile[row + tx]);
      right = add_products8(right, a0, a1, w_tile[row + tx + 16u]);
    }
    workgroupBarrier();
  }
  store_rows8(wg.z, m0, ty, n0 + 4u * tx, left);
  store_rows8(wg.z, m0, ty, n0 + 4u * (tx + 16u), right);
}
