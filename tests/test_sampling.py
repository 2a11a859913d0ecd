"""anatomy.sampling: temperature, top-k and greedy decoding from the PyTorch GPT."""

import pytest
import torch

from anatomy.data import CharTokenizer
from anatomy.gpt_torch import GPT
from anatomy.params import GPTConfig
from anatomy.sampling import next_token_probs, sample

TOK = CharTokenizer("\n abcdefgh")
CFG = GPTConfig(V=TOK.vocab_size, ctx=8, d=16, L=1, h=2)


@pytest.fixture
def model() -> GPT:
    torch.manual_seed(0)
    return GPT(CFG)


def test_same_seed_same_text_and_contexts_longer_than_ctx(model):
    def draw(seed):
        return sample(model, TOK, "abc", 20, generator=torch.Generator().manual_seed(seed))

    text = draw(0)
    assert text.startswith("abc") and len(text) == 23       # 23 > ctx = 8: the window slides
    assert draw(0) == text
    assert any(draw(seed) != text for seed in range(1, 6))


def test_temperature_zero_and_top_1_are_greedy(model):
    greedy = sample(model, TOK, "ab", 12, temperature=0)
    assert sample(model, TOK, "ab", 12, top_k=1, generator=torch.Generator()) == greedy
    ids = torch.tensor([TOK.encode("ab")])
    assert greedy[2] == TOK.vocab[int(model(ids)[0, -1].argmax())]


def test_top_k_keeps_only_the_k_likeliest():
    logits = torch.tensor([3.0, 1.0, 2.0, -1.0])
    probs = next_token_probs(logits, temperature=1.0, top_k=2)
    assert torch.equal(probs > 0, torch.tensor([True, False, True, False]))
    assert probs.sum().item() == pytest.approx(1.0)
    hot, cold = next_token_probs(logits, 2.0), next_token_probs(logits, 0.5)
    assert cold.max() > hot.max()                            # low temperature sharpens


def test_sampling_leaves_the_model_as_it_found_it(model):
    model.train()
    text = sample(model, TOK, "", 5, generator=torch.Generator().manual_seed(0))
    assert model.training and len(text) == 5                  # empty prompt: starts at "\n"


def test_bad_arguments_are_named(model):
    with pytest.raises(ValueError, match="temperature"):
        sample(model, TOK, "a", 3, temperature=-1)
    with pytest.raises(ValueError, match=r"top_k: expected an integer in \[1, V\] = \[1, 10\]"):
        sample(model, TOK, "a", 3, top_k=0)
    with pytest.raises(ValueError, match="character 'z' at position 0"):
        sample(model, TOK, "z", 3)
