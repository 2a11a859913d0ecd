"""anatomy.train.char_lm: chapter 9's challenge solved with the library's pieces."""

import math

import pytest
import torch

from anatomy.exercises.ch09 import RHYME
from anatomy.gpt_torch import GPT
from anatomy.params import GPTConfig, count_params
from anatomy.sampling import sample
from anatomy.train.char_lm import train_char_lm


@pytest.fixture(scope="module")
def trained():
    return train_char_lm(RHYME, steps=150)


def test_four_tied_blocks_with_positions(trained):
    model, tokenizer, losses = trained
    V = len(set(RHYME))
    assert isinstance(model, GPT) and not model.training
    assert model.cfg == GPTConfig(V=V, ctx=16, d=32, L=4, h=4, d_ff=128, tied=True)
    assert model.num_params() == count_params(model.cfg) == 52_096
    assert tokenizer.vocab_size == V and len(losses) == 150


def test_it_learns_the_rhyme(trained):
    model, tokenizer, losses = trained
    assert abs(losses[0] - math.log(len(set(RHYME)))) < 0.2      # starts near ln V
    assert sum(losses[-10:]) / 10 < 0.5
    text = sample(model, tokenizer, "nasi lemak for ", 20, temperature=0)
    assert text in RHYME                       # greedy decoding recites a line it learned


def test_same_seed_same_run_and_bad_steps():
    a = train_char_lm(RHYME, steps=3, seed=1)
    b = train_char_lm(RHYME, steps=3, seed=1)
    assert a[2] == b[2]
    for p, q in zip(a[0].parameters(), b[0].parameters(), strict=True):
        assert torch.equal(p, q)
    assert train_char_lm(RHYME, steps=3, seed=2)[2] != a[2]
    with pytest.raises(ValueError, match="steps"):
        train_char_lm(RHYME, steps=0)
