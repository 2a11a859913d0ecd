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


DEVICE_TYPES = ("cpu", "cuda", "mps")


def resolve_device(device: torch.device | str | None, name: str = "device") -> torch.device:
    """``device`` as a ``torch.device`` this machine can train on (None: ``pick_device()``).

    Raises ``ValueError`` (its message starting with ``name``) saying what to do instead for
    a name torch does not know, a kind other than cpu, cuda (cuda:N) or mps, and a GPU this
    machine does not have, instead of torch's own error at the first tensor moved there.
    """
    if device is None:
        return pick_device()
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{name}: expected one of cpu, cuda, cuda:N or mps, got "
                         f"{device!r}") from None
    if device.type not in DEVICE_TYPES:
        raise ValueError(f"{name}: expected one of cpu, cuda, cuda:N or mps, got "
                         f"{str(device)!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = ("this torch was built without CUDA" if torch.version.cuda is None
                   else "no CUDA GPU is visible")
            raise ValueError(f"{name} {str(device)!r}: CUDA is not available here ({why}); "
                             f"use 'cpu', or leave the device out to take the best available")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(f"{name} {str(device)!r}: this machine has {count} CUDA "
                             f"device(s), numbered 0 to {count - 1}")
    if device.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError(f"{name} 'mps': Apple's MPS is not available here; use 'cpu', "
                             f"or leave the device out to take the best available")
    return device


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


PRECISIONS = ("auto", "float32", "bfloat16", "float16")


def choose_precision(device: torch.device | str, requested: str = "auto") -> Precision:
    """The precision of a run on ``device``.

    ``"auto"``: bf16 autocast on CUDA cards of compute capability 8.0 (Ampere) or later, fp16
    with a GradScaler on older ones (T4, V100), float32 on CPU and MPS. The capability
    decides, not ``torch.cuda.is_bf16_supported()``: a T4 reports bf16 as supported, but only
    through slow emulation.

    ``"float32"``, ``"bfloat16"`` or ``"float16"`` ask for one explicitly: float32 to rule
    mixed precision out when a run misbehaves, and either 16-bit format on a CPU, where
    autocast works too, so the fp16 machinery can be tried without a GPU (its speed there,
    against float32, is not measured here). bfloat16 on a card older than 8.0 and 16-bit
    autocast on MPS are refused.
    """
    device = torch.device(device)
    if requested not in PRECISIONS:
        raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, got "
                         f"{requested!r}")
    if requested == "auto":
        if device.type != "cuda":
            requested = "float32"
        elif torch.cuda.get_device_capability(device) >= (8, 0):
            requested = "bfloat16"
        else:
            requested = "float16"
    kind = "cuda" if device.type == "cuda" else "cpu"      # the GradScaler's device kind
    if requested == "float32":
        return Precision(device.type, None, torch.amp.GradScaler(kind, enabled=False))
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"precision {requested!r}: 16-bit autocast is supported here on "
                         f"CUDA and the CPU, not on {device.type!r}; use 'float32' or 'auto'")
    if requested == "bfloat16":
        if device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 0):
            major, minor = torch.cuda.get_device_capability(device)
            raise ValueError(f"precision 'bfloat16' needs compute capability 8.0 or later; "
                             f"{torch.cuda.get_device_name(device)} is {major}.{minor}, so "
                             f"use 'float16' (with a grad scaler) or 'auto'")
        return Precision(device.type, torch.bfloat16, torch.amp.GradScaler(kind, enabled=False))
    return Precision(device.type, torch.float16, torch.amp.GradScaler(kind))


def enable_tf32() -> None:
    """Let float32 matmuls on CUDA use TF32 tensor cores (10-bit mantissa inputs, float32
    accumulation): several times faster, and the autocast region is bf16/fp16 anyway."""
    torch.set_float32_matmul_precision("high")


def describe_device(device: torch.device | str) -> dict:
    """The facts a timing needs beside it: the device's name and, on CUDA, its compute
    capability, memory, and the CUDA build of torch."""
    device = torch.device(device)
    facts = {"type": device.type, "torch": torch.__version__}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts.update(name=props.name, compute_capability=f"{props.major}.{props.minor}",
                     memory_gib=round(props.total_memory / 2**30, 1),
                     multiprocessors=props.multi_processor_count, cuda=torch.version.cuda,
                     peak_flops=peak_flops(device))
    else:
        facts.update(name=device.type, threads=torch.get_num_threads())
    return facts
