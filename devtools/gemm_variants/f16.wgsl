// gemm_wide with f16 stages, products and sums: what an f16 path would give the prefill
// GEMM where the adapter has shader-f16 (devtools/gemm_variant_probe.py appends this to
// linear_q4gsw.wgsl behind `enable f16;`). Stages of H_TILE_K = 32 values hold as many
// bytes as gemm_wide's f32 stages of 16; each stage's 32 products are summed in f16 and
// then added to f32 totals.
const H_TILE_K: u32 = 32u;
var<workgroup> x_tile_h: array<vec4<f16>, H_TILE_K * WIDE_TILE / 4u>;
var<workgroup> w_tile_h: array<vec4<f16>, H_TILE_K * WIDE_TILE / 4u>;

// stage_x_tile and stage_w_tile of gemm_wide's tile, H_TILE_K values, rounded to f16.
fn stage_x_tile_h(lid: u32, m0: u32, k0: u32) {
  for (var e = lid; e < WIDE_TILE * H_TILE_K / 4u; e += 256u) {
    let row = e / (H_TILE_K / 4u);
    let kq = e % (H_TILE_K / 4u);
    let kv = k0 / 4u + kq;
    var v = vec4<f32>(0.0);
    if (m0 + row < p.m && kv < p.k / 4u) {
      v = x_vec(x_row_start(m0 + row), kv);
    }
    let h = vec4<f16>(v);
    for (var c = 0u; c < 4u; c++) {
      x_tile_h[(4u * kq + c) * (WIDE_TILE / 4u) + row / 4u][row % 4u] = h[c];
    }
  }
}

fn stage_w_tile_h(lid: u32, n0: u32, k0: u32) {
  for (var e = lid; e < WIDE_TILE * H_TILE_K / 8u; e += 256u) {
    let col = e / (H_TILE_K / 8u);
    let wq = e % (H_TILE_K / 8u);
    let w = k0 / 8u + wq;
    let n = n0 + col;
    var even = vec4<f16>(0.0);
    var odd = vec4<f16>(0.0);
    if (n < p.n && w * 8u < p.k) {
      let word = weights[n * p.weight_row_words + w];
      let scale = scales[(w * 8u) / p.group_size * p.scale_stride + n];
      even = vec4<f16>(scale * q4_even(word));
      odd = vec4<f16>(scale * q4_odd(word));
    }
    for (var c = 0u; c < 4u; c++) {
      w_tile_h[(8u * wq + 2u * c) * (WIDE_TILE / 4u) + col / 4u][col % 4u] = even[c];
      w_tile_h[(8u * wq + 2u * c + 1u) * (WIDE_TILE / 4u) + col / 4u][col % 4u] = odd[c];
    }
  }
}

// Rows8 and add_products8 in f16: a stage's sums.
struct Rows8H {
  r0: vec4<f16>, r1: vec4<f16>, r2: vec4<f16>, r3: vec4<f16>,
  r4: vec4<f16>, r5: vec4<f16>, r6: vec4<f16>, r7: vec4<f16>,
}

fn add_products8_h(acc: Rows8H, a0: vec4<f16>, a1: vec4<f16>, b: vec4<f16>) -> Rows8H {
  return Rows8H(
    acc.r0 + a0.x * b, acc.r1 + a0.y * b, acc.r2 + a0.z * b, acc.r3 + a0.w * b,
    acc.r4 + a1.x * b, acc.r5 + a1.y * b, acc.r6 + a1.z * b, acc.r7 + a1.w * b,
  );
}

// A stage's f16 sums added to the f32 totals.
fn widen_add8(acc: Rows8, h: Rows8H) -> Rows8 {
  return Rows8(
    acc.r0 + vec4<f32>(h.r0), acc.r1 + vec4<f32>(h.r1), acc.r2 + vec4<f32>(h.r2), acc.r3 + vec4<f32>(h.r3),
    acc.r4 + vec4<f32>(h.r4), acc.r5 + vec4<f32>(h.r5), acc.r6 + vec4<f32>(h.r6), acc.r7 + vec4<f32>(h.r7),
  );
}

@compute @workgroup_size(256)
fn gemm_wide_f16(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
  let m0 = wg.y * WIDE_TILE;
  let n0 = wg.x * WIDE_TILE;
  let tx = lid % 16u;
  let ty = lid / 16u;
  var left = Rows8();
  var right = Rows8();
  let k_range = split_range(wg.z, H_TILE_K);
  for (var k0 = k_range.x; k0 < k_range.y; k0 += H_TILE_K) {
    stage_x_tile_h(lid, m0, k0);
    stage_w_tile_h(lid, n0, k0);
    workgroupBarrier();
    var left_h = Rows8H();
    var right_h = Rows8H();
    for (var kk = 0u; kk < H_TILE_K; kk++) {
      let row = kk * (WIDE_TILE / 4u);
      let a0 = x_tile_h[row + ty];
      let a1 = x_tile_h[row + ty + 16u];
      left_h = add_products8_h(left_h, a0, a1, w_tile_h[row + tx]);
      right_h = add_products8_h(right_h, a0, a1, w_tile_h[row + tx + 16u]);
    }
    left = widen_add8(left, left_h);
    right = widen_add8(right, right_h);
    workgroupBarrier();
  }
  store_rows8(wg.z, m0, ty, n0 + 4u * tx, left);
  store_rows8(wg.z, m0, ty, n0 + 4u * (tx + 16u), right);
}
