"""The machine side of training: which device, which precision, and how fast is fast.

MFU (model FLOPs utilisation, PaLM appendix B) divides the FLOP/s the model's arithmetic needs
by the card's peak. The peak depends on the card and on the precision, so it comes from a
table keyed by the GPU's name; on an unknown card or a CPU the MFU is ``None`` rather than a
number measured against somebody else's hardware.
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from anatomy.flops import training_flops_per_token
from anatomy.params import GPTConfig

# Dense (no sparsity) tensor-core peak FLOP/s at the precision training uses on that card:
# bf16 from Ampere on, fp16 on the T4 and V100. Keys are words of torch.cuda.get_device_name;
# the first entry whose words all appear wins, so "H100 PCIe" is tried before "H100".
PEAK_FLOPS: dict[tuple[str, ...], float] = {
    ("H100", "PCIe"): 756e12,
    ("H100",): 989e12,
    ("H200",): 989e12,
    ("A100",): 312e12,
    ("L40S",): 362e12,
    ("A10",): 125e12,
    ("L4",): 121e12,
    ("V100",): 125e12,
    ("T4",): 65e12,
}


def pick_device() -> torch.device:
    """CUDA if there is a GPU, else Apple's MPS, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def peak_flops(device: torch.device | str) -> float | None:
    """Peak FLOP/s of ``device`` at its training precision, or None when it is not known."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    words = set(re.split(r"[\s\-_]+", torch.cuda.get_device_name(device)))
    for key, flops in PEAK_FLOPS.items():
        if all(word in words for word in key):
            return flops
    return None


def mfu(tokens_per_s: float, cfg: GPTConfig, device: torch.device | str,
        world_size: int = 1) -> float | None:
    """Fraction of the peak FLOP/s of ``world_size`` cards that the model's arithmetic used.

    The FLOPs per token are chapter 7's training count, 6N + 12 L T d
    (``anatomy.flops.training_flops_per_token`` with n = T = ctx, the dense masked pass).
    """
    peak = peak_flops(device)
    if peak is None or tokens_per_s <= 0:
        return None
    flops_per_token = training_flops_per_token(cfg, cfg.ctx)["total"]
    return flops_per_token * tokens_per_s / (peak * world_size)


@dataclass
class Precision:
    """How the forward pass runs: autocast dtype (None = plain float32) and a grad scaler.

    fp16 has a narrow exponent, so small gradients underflow to zero unless the loss is
    scaled up before backward and the gradients scaled back down (``GradScaler``); bf16 has
    float32's exponent range and needs no scaler.
    """

    device_type: str
    dtype: torch.dtype | None
    scaler: torch.amp.GradScaler

    @property
    def name(self) -> str:
        return "float32" if self.dtype is None else str(self.dtype).removeprefix("torch.")

    def autocast(self):
        """Context for the forward pass (a no-op in float32)."""
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)


def choose_precision(device: torch.device | str) -> Precision:
    """bf16 autocast on CUDA cards of compute capability 8.0 (Ampere) or later, fp16 with a
    GradScaler on older ones (T4, V100), float32 on CPU and MPS.

    The capability decides, not ``torch.cuda.is_bf16_supported()``: a T4 reports bf16 as
    supported, but only through slow emulation.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return Precision(device.type, None, torch.amp.GradScaler("cpu", enabled=False))
    if torch.cuda.get_device_capability(device) >= (8, 0):
        return Precision("cuda", torch.bfloat16, torch.amp.GradScaler("cuda", enabled=False))
    return Precision("cuda", torch.float16, torch.amp.GradScaler("cuda"))


def enable_tf32() -> None:
    """Let float32 matmuls on CUDA use TF32 tensor cores (10-bit mantissa inputs, float32
    accumulation): several times faster, and the autocast region is bf16/fp16 anyway."""
    torch.set_float32_matmul_precision("high")
