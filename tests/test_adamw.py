"""anatomy.train.adamw: one AdamW update in NumPy, against torch.optim.AdamW."""

import numpy as np
import pytest
import torch

from anatomy.train.adamw import adamw_update, spike_moves


def _torch_run(p, grads, **hyper):
    param = torch.nn.Parameter(torch.tensor(p))
    opt = torch.optim.AdamW([param], **hyper)
    for g in grads:
        param.grad = torch.tensor(g)
        opt.step()
    state = opt.state[param]
    return param.detach().numpy(), state["exp_avg"].numpy(), state["exp_avg_sq"].numpy()


@pytest.mark.parametrize("hyper", [
    {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01},
    {"lr": 0.1, "betas": (0.8, 0.95), "eps": 1e-3, "weight_decay": 0.5},
    {"lr": 3e-3, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.0},
])
def test_ten_updates_match_torch(hyper):
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal((3, 4))
    grads = list(rng.standard_normal((10, 3, 4)))
    p, m, v = p0, np.zeros_like(p0), np.zeros_like(p0)
    for t, g in enumerate(grads, start=1):
        p, m, v = adamw_update(p, g, m, v, t, **hyper)
    want = _torch_run(p0, grads, **hyper)
    for got, ref in zip((p, m, v), want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-15)


def test_first_update_moves_each_weight_by_lr_against_its_gradient():
    g = np.array([1e-3, -0.5, 30.0])
    zeros = np.zeros(3)
    p, m, v = adamw_update(zeros, g, zeros, zeros, 1, lr=0.01, betas=(0.9, 0.99),
                           eps=1e-8, weight_decay=0.0)
    np.testing.assert_allclose(p, -0.01 * np.sign(g), rtol=1e-5)
    np.testing.assert_allclose(m, 0.1 * g)
    np.testing.assert_allclose(v, 0.01 * g**2)


def test_inputs_are_left_alone_and_float32_stays_float32():
    rng = np.random.default_rng(1)
    p, g, m, v = (rng.standard_normal(5).astype(np.float32) for _ in range(4))
    v = np.abs(v)
    copies = [a.copy() for a in (p, g, m, v)]
    out = adamw_update(p, g, m, v, 3, lr=1e-2, betas=(0.9, 0.99), eps=1e-8,
                       weight_decay=0.1)
    assert all(np.array_equal(a, b) for a, b in zip((p, g, m, v), copies, strict=True))
    assert all(a.dtype == np.float32 for a in out)


def test_bad_arguments_are_named():
    z = np.zeros(3)
    kw = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}
    with pytest.raises(ValueError, match=r"^g: expected shape .*, got \(4,\)"):
        adamw_update(z, np.zeros(4), z, z, 1, **kw)
    with pytest.raises(ValueError, match=r"^m: expected the shape of p, \(3,\), got \(1,\)"):
        adamw_update(z, z, np.zeros(1), z, 1, **kw)
    with pytest.raises(ValueError, match="t: expected a positive integer, got 0"):
        adamw_update(z, z, z, z, 0, **kw)
    with pytest.raises(ValueError, match="betas"):
        adamw_update(z, z, z, z, 1, **{**kw, "betas": (0.9, 1.0)})
    with pytest.raises(ValueError, match="eps"):
        adamw_update(z, z, z, z, 1, **{**kw, "eps": 0.0})


def test_spike_moves_sgd_follows_the_gradient_adamw_remembers_it():
    sgd = spike_moves("SGD", clip=None)
    assert sgd.shape == (101,)
    assert 1500 < sgd[0] < 2500                      # the spike's norm over an ordinary one
    assert np.allclose(sgd[1:].mean(), 1, atol=0.05)  # and no memory of it afterwards
    adam = spike_moves("AdamW", clip=None)
    assert 3 < adam[0] < 8                           # bounded step on the spike itself
    assert adam[1:11].mean() > 2                     # m still holds it for ~10 steps
    assert adam[1:].mean() < 0.7                     # v, inflated, shrinks the next 100
    for optimizer in ("SGD", "AdamW"):               # clipped: close to ordinary steps
        clipped = spike_moves(optimizer, clip=1.0)
        assert clipped[0] < 2.5 and abs(clipped[1:].mean() - 1) < 0.1


def test_spike_moves_after_extends_the_run_and_shows_v_freezing_the_weights():
    short = spike_moves("AdamW", clip=None)
    adam = spike_moves("AdamW", clip=None, after=1500)
    assert adam.shape == (1501,)
    np.testing.assert_array_equal(adam[:101], short)  # the same draws, only longer
    assert adam[31:201].mean() < 0.1                 # v, inflated, all but freezes them
    assert (adam[31:800] < 0.5).all()                # for hundreds of steps (beta2 0.99)
    assert adam[1001:].mean() > 0.8                  # and lets go after about a thousand
    clipped = spike_moves("AdamW", clip=1.0, after=1500)
    assert abs(clipped[1:].mean() - 1) < 0.05


def test_spike_moves_rejects_an_unknown_optimizer():
    with pytest.raises(ValueError, match="optimizer"):
        spike_moves("Adam", clip=None)
    for after in (0, 2.5, True):
        with pytest.raises(ValueError, match="after"):
            spike_moves("SGD", clip=None, after=after)
