"""What one training run does, as a frozen dataclass, and named presets sized per device.

The model letters are the book's (L, h, d, T, B); V comes from the data. Every preset is a
complete ``TrainConfig``; change one field with ``dataclasses.replace(PRESETS["cpu"], L=4)``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

import torch

from anatomy._validate import check_divisible
from anatomy.params import GPTConfig
from anatomy.train.hardware import PRECISIONS


@dataclass(frozen=True)
class TrainConfig:
    """Model shape, optimiser, schedule, evaluation and checkpoint cadence of one run.

    Model: ``L`` blocks of width ``d`` with ``h`` heads, context ``T`` (= ctx), MLP width
    4d (no MLP at all with ``attn_only=True``), tied head unless ``tied=False``;
    ``dropout``, ``attn`` and ``causal`` go to ``GPT``.
    Batches: ``B`` windows of ``T`` tokens per step, the *global* batch (under torchrun each
    of N processes takes B/N rows of it).
    Schedule: linear warmup over ``warmup_steps`` to ``lr``, cosine decay to ``min_lr`` at
    ``max_steps``. AdamW with ``betas`` and ``weight_decay`` (matrices only), gradient
    norm clipped to ``grad_clip``.
    Evaluation: every ``eval_every`` steps, the mean loss over ``eval_iters`` batches of each
    split. Checkpoints every ``ckpt_every`` steps (and at the end) when there is an out dir.
    ``compile``: None means on for CUDA, off elsewhere. ``precision``: "auto" (bf16 or fp16
    autocast on a GPU, as the card allows; float32 elsewhere) or one of "float32",
    "bfloat16", "float16" (see ``anatomy.train.hardware.choose_precision``).

    Shapes: batches x, y [B, T]; model ids [B, T] -> logits [B, T, V]
    """

    name: str = "custom"
    L: int = 2
    h: int = 4
    d: int = 64
    T: int = 64
    tied: bool = True
    dropout: float = 0.0
    attn: str = "sdpa"
    causal: bool = True
    B: int = 32
    max_steps: int = 500
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 50
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.99)
    grad_clip: float = 1.0
    eval_every: int = 100
    eval_iters: int = 20
    ckpt_every: int = 100
    seed: int = 1337
    compile: bool | None = None
    precision: str = "auto"
    attn_only: bool = False

    def __post_init__(self):
        for name in ("L", "h", "d", "T", "B", "max_steps", "eval_every", "eval_iters",
                     "ckpt_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name}: expected a positive integer, got "
                                 f"{value!r}")
        check_divisible("TrainConfig", self.d, self.h)
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) \
                or self.warmup_steps < 0:
            raise ValueError(f"TrainConfig.warmup_steps: expected an integer >= 0, got "
                             f"{self.warmup_steps!r}")
        if not 0 < self.min_lr <= self.lr:
            raise ValueError(f"TrainConfig: expected 0 < min_lr <= lr, got min_lr="
                             f"{self.min_lr}, lr={self.lr}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"TrainConfig.dropout: expected a probability in [0, 1), got "
                             f"{self.dropout}")
        if self.attn not in ("sdpa", "explicit"):
            raise ValueError(f"TrainConfig.attn: expected 'sdpa' or 'explicit', got "
                             f"{self.attn!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"TrainConfig.precision: expected one of {', '.join(PRECISIONS)}, "
                             f"got {self.precision!r}")
        if not isinstance(self.attn_only, bool):
            raise ValueError(f"TrainConfig.attn_only: expected True or False, got "
                             f"{self.attn_only!r}")
        if len(self.betas) != 2:
            raise ValueError(f"TrainConfig.betas: expected two numbers, got {self.betas!r}")
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))

    @property
    def tokens_per_step(self) -> int:
        """B x T tokens of the global batch."""
        return self.B * self.T

    def model_config(self, V: int) -> GPTConfig:
        """The ``GPTConfig`` of this run's model for a vocabulary of V tokens."""
        return GPTConfig(V=V, ctx=self.T, d=self.d, L=self.L, h=self.h, d_ff=4 * self.d,
                         tied=self.tied, attn_only=self.attn_only)

    def to_dict(self) -> dict:
        """Plain types only, so a checkpoint loads with ``weights_only=True``."""
        out = dataclasses.asdict(self)
        out["betas"] = list(self.betas)
        return out

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"TrainConfig: unknown field {unknown[0]!r} (known: "
                             f"{', '.join(sorted(known))})")
        values = dict(values)
        if "betas" in values:
            values["betas"] = tuple(values["betas"])
        return cls(**values)


PRESETS: dict[str, TrainConfig] = {
    # A few seconds: smoke tests, CI and the resume / torchrun tests.
    "tiny": TrainConfig(name="tiny", L=1, h=2, d=32, T=32, B=8, max_steps=60, lr=3e-3,
                        min_lr=3e-4, warmup_steps=5, eval_every=20, eval_iters=4,
                        ckpt_every=20),
    # About a minute on two CPU cores (the model is chapter 7's toy, 108,352 parameters):
    # what the chapter and CI run.
    "cpu": TrainConfig(name="cpu", L=2, h=4, d=64, T=64, B=32, max_steps=2000, lr=3e-3,
                       min_lr=3e-4, warmup_steps=50, eval_every=250, eval_iters=20,
                       ckpt_every=500),
    # A few minutes on CPU (or a laptop GPU): deeper and wider, visibly better samples.
    "cpu-long": TrainConfig(name="cpu-long", L=4, h=4, d=128, T=64, B=32, max_steps=2000,
                            lr=2e-3, min_lr=2e-4, warmup_steps=100, eval_every=250,
                            eval_iters=20, ckpt_every=500),
    # The well-known baby GPT (10.7M parameters) on a modern GPU; nanoGPT reports a best val
    # loss of about 1.47 over the 5,000 steps of this setting.
    "gpu": TrainConfig(name="gpu", L=6, h=6, d=384, T=256, B=64, dropout=0.2, max_steps=5000,
                       lr=1e-3, min_lr=1e-4, warmup_steps=100, eval_every=250,
                       eval_iters=200, ckpt_every=500),
    # The same model, half the steps, for Colab's free T4 (fp16 with a grad scaler). Sized
    # from the FLOP count for about 10 minutes; not yet timed on a real T4.
    "colab-t4": TrainConfig(name="colab-t4", L=6, h=6, d=384, T=256, B=64, dropout=0.2,
                            max_steps=2500, lr=1e-3, min_lr=1e-4, warmup_steps=100,
                            eval_every=250, eval_iters=50, ckpt_every=500),
}


def preset(name: str) -> TrainConfig:
    """The preset called ``name``, with a helpful error for a typo."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"preset: unknown name {name!r}; choose one of "
                         f"{', '.join(PRESETS)}") from None


def preset_for(device: torch.device | str) -> TrainConfig:
    """The preset sized for ``device``: a T4 gets ``colab-t4``, other CUDA cards ``gpu``,
    Apple MPS ``cpu-long``, a CPU ``cpu``."""
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return PRESETS["colab-t4" if "T4" in name.replace("-", " ").split() else "gpu"]
    if device.type == "mps":
        return PRESETS["cpu-long"]
    return PRESETS["cpu"]
