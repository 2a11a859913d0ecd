"""Generating text from a trained PyTorch GPT: temperature, top-k, one token at a time.

Shapes: prompt str -> ids [1, n] -> logits [1, n, V] -> next id -> ... -> str
"""

from __future__ import annotations

import torch
from torch import nn

from anatomy._validate import check_top_k
from anatomy.data import CharTokenizer
from anatomy.gpt_torch import unwrap


def next_token_probs(logits: torch.Tensor, temperature: float = 1.0,
                     top_k: int | None = None, top_p: float | None = None,
                     min_p: float | None = None) -> torch.Tensor:
    """Turn the last position's logits into the distribution we sample from.

    Dividing by the temperature sharpens (< 1) or flattens (> 1) the distribution; top-k
    keeps the k likeliest tokens and renormalises, so rare junk never gets drawn. top-p
    (nucleus) keeps the likeliest tokens until their probabilities reach p; min-p keeps
    those at least p times as likely as the likeliest. Each rule is applied to the
    distribution after the temperature, and a token must pass all that are given
    (``anatomy.inference.truncate`` is the NumPy twin).

    Shapes: logits [V] -> probs [V] (float32)
    """
    logits = logits.float() / temperature
    full = logits
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]          # the k-th largest logit
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is None and min_p is None:
        return torch.softmax(logits, dim=-1)
    _check_fraction(top_p, "top_p")
    _check_fraction(min_p, "min_p")
    probs = torch.softmax(full, dim=-1)                     # before any cut
    keep = torch.isfinite(logits)                           # what top-k left
    if top_p is not None:
        ranked, order = torch.sort(probs, descending=True, stable=True)
        before = torch.cumsum(ranked, dim=-1) - ranked      # mass of the likelier tokens
        keep &= torch.zeros_like(keep).scatter(-1, order, before < top_p)
    if min_p is not None:
        keep &= probs >= min_p * probs.max()
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum()


def _check_fraction(value: float | None, name: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not 0 < value <= 1):
        raise ValueError(f"{name}: expected a number in (0, 1], or None to keep every token, "
                         f"got {value!r}")


@torch.no_grad()
def sample(model: nn.Module, tokenizer: CharTokenizer, prompt: str, n_new: int,
           temperature: float = 1.0, top_k: int | None = None,
           generator: torch.Generator | None = None, top_p: float | None = None,
           min_p: float | None = None) -> str:
    """``prompt`` followed by ``n_new`` sampled characters.

    ``temperature=0`` means greedy (always the likeliest character). Draws come from
    ``generator`` (a CPU ``torch.Generator``; seed it for reproducible text) on the CPU, so
    the same seed gives the same text whatever device the model sits on. The context is
    cropped to the model's last ctx tokens. An empty prompt starts from a newline.
    ``top_p`` and ``min_p`` cut the distribution as :func:`next_token_probs` does.

    Shapes: ids [1, n] -> logits [1, n, V]; the last row [V] picks the next id
    """
    if temperature < 0:
        raise ValueError(f"temperature: expected >= 0 (0 = greedy), got {temperature}")
    V = tokenizer.vocab_size
    check_top_k(top_k, V)
    _check_fraction(top_p, "top_p")
    _check_fraction(min_p, "min_p")
    if n_new < 0:
        raise ValueError(f"n_new: expected >= 0, got {n_new}")
    raw = unwrap(model)
    ctx = raw.cfg.ctx
    device = raw.device
    ids = tokenizer.encode(prompt or "\n")
    was_training = raw.training
    raw.eval()
    try:
        for _ in range(n_new):
            window = torch.tensor(ids[-ctx:], dtype=torch.long, device=device)[None]  # [1, n]
            last = raw(window)[0, -1]                              # [1, n, V] -> [V]
            if temperature == 0:
                ids.append(int(last.argmax()))
                continue
            probs = next_token_probs(last, temperature, top_k, top_p, min_p).cpu()   # [V]
            ids.append(int(torch.multinomial(probs, 1, generator=generator)))
    finally:
        raw.train(was_training)
    text = tokenizer.decode(ids)
    return text if prompt else text[1:]
