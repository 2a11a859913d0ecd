"""anatomy.norm_placement: the torch blocks against the NumPy ones (float64 within 1e-12), and
the measured gradient profiles of pre- and post-norm stacks (chapter 6's figure)."""

import numpy as np
import pytest
import torch

from anatomy.blocks import block, layer_norm, mlp
from anatomy.heads import multi_head_attention
from anatomy.norm_placement import (
    GradProfile,
    grad_profile,
    postnorm_block,
    prenorm_block,
    random_stack,
)


def _pair(seed: int = 0):
    """One random block as torch tensors and as NumPy arrays, LayerNorm and biases included."""
    gen = torch.Generator().manual_seed(seed)
    p = random_stack(1, 16, 64, gen)[0]
    p = {k: v + 0.3 * torch.randn(v.shape, generator=gen, dtype=torch.float64)
         for k, v in p.items()}
    x = torch.randn(2, 5, 16, generator=gen, dtype=torch.float64)
    return x, p, x.numpy(), {k: v.numpy() for k, v in p.items()}


def test_prenorm_block_matches_the_numpy_block():
    x, p, xn, pn = _pair(0)
    np.testing.assert_allclose(prenorm_block(x, p, 4).numpy(), block(xn, pn, 4), atol=1e-12,
                               rtol=0)


def test_postnorm_block_matches_layer_norm_after_each_addition():
    x, p, xn, pn = _pair(1)
    a = multi_head_attention(xn, pn["W_qkv"], pn["W_o"], 4, pn["b_qkv"], pn["b_o"])[0]
    y = layer_norm(xn + a, pn["ln1_g"], pn["ln1_b"])
    want = layer_norm(y + mlp(y, pn["W_1"], pn["b_1"], pn["W_2"], pn["b_2"]),
                      pn["ln2_g"], pn["ln2_b"])
    np.testing.assert_allclose(postnorm_block(x, p, 4).numpy(), want, atol=1e-12, rtol=0)


def test_zero_weights_give_identity_pre_norm_but_zeros_post_norm():
    x, p, _, _ = _pair(2)
    zeros = {k: torch.zeros_like(v) for k, v in p.items()}
    assert torch.equal(prenorm_block(x, zeros, 4), x)
    assert postnorm_block(x, zeros, 4).abs().max() == 0      # LN gain 0 wipes the stream


@pytest.mark.parametrize("step", [prenorm_block, postnorm_block])
def test_skip_only_changes_the_gradient_not_the_forward_pass(step):
    x, p, _, _ = _pair(3)
    assert torch.equal(step(x, p, 4, skip_only=True), step(x, p, 4))


@pytest.fixture(scope="module")
def profiles():
    return {(placement, skip, seed): grad_profile(placement, seed=seed, skip_only=skip)
            for placement in ("pre", "post") for skip in (False, True) for seed in (0, 1, 2)}


def test_profiles_have_one_number_per_block(profiles):
    prof = profiles[("pre", False, 0)]
    assert isinstance(prof, GradProfile)
    assert prof.params.shape == prof.stream.shape == (48,) and prof.size.shape == (49,)
    assert all(np.isfinite(v.params).all() and (v.params > 0).all() for v in profiles.values())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_full_gradient_pre_norm_shrinks_toward_the_output_post_norm_does_not(profiles, seed):
    pre, post = profiles[("pre", False, seed)].params, profiles[("post", False, seed)].params
    assert pre[0] / pre[-1] > 4                     # the growing stream damps the top blocks
    assert post[-1] > 4 * pre[-1]                   # post-norm's top blocks get full size
    assert 0.1 < post[0] / post[-1] < 10            # and nothing vanishes at initialisation
    assert post[0] > 0.1 * pre[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pre_norm_stream_grows_post_norm_stream_stays_at_sqrt_d(profiles, seed):
    pre, post = profiles[("pre", False, seed)].size, profiles[("post", False, seed)].size
    assert abs(pre[0] - np.sqrt(32)) < 1.0 and pre[-1] > 4 * pre[0]
    np.testing.assert_allclose(post[1:], np.sqrt(32), rtol=1e-4)   # every output is LN'd


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_skip_path_alone_pre_norm_is_clean_post_norm_shrinks_geometrically(profiles, seed):
    pre, post = profiles[("pre", True, seed)].stream, profiles[("post", True, seed)].stream
    np.testing.assert_allclose(pre, pre[-1], rtol=1e-10)        # identity: passed down unchanged
    assert post[0] / post[-1] < 1e-6
    factor = (post[0] / post[-1]) ** (1 / 47)
    assert 0.5 < factor < 0.8                                   # about the same loss per block


def test_unknown_placement_is_named():
    with pytest.raises(ValueError, match=r"placement: expected one of .*, got 'mid'"):
        grad_profile("mid")
