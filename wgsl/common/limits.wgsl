// The most negative finite f32: the max of no values, which exp() maps to 0 without the
// inf - inf = NaN an actual -inf would give (written exactly: a rounded decimal can exceed it).
const LOWEST: f32 = -0x1.fffffep+127f;
