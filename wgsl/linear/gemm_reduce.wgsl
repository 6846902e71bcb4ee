// gemm_reduce: the outputs of a split-K GEMM, a thread each. Reads the splits' sums from
// the scratch buffer the GEMM wrote, bound in x's slot (a binding of its own would be a
// ninth storage buffer, above WebGPU's default limit of 8 per stage); the sums of output
// (m, n) are at (z * M + m) * N + n. Adds them in split order and stores the output as the
// GEMM does without splits.
// Grid: (x, y) flatten ceil(M * N / ELEMENT_THREADS) workgroups.
#include "common/index.wgsl"
#include "linear/common.wgsl"

@compute @workgroup_size(ELEMENT_THREADS)
fn gemm_reduce(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
  let i = element_index(gid, groups);
  let outputs = p.m * p.n;
  if (i >= outputs) {
    return;
  }
  var total = 0.0;
  for (var z = 0u; z < p.k_splits; z++) {
    let j = z * outputs + i;
    total += x[j / 4u][j % 4u];
  }
  store(i / p.n, i % p.n, total);
}
