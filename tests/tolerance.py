"""Float tolerances from an error analysis, not from one machine's measurement.

A floating-point sum of n operands, evaluated in any order (sequential, pairwise, SIMD lanes of any
width: the order changes from one CPU to the next), is within (n - 1)·u·Σ|x_i| of the exact sum, with
u = eps/2 the unit roundoff (Higham, *Accuracy and Stability of Numerical Algorithms*, §4.2). Two
evaluations of the same sum in different orders therefore differ by at most n·eps·Σ|x_i|. Every
tolerance built here is that bound: operand count × eps × magnitude, with the count and the
magnitude named at the call site, next to the assertion.

To see another CPU's summation order on this one, force torch's kernels to another instruction set:
``ATEN_CPU_CAPABILITY=avx2`` (or ``default``) ``make test``. The grad-accumulation check that failed on
an AMD EPYC with AVX2 (1.7e-6 of the largest gradient element against a measured 1e-6) fails here that
way too; its analysed bound is 4.7e-5.
"""

from __future__ import annotations

import torch

EPS32 = float(torch.finfo(torch.float32).eps)  # 2^-23 ≈ 1.19e-7
EPS64 = float(torch.finfo(torch.float64).eps)  # 2^-52 ≈ 2.22e-16
EPS_BF16 = float(torch.finfo(torch.bfloat16).eps)  # 2^-7 = 7.8e-3


def order_tolerance(operands: int, magnitude: float, eps: float = EPS32) -> float:
    """How far two evaluations of one computation (``operands`` rounded operations along its longest
    chain, values of size ``magnitude``) may differ when only the order of the operations changes."""
    if operands < 1 or magnitude < 0:
        raise ValueError(f"operands must be >= 1 and magnitude >= 0, got {operands}, {magnitude}")
    return operands * eps * magnitude


def reduction_depth(model: torch.nn.Module) -> int:
    """The longest chain of summed operands inside one forward/backward of a decoder: per layer, the
    hidden size (q/k/v, o), the MLP width (down projection) and the embedding sum; plus the
    vocabulary (log-softmax). A generous upper bound of the sums one output element depends on."""
    cfg = model.config
    layers = int(getattr(cfg, "num_hidden_layers", 1))
    per_layer = int(cfg.hidden_size) * 2 + int(getattr(cfg, "intermediate_size", cfg.hidden_size))
    return layers * per_layer + int(cfg.vocab_size)
