"""Golden values for KERPLE's kernels from the authors' own forward pass, run once with torch.

    python scripts/golden_kerple.py > tests/golden/kerple.json   (needs torch; tests do not)

KERPLE's released code (github.com/chijames/KERPLE, megatron/mpu/layers.py, classes
ParallelKerpleLog and ParallelKerplePower) clamps each parameter's storage in place and then
computes the bias from it:
    log:   p.data.clamp_(min=0.01); a.data.clamp_(min=0.01); bias = -p * log(1 + a * |r|)
    power: p.data.clamp_(min=0.01, max=2) (the exponent); a.data.clamp_(min=0.01) (the
           coefficient); bias = -a * |r|^p
This script states those two lines with torch autograd and records the bias and the gradient
of its sum for parameters inside and below the clamp range (a coefficient that drifted below
0.01 still gets a gradient).
"""

import json

import torch

EPS = 0.01
DISTANCES = list(range(8))


def log_kernel(p, a):
    p.data.clamp_(min=EPS)
    a.data.clamp_(min=EPS)
    r = torch.tensor(DISTANCES, dtype=torch.float64)
    return -p[:, None] * torch.log(1 + a[:, None] * r)


def power_kernel(coefficient, exponent):
    exponent.data.clamp_(min=EPS, max=2)
    coefficient.data.clamp_(min=EPS)
    r = torch.tensor(DISTANCES, dtype=torch.float64)
    return -coefficient[:, None] * r[None, :] ** exponent[:, None]


def case(kernel, p, a):
    p = torch.tensor(p, dtype=torch.float64, requires_grad=True)
    a = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    given = {"p": p.tolist(), "a": a.tolist()}
    bias = kernel(p, a)
    bias.sum().backward()
    return {**given, "bias": bias.tolist(), "grad_p": p.grad.tolist(), "grad_a": a.grad.tolist()}


print(json.dumps({
    "source": "KERPLE (Chi et al. 2022) released code, megatron/mpu/layers.py, stated in torch "
              f"{torch.__version__} by scripts/golden_kerple.py",
    "distances": DISTANCES,
    # posjax names: log -p log(1 + a r); power -p r^a (p the coefficient, a the exponent).
    "kerple_log": case(log_kernel, [0.5, 0.001, 1.7], [0.3, 0.8, 0.004]),
    "kerple_power": case(lambda p, a: power_kernel(p, a), [0.5, 0.004, 1.2], [1.5, 0.7, 2.6]),
}, indent=1))
