"""anatomy.train.step: the mixed-precision training step that ``train`` runs."""

import copy
import inspect

import torch
from _local_data import DATA

import anatomy.train.loop as loop
from anatomy.gpt_torch import GPT
from anatomy.params import GPTConfig
from anatomy.train import PRESETS
from anatomy.train.hardware import Precision, choose_precision
from anatomy.train.step import train_step


def _setup(scale=2.0**16, dtype=None, seed=0):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(V=11, ctx=8, d=16, L=1, h=2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    precision = Precision("cpu", dtype, torch.amp.GradScaler("cpu", init_scale=scale))
    gen = torch.Generator().manual_seed(seed)
    x, y = torch.randint(11, (4, 8), generator=gen), torch.randint(11, (4, 8), generator=gen)
    return model, opt, precision, x, y


def _by_hand(model, x, y, opt, grad_clip):
    """Plain float32: forward, backward, clip, step, zero."""
    _, loss = model(x, y)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach(), norm


def test_float32_step_is_the_plain_step():
    model, opt, _, x, y = _setup()
    twin = copy.deepcopy(model)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1)
    for _ in range(3):
        a = train_step(model, x, y, opt, choose_precision("cpu", "float32"), 0.5)
        b = _by_hand(twin, x, y, twin_opt, 0.5)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q)
        assert p.grad is None


def test_a_scaler_changes_nothing_but_the_arithmetic_inside():
    # S = 2^16 in float32 loses nothing: the loss, the true norm and the weights are those of
    # the unscaled step, because unscale_ comes before the clip.
    model, opt, precision, x, y = _setup()
    twin = copy.deepcopy(model)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1)
    loss, norm = train_step(model, x, y, opt, precision, 0.25)
    want_loss, want_norm = _by_hand(twin, x, y, twin_opt, 0.25)
    assert norm > 0.25                                   # the clip was active
    torch.testing.assert_close(loss, want_loss)
    torch.testing.assert_close(norm, want_norm, rtol=1e-5, atol=1e-7)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7)


def test_an_overflow_skips_the_step_and_halves_the_scale():
    model, opt, precision, x, y = _setup(scale=2.0**40, dtype=torch.float16)
    before = [p.detach().clone() for p in model.parameters()]
    loss, norm = train_step(model, x, y, opt, precision, 1.0)
    assert torch.isfinite(loss) and not torch.isfinite(norm)
    assert precision.scaler.get_scale() == 2.0**39
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))


def test_float16_autocast_step_is_close_to_float32():
    model, opt, precision, x, y = _setup(dtype=torch.float16)
    twin = copy.deepcopy(model)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1)
    loss, norm = train_step(model, x, y, opt, precision, 1.0)
    want_loss, want_norm = _by_hand(twin, x, y, twin_opt, 1.0)
    assert abs(loss.item() - want_loss.item()) < 1e-2
    assert abs(norm.item() - want_norm.item()) < 1e-2 * want_norm.item()


def test_train_runs_every_step_through_train_step(monkeypatch):
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return train_step(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", counting)
    cfg = PRESETS["tiny"]
    loop.train(cfg, progress=False, device="cpu", data_path=DATA)
    assert len(calls) == cfg.max_steps


def test_step_order_in_the_source_is_pytorchs():
    body = inspect.getsource(train_step).split('"""')[-1]
    order = ["autocast()", "scaler.scale(loss).backward()", "scaler.unscale_(",
             "clip_grad_norm_(", "scaler.step(", "scaler.update()", "zero_grad("]
    positions = [body.index(op) for op in order]
    assert positions == sorted(positions)


def test_source_fits_the_books_column():
    # chapter 9 prints it
    assert all(len(line) <= 80 for line in inspect.getsource(train_step).splitlines())
