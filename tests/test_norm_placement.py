"""anatomy.norm_placement: the torch blocks against the NumPy ones (float64 within 1e-12), the
measured gradient profiles of pre- and post-norm stacks (chapter 6's figure) in both
initialisations, and the split of pre-norm's block-0/block-47 ratio into the gradient
arriving at each block (which differs) and what the block makes of it (which does not)."""

import numpy as np
import pytest
import torch

from anatomy.blocks import block, layer_norm, mlp
from anatomy.heads import multi_head_attention
from anatomy.norm_placement import (
    GradProfile,
    block_gains,
    grad_profile,
    postnorm_block,
    prenorm_block,
    profile_table,
    random_stack,
    ratio_split,
    split_table,
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
    assert prof.out.shape == prof.inv_std.shape == (48,)
    np.testing.assert_array_equal(prof.out[:-1], prof.stream[1:])   # leaving l = entering l+1
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


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pre_norm_ratio_is_the_arriving_gradient_not_the_local_factor(profiles, seed):
    full, skip = profiles[("pre", False, seed)], profiles[("pre", True, seed)]
    split = ratio_split(full, 0, 47)
    assert split.params == pytest.approx(split.upstream * split.local, rel=1e-12)
    gains = block_gains(full)
    assert split.upstream == pytest.approx(np.prod(gains[1:]), rel=1e-10)
    assert split.params > 4 and split.upstream > 4      # the gradient arriving differs
    assert 0.7 < split.local < 1.5                      # what a block makes of it does not
    # The skip path alone delivers the gradient at the top of the stack to every block...
    np.testing.assert_allclose(skip.stream, full.out[-1], rtol=1e-10)
    # ...the sublayers add to it on the way down, most where the stream is short.
    assert gains[1] > 1.2 and gains[-1] < 1.05
    assert np.prod(gains[1:9]) > 1.5 * np.prod(gains[-8:])   # the bottom 8 gain the most
    assert full.inv_std[0] > 5 * full.inv_std[-1]
    np.testing.assert_allclose(full.inv_std * full.size[:-1], np.sqrt(32), rtol=0.1)


def test_split_table_has_a_line_per_block_that_fits_the_column(profiles):
    lines = split_table(profiles[("pre", False, 0)])
    assert len(lines) == 9 and all(len(line) <= 78 for line in lines)
    assert lines[0].split() == ["block", "|x|", "in", "1/std", "gain", "|g", "out|", "local",
                                "|grad", "W|"]
    assert lines[-1].split()[0] == "47"


def test_profile_table_prints_both_placements_at_three_blocks(profiles):
    full = {pl: profiles[(pl, False, 0)] for pl in ("pre", "post")}
    skip = {pl: profiles[(pl, True, 0)] for pl in ("pre", "post")}
    lines = profile_table(full, skip, "fan-in regime")
    assert len(lines) == 7 and all(len(line) <= 78 for line in lines)
    assert lines[0].split() == ["fan-in", "regime", "block", "0", "block", "24", "block",
                                "47", "0", "/", "47"]
    pre_full = lines[1].split()
    assert pre_full[:4] == ["pre-norm", "full:", "|grad", "W|"]
    assert float(pre_full[-1]) == pytest.approx(full["pre"].params[0] / full["pre"].params[47],
                                                rel=0.05)
    assert lines[4].startswith("post-norm skip only") and lines[6].startswith("post-norm")


@pytest.fixture(scope="module")
def gpt2_profiles():
    return {(placement, skip): grad_profile(placement, init="gpt2", skip_only=skip)
            for placement in ("pre", "post") for skip in (False, True)}


def test_at_gpt2_initialisation_neither_effect_has_started(gpt2_profiles):
    pre, post_skip = gpt2_profiles[("pre", False)], gpt2_profiles[("post", True)].stream
    assert pre.size[-1] / pre.size[0] < 1.05            # writes are tiny: the stream stays
    assert 0.9 < pre.params[0] / pre.params[-1] < 1.1   # every block gets the same gradient
    assert 0.9 < post_skip[1] / post_skip[-1] < 1.1     # post-norm's skip path does not shrink
    assert pre.size[0] < 0.5                            # the input is the 0.02-scale embedding


def test_post_norm_block_0_gradient_sits_in_b_o_at_gpt2_initialisation(gpt2_profiles):
    # Chapter 6: the 1/sigma of block 0's first LayerNorm lands on b_o, not on the matrices.
    post = gpt2_profiles[("post", False)]
    w = post.by_weight
    np.testing.assert_allclose(np.sqrt(sum(v ** 2 for v in w.values())), post.params,
                               rtol=1e-12)               # the parts make up the whole
    assert set(w) == {"ln1_g", "ln1_b", "W_qkv", "b_qkv", "W_o", "b_o",
                      "ln2_g", "ln2_b", "W_1", "b_1", "W_2", "b_2"}
    assert w["b_o"][0] / w["b_o"][-1] == pytest.approx(post.inv_std[0], rel=0.05)
    assert w["b_o"][0] ** 2 / post.params[0] ** 2 > 0.95
    rest = [np.sqrt(sum(v[i] ** 2 for k, v in w.items() if k != "b_o")) for i in (0, -1)]
    assert 0.8 < rest[0] / rest[1] < 1.2
    assert post.params[0] / post.params[-1] > 5


def test_gpt2_regime_is_the_library_initialisation():
    # init_params' first block, cast to torch, is the one the profile differentiates.
    from anatomy.norm_placement import _gpt2_setup
    from anatomy.params import GPTConfig, block_params, init_params

    blocks, x, head, targets = _gpt2_setup(3, 16, 4, 5, 2, 11, 7)
    params = init_params(GPTConfig(V=11, ctx=5, d=16, L=3, h=4), np.random.default_rng(7))
    np.testing.assert_array_equal(blocks[2]["W_o"].numpy(), block_params(params, 2)["W_o"])
    assert float(blocks[0]["W_2"].std()) < 0.02 / np.sqrt(6) * 1.2    # 0.02 / sqrt(2L)
    np.testing.assert_array_equal(head.numpy(), params["tok_emb"].T)
    assert x.shape == (2, 5, 16) and targets.shape == (2, 5)


def test_unknown_placement_init_and_block_are_named():
    with pytest.raises(ValueError, match=r"placement: expected one of .*, got 'mid'"):
        grad_profile("mid")
    with pytest.raises(ValueError, match=r"init: expected one of .*, got 'xavier'"):
        grad_profile("pre", init="xavier")
    prof = GradProfile(params=np.ones(4), stream=np.ones(4), size=np.ones(5), out=np.ones(4),
                       inv_std=np.ones(4))
    with pytest.raises(ValueError, match=r"hi: expected a block index in \[-L, L\) = "
                                         r"\[-4, 4\), got 4"):
        ratio_split(prof, 0, 4)


def test_gpt2_unscaled_undoes_only_the_writing_projections_scaling():
    # Chapter 6: the same draw, with W_o and W_2 multiplied back by sqrt(2L).
    from anatomy.norm_placement import _gpt2_setup

    scaled, x, _, _ = _gpt2_setup(3, 16, 4, 5, 2, 11, 7)
    unscaled, x_u, _, _ = _gpt2_setup(3, 16, 4, 5, 2, 11, 7, scaled=False)
    for a, b in zip(scaled, unscaled, strict=True):
        for name in a:
            factor = np.sqrt(6) if name in ("W_o", "W_2") else 1.0
            np.testing.assert_allclose(b[name].numpy(), a[name].numpy() * factor, rtol=1e-15)
    np.testing.assert_array_equal(x.numpy(), x_u.numpy())
    # Without the scaling, at L = 48, d = 32, the pre-norm stream grows and the slope is back.
    pre = grad_profile("pre", init="gpt2_unscaled")
    assert pre.size[-1] / pre.size[0] > 3
    assert pre.params[0] / pre.params[-1] > 3


def test_write_ratio_is_write_over_read():
    # Fan-in: each write is of the order of what it reads; GPT-2's init: tiny writes.
    fan = grad_profile("pre", L=8)
    assert fan.write_ratio.shape == (8, 2)
    assert 0.3 < fan.write_ratio.min() and fan.write_ratio.max() < 2
    assert grad_profile("pre", L=8, init="gpt2").write_ratio.max() < 0.05
    # Block 0's attention in pre-norm reads LN1 of the input, a vector of length ~sqrt(d).
    from anatomy.blocks import LN_EPS
    from anatomy.norm_placement import _fan_in_setup, _write_ratio, attention

    blocks, x, _, _ = _fan_in_setup(8, 32, 4, 8, 2, 64, 0)
    read = torch.nn.functional.layer_norm(x, (32,), eps=LN_EPS)
    write = attention(read, blocks[0], 4)
    want = float(write.norm(dim=-1).mean() / read.norm(dim=-1).mean())
    assert _write_ratio("pre", x, blocks[0], 4)[0] == pytest.approx(want, rel=1e-12)
    assert fan.write_ratio[0, 0] == pytest.approx(want, rel=1e-12)
