// Tree reductions of one f32 per thread over a workgroup, always in the same order. The
// includer declares `var<workgroup> reduction: array<f32, N>`, N at least the threads.

// The max of `value` over the workgroup's `threads` threads (a power of two), each of
// which calls it (it holds barriers); reduction[] is free again when it returns.
fn workgroup_max(thread: u32, threads: u32, value: f32) -> f32 {
  reduction[thread] = value;
  workgroupBarrier();
  for (var stride = threads / 2u; stride > 0u; stride /= 2u) {
    if (thread < stride) {
      reduction[thread] = max(reduction[thread], reduction[thread + stride]);
    }
    workgroupBarrier();
  }
  let result = reduction[0];
  workgroupBarrier();
  return result;
}

// The sum of `value` over the workgroup's `threads` threads, as workgroup_max.
fn workgroup_sum(thread: u32, threads: u32, value: f32) -> f32 {
  reduction[thread] = value;
  workgroupBarrier();
  for (var stride = threads / 2u; stride > 0u; stride /= 2u) {
    if (thread < stride) {
      reduction[thread] += reduction[thread + stride];
    }
    workgroupBarrier();
  }
  let result = reduction[0];
  workgroupBarrier();
  return result;
}
