"""Chapter 9's checks beyond the shared tests: the valid variants they must accept, and the
mutants of the training step that the mutation test calls equivalent (its battery sees only
the step's return value) but that the check, running several steps, must still fail."""

import pytest
import torch

from anatomy.exercises import registry
from anatomy.exercises.ch09 import (
    RHYME,
    STEP_ORDER,
    _check_count,
    _train,
    without_biases,
)
from anatomy.exercises.mutants import mutants
from anatomy.gpt_torch import GPT
from anatomy.params import GPTConfig
from anatomy.train.adamw import adamw_update

EXERCISES = registry()
V, T, d, h = len(set(RHYME)), 16, 32, 4


def _model(L=4, tied=True, drop=()):
    model = GPT(GPTConfig(V=V, ctx=T, d=d, L=L, h=h, tied=tied))
    return without_biases(model, drop) if drop else model


@pytest.mark.parametrize("drop", [(), ("b_qkv", "b_o", "b_1", "b_2"),
                                  ("ln1_b", "ln2_b", "lnf_b"),
                                  ("b_qkv", "b_o", "b_1", "b_2", "ln1_b", "ln2_b", "lnf_b")])
def test_challenge_count_accepts_every_bias_variant(drop):
    model = _model(drop=drop)
    _check_count(model, V, T, d, h, "case")                 # does not raise


@pytest.mark.parametrize("kwargs, fragment", [
    ({"tied": False}, "the head has its own [V, d] table"),
    ({"L": 3}, "the matrices are those of 3 blocks"),
    ({"drop": ("b_qkv",)}, "The matrices are right; the vectors"),
])
def test_challenge_count_says_what_it_saw(kwargs, fragment):
    from anatomy.exercises._core import Wrong

    with pytest.raises(Wrong) as caught:
        _check_count(_model(**kwargs), V, T, d, h, "case")
    assert fragment in str(caught.value)
    assert "in matrices (2-D and up)" in str(caught.value)


def test_a_bias_free_model_passes_the_challenge():
    def bias_free(text, steps=300, T=16, d=32, h=4, B=16, lr=3e-3, seed=0):
        return _train(text, steps, T, d, h, B, lr, seed, biases=False)

    result = EXERCISES["9.C"].check(bias_free, quiet=True, seed=0)
    assert result.status == "passed", result.message


@pytest.mark.parametrize("order", [
    ["zero_grad", *STEP_ORDER[:-1]],                               # PyTorch's AMP recipe
    [*STEP_ORDER[:6], "zero_grad", "update"],                      # zero after step
    ["forward", "scaler.scale", "backward()", "unscale", "clip_grad_norm_",
     "optimizer.step", "scaler.update()", "zero_grad"],            # other spellings
])
def test_order_accepts_every_valid_place_of_zero_grad_and_spelling(order):
    assert EXERCISES["9.5"].check(order, quiet=True).status == "passed"


def test_step_mutants_the_battery_cannot_see_are_still_failed():
    exercise = EXERCISES["9.6"]
    found = {}
    for mutant in mutants(exercise.reference):
        if mutant.description == "delete statement":
            source = __import__("inspect").getsource(exercise.reference).splitlines()
            first = exercise.reference.__code__.co_firstlineno
            found[source[mutant.line - first].strip()] = mutant.fn
    for line in ("scaler.step(optimizer)", "scaler.update()",
                 "optimizer.zero_grad(set_to_none=True)"):
        fn = next(f for text, f in found.items() if text.startswith(line))
        result = exercise.check(fn, quiet=True, seed=0)
        assert result.status == "failed", (line, result.message)


def test_step_with_zero_grad_first_passes():
    def zero_first(model, x, y, optimizer, precision, grad_clip):
        optimizer.zero_grad()
        scaler = precision.scaler
        with precision.autocast():
            _, loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        return loss.item(), norm

    assert EXERCISES["9.6"].check(zero_first, quiet=True, seed=3).status == "passed"


def test_adamw_in_torch_passes_and_in_place_fails():
    # torch.as_tensor shares the arrays' memory, so the in-place ops below change the
    # caller's inputs, which the spec forbids; torch.tensor copies them first.
    def in_place(p, g, m, v, t, lr, betas, eps, weight_decay):
        return in_torch(p, g, m, v, t, lr, betas, eps, weight_decay, make=torch.as_tensor)

    def in_torch(p, g, m, v, t, lr, betas, eps, weight_decay, make=torch.tensor):
        p, g, m, v = (make(a) for a in (p, g, m, v))
        m.mul_(betas[0]).add_(g, alpha=1 - betas[0])
        v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
        denom = (v / (1 - betas[1] ** t)).sqrt() + eps
        p.mul_(1 - lr * weight_decay).addcdiv_(m, denom, value=-lr / (1 - betas[0] ** t))
        return p, m, v

    def reference_in_float32(*args, **kwargs):
        import numpy as np

        return tuple(a.astype(np.float32) for a in adamw_update(*args, **kwargs))

    for fn in (in_torch, reference_in_float32):
        for seed in range(4):
            result = EXERCISES["9.4"].check(fn, quiet=True, seed=seed)
            assert result.status == "passed", (fn.__name__, result.message)
    result = EXERCISES["9.4"].check(in_place, quiet=True, seed=0)
    assert result.status == "failed" and "in place" in result.message, result.message
