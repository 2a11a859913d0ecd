"""The smallest complete language model: four blocks, trained on any short text (chapter 9's
challenge, solved with the library's pieces).

No presets, no schedule, no evaluation, no checkpoints: a tokenizer, a tied four-block GPT,
AdamW and a plain loop over the training loop's own ``train_step`` (in float32). Everything
else the ``train`` loop adds is for long runs on big data; this is what is left without it.

Shapes: text str[n] -> ids [n] -> windows x, y [B, T] -> logits [B, T, V], loss []
"""

from __future__ import annotations

import torch

from anatomy._validate import check_positive_int, validated
from anatomy.data import CharTokenizer, get_batch
from anatomy.gpt_torch import GPT, configure_optimizer
from anatomy.params import GPTConfig
from anatomy.train.hardware import choose_precision
from anatomy.train.step import train_step


def _positive_steps(args: dict, sizes: dict) -> None:
    check_positive_int(args["steps"], "steps")


@validated(where=_positive_steps)
def train_char_lm(text: str, steps: int = 300, T: int = 16, d: int = 32, h: int = 4,
                  B: int = 16, lr: float = 3e-3, seed: int = 0,
                  ) -> tuple[GPT, CharTokenizer, list[float]]:
    """Train a four-block GPT (token and position tables, tied head) to predict the next
    character of ``text``; return ``(model, tokenizer, losses)``.

    The model has ctx = T, width d, h heads and d_ff = 4d; ``losses`` holds the training loss
    of each of the ``steps`` AdamW steps. The model comes back in eval mode. ``seed`` fixes
    the initial weights and the windows, so a call is reproducible.

    Shapes: ids [n] (n > T) -> x, y [B, T] -> logits [B, T, V]
    """
    tokenizer = CharTokenizer(text)
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)       # [n]
    torch.manual_seed(seed)                                            # the initial weights
    cfg = GPTConfig(V=tokenizer.vocab_size, ctx=T, d=d, L=4, h=h, d_ff=4 * d, tied=True)
    model = GPT(cfg)
    optimizer = configure_optimizer(model, lr)
    precision = choose_precision("cpu", "float32")     # no autocast; the scaler is off
    windows = torch.Generator().manual_seed(seed)                      # the batches
    losses = []
    for _ in range(steps):
        x, y = get_batch(ids, B, T, windows)        # [B, T] each; y is x shifted by one
        # forward, backward, clip to norm 1, AdamW step, zero the gradients
        loss, _ = train_step(model, x, y, optimizer, precision, grad_clip=1.0)
        losses.append(loss.item())
    return model.eval(), tokenizer, losses
