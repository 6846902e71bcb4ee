// gemv_rows for adapters with subgroups (behind the directives quad operations need): lane
// j of a quad loads the x values of row j of each 4 and hands them to the other lanes by
// quad swaps, a SIMD shuffle each where a load is a gather, lane by lane.
// A quad is 4 consecutive invocations.
#include "linear/gemv_rows.wgsl"

// gemv_rows' x values at word w for the 4 rows of a lane's slots (x_rows: where they
// start; see XSlots): each lane loads its slot 0 (row j of lane j), and quad swaps
// bring it the others.
fn x_slots(x_rows: vec4<u32>, w: u32) -> XSlots {
  let x = x_word(x_rows.x, w);
  return XSlots(
    x,
    XWord(quadSwapX(x.lo), quadSwapX(x.hi), quadSwapX(x.offset_sum)),
    XWord(quadSwapY(x.lo), quadSwapY(x.hi), quadSwapY(x.offset_sum)),
    XWord(quadSwapDiagonal(x.lo), quadSwapDiagonal(x.hi), quadSwapDiagonal(x.offset_sum)),
  );
}
