"""RoPE rotation: the fused Function against the textbook rotate-half formula, its inverse and
its gradients (gradcheck and gradgradcheck in float64)."""
import pytest
import torch

from cem_core.nn.rope import rope_angles, rotate, unrotate


def rotate_half_formula(v, cos, sin):
    """Llama's R_i v = v cos + rotate_half(v) sin, written out independently."""
    half = v.shape[-1] // 2
    return v * cos + torch.cat((-v[..., half:], v[..., :half]), dim=-1) * sin


@pytest.fixture
def angles():
    return rope_angles(torch.arange(7), 6, 10000.0, torch.float64)


def test_rotate_matches_the_rotate_half_formula(angles):
    cos, sin = angles
    v = torch.randn(2, 3, 7, 6, dtype=torch.float64)
    torch.testing.assert_close(rotate(v, cos, sin), rotate_half_formula(v, cos, sin), rtol=0, atol=1e-14)
    torch.testing.assert_close(unrotate(v, cos, sin), rotate_half_formula(v, cos, -sin), rtol=0, atol=1e-14)


def test_unrotate_inverts_rotate_and_keeps_norms(angles):
    cos, sin = angles
    v = torch.randn(2, 3, 7, 6, dtype=torch.float64)
    r = rotate(v, cos, sin)
    torch.testing.assert_close(unrotate(r, cos, sin), v, rtol=0, atol=1e-14)
    torch.testing.assert_close(r.norm(dim=-1), v.norm(dim=-1), rtol=1e-14, atol=0)
    assert (r - v).abs().max() > 0.1                                    # position 0 is fixed, the others turn


def test_rotate_keeps_the_memory_layout_and_promotes_dtype(angles):
    cos, sin = angles
    v = torch.randn(2, 7, 3, 6, dtype=torch.float64).transpose(1, 2)   # heads view, as the layers make it
    assert rotate(v, cos, sin).stride() == v.stride()
    low = torch.randn(2, 3, 7, 6, dtype=torch.float32)
    assert rotate(low, cos, sin).dtype == (low * cos).dtype == torch.float64
    one = rotate(v[:, :, 4], cos[4], sin[4])                            # one position, angles broadcast
    torch.testing.assert_close(one, rotate(v, cos, sin)[:, :, 4], rtol=0, atol=1e-14)


@pytest.mark.slow
@pytest.mark.parametrize("fn", [rotate, unrotate])
def test_rotation_gradients(angles, fn):
    cos, sin = angles
    v = torch.randn(2, 3, 7, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: fn(t, cos, sin), (v,))
    assert torch.autograd.gradgradcheck(lambda t: fn(t, cos, sin), (v,))


def test_angles_with_grad_are_refused(angles):
    cos, sin = angles
    with pytest.raises(ValueError, match="constants"):
        rotate(torch.randn(7, 6, dtype=torch.float64), cos.requires_grad_(True), sin)
