// gemm, the GPUs' prefill GEMM: 64x64 tiles, a thread owning a 4x4 block of outputs, steps
// of TILE_K input features (see gemm_common.wgsl).
#include "linear/gemm_common.wgsl"

@compute @workgroup_size(256)
fn gemm(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let m0 = wg.y * TILE;
  let n0 = wg.x * TILE;
  let tx = lid % 16u;  // column block: n0 + 4 tx ..
  let ty = lid / 16u;  // row block: m0 + 4 ty ..
  let k_range = split_range(wg.z, TILE_K);
  var acc0 = vec4<f32>(0.0);  // row m0 + 4 ty, columns n0 + 4 tx ..
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  for (var k0 = k_range.x; k0 < k_range.y; k0 += TILE_K) {
    stage_x_tile(lid, m0, k0, TILE, TILE_K);
    stage_w_tile(lid, n0, k0, TILE, TILE_K);
    workgroupBarrier();
    for (var kk = 0u; kk < TILE_K; kk++) {
      let a = x_tile[kk * (TILE / 4u) + ty];
      let b = w_tile[kk * (TILE / 4u) + tx];
      acc0 += a.x * b;
      acc1 += a.y * b;
      acc2 += a.z * b;
      acc3 += a.w * b;
    }
    workgroupBarrier();
  }
  store_row(wg.z, m0 + 4u * ty, n0 + 4u * tx, acc0);
  store_row(wg.z, m0 + 4u * ty + 1u, n0 + 4u * tx, acc1);
  store_row(wg.z, m0 + 4u * ty + 2u, n0 + 4u * tx, acc2);
  store_row(wg.z, m0 + 4u * ty + 3u, n0 + 4u * tx, acc3);
}
