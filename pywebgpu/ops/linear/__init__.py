"""4-bit group-quantized linears, with their kernels in wgsl/linear/.

- q4gsw.py: `et_vk.linear_q4gsw` (`-qmode 4w`) and LinearQ4gsw, the base of them all.
- dq8ca.py: `torchao.choose_qparams_affine` + `et_vk.linear_dq8ca_q4gsw` (`-qmode 8da4w`).
- fused.py: the handlers the runtime's fusion puts in place of exported ops.
- plan.py: which kernel runs for which kernel set and shape; params.py: the kernels'
  Params blocks and grids; shaders.py: the module and overrides each kernel is built from.
"""

from .dq8ca import ChooseQparamsAffine, LinearDq8caQ4gsw
from .fused import LinearQ4gswConcat, LinearQ4gswResidual, RmsNormLinear
from .q4gsw import LinearQ4gsw, LinearQ4gswWeightOnly

__all__ = [
    "ChooseQparamsAffine",
    "LinearDq8caQ4gsw",
    "LinearQ4gsw",
    "LinearQ4gswConcat",
    "LinearQ4gswResidual",
    "LinearQ4gswWeightOnly",
    "RmsNormLinear",
]
