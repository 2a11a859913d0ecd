"""Generating text from a trained PyTorch GPT: temperature, top-k, one token at a time.

Shapes: prompt str -> ids [1, n] -> logits [1, n, V] -> next id -> ... -> str
"""

from __future__ import annotations

import torch
from torch import nn

from anatomy.data import CharTokenizer
from anatomy.gpt_torch import unwrap


def next_token_probs(logits: torch.Tensor, temperature: float = 1.0,
                     top_k: int | None = None) -> torch.Tensor:
    """Turn the last position's logits into the distribution we sample from.

    Dividing by the temperature sharpens (< 1) or flattens (> 1) the distribution; top-k
    keeps the k likeliest tokens and renormalises, so rare junk never gets drawn.

    Shapes: logits [V] -> probs [V] (float32)
    """
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]          # the k-th largest logit
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.softmax(logits, dim=-1)


@torch.no_grad()
def sample(model: nn.Module, tokenizer: CharTokenizer, prompt: str, n_new: int,
           temperature: float = 1.0, top_k: int | None = None,
           generator: torch.Generator | None = None) -> str:
    """``prompt`` followed by ``n_new`` sampled characters.

    ``temperature=0`` means greedy (always the likeliest character). Draws come from
    ``generator`` (a CPU ``torch.Generator``; seed it for reproducible text) on the CPU, so
    the same seed gives the same text whatever device the model sits on. The context is
    cropped to the model's last ctx tokens. An empty prompt starts from a newline.

    Shapes: ids [1, n] -> logits [1, n, V]; the last row [V] picks the next id
    """
    if temperature < 0:
        raise ValueError(f"temperature: expected >= 0 (0 = greedy), got {temperature}")
    V = tokenizer.vocab_size
    if top_k is not None and not 1 <= top_k <= V:
        raise ValueError(f"top_k: expected an integer in [1, V] = [1, {V}], got {top_k}")
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
            probs = next_token_probs(last, temperature, top_k).cpu()     # [V]
            ids.append(int(torch.multinomial(probs, 1, generator=generator)))
    finally:
        raw.train(was_training)
    text = tokenizer.decode(ids)
    return text if prompt else text[1:]
