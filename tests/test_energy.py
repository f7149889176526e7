"""The element-wise potentials: Phi for SiLU against scipy's dilogarithm, and Phi' = phi."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.special import spence

from cem_core.nn.activations import ACTIVATIONS, dilog_neg_exp, silu_antiderivative


def test_silu_antiderivative_matches_scipy_spence():
    """Phi(z) = z softplus(z) + Li2(-e^z), Li2(u) = spence(1 - u), over z in [-50, 50]."""
    z = np.linspace(-50.0, 50.0, 20001)
    reference = z * np.logaddexp(0.0, z) + spence(1.0 + np.exp(z))
    ours = silu_antiderivative(torch.from_numpy(z)).numpy()
    assert np.isfinite(ours).all()
    # scipy's own value loses digits to cancellation (z softplus(z) ~ z^2 vs Li2 ~ -z^2/2), hence 1e-9
    np.testing.assert_allclose(ours, reference, rtol=1e-9, atol=1e-12)
    assert ours[10000] == pytest.approx(-math.pi ** 2 / 12, abs=1e-15)   # Phi(0) = Li2(-1)


def test_dilog_matches_scipy():
    a = np.linspace(-60.0, 0.0, 3001)
    np.testing.assert_allclose(dilog_neg_exp(torch.from_numpy(a)).numpy(), spence(1.0 + np.exp(a)),
                               rtol=1e-13, atol=1e-15)   # scipy rounds 1 + e^a for a << 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_silu_antiderivative_finite_at_extremes(dtype):
    z = torch.tensor([-1e4, -100.0, -50.0, 0.0, 50.0, 100.0, 1e4], dtype=dtype)
    value = silu_antiderivative(z)
    assert torch.isfinite(value).all()
    torch.testing.assert_close(value[-1], torch.tensor(0.5e8 - math.pi ** 2 / 6, dtype=dtype))  # z^2/2 - pi^2/6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_silu_antiderivative_backward_is_silu(dtype):
    z = torch.linspace(-50, 50, 1001, dtype=dtype, requires_grad=True)
    (grad,) = torch.autograd.grad(silu_antiderivative(z).sum(), z)
    torch.testing.assert_close(grad, F.silu(z.detach()), rtol=0, atol=0)   # exact custom backward


def test_silu_antiderivative_backward_agrees_with_finite_differences():
    z = torch.linspace(-20, 20, 401, dtype=torch.float64)
    eps = 1e-6
    fd = (silu_antiderivative(z + eps) - silu_antiderivative(z - eps)) / (2 * eps)
    torch.testing.assert_close(fd, F.silu(z), rtol=1e-7, atol=1e-7)


def test_silu_antiderivative_is_twice_differentiable():
    z = torch.linspace(-5, 5, 51, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(silu_antiderivative(z).sum(), z, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), z)
    s = torch.sigmoid(z.detach())
    torch.testing.assert_close(h, s + z.detach() * s * (1 - s))           # silu'(z)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_every_antiderivative_differentiates_to_its_activation(name):
    phi, antiderivative = ACTIVATIONS[name].phi, ACTIVATIONS[name].Phi
    z = torch.linspace(-8, 8, 1601, dtype=torch.float64)
    eps = 1e-6
    fd = (antiderivative(z + eps) - antiderivative(z - eps)) / (2 * eps)
    torch.testing.assert_close(fd, phi(z), rtol=1e-6, atol=1e-6)
