"""Where chapter 9's live training runs must land on any CPU: a band per run, measured.

A run's exact losses are a property of the machine: another CPU's kernels add in another
order, and two thousand steps of training carry that rounding into the third decimal (and
into every sampled character after it). What does not depend on the machine is where the
run ends up. ``MEASURED`` holds the final validation losses that ``bench/training_band.py``
printed for each run the chapter trains: several seeds (1337 is the chapter's) under two
kernel families of one CPU, its own (AVX-512) and AVX2 kernels forced with
``.ci/kernels.py``. A band is the measured range widened by ``MARGIN`` on each side.
``BROKEN`` holds the same script's runs with training broken on purpose (a learning rate ten
times too high or thirty times too low, the causal mask flipped, the optimizer frozen, weight
decay a hundred times too strong). In every compared cell of the chapter at least one run
of each broken kind lies outside its band, which tests/test_bands.py asserts, so the cell's
lines ("inside the band: yes") change when its training breaks.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from anatomy.train.config import PRESETS, TrainConfig

# Nats beyond the measured range, on each side: three times the largest gap that the kernel
# family alone made (0.0066, seed 2 of the cpu run).
MARGIN = 0.02


def chapter_runs() -> dict[str, TrainConfig]:
    """The runs chapter 9 trains live: the `cpu` preset, and the `tiny` model for 800 steps
    with and without the causal mask (the chapter's mask experiment)."""
    short = dataclasses.replace(PRESETS["tiny"], B=32, lr=5e-3, min_lr=5e-4, max_steps=800,
                                eval_every=100)
    return {"cpu": PRESETS["cpu"], "short causal": short,
            "short no mask": dataclasses.replace(short, causal=False)}


# run -> {(seed, torch kernel family): final val loss}, as bench/training_band.py printed them
# (2026-12-01, an AMD EPYC with AVX-512, one thread; AVX2 with .ci/kernels.py run).
MEASURED: dict[str, dict[tuple[int, str], float]] = {
    "cpu": {(1337, "AVX512"): 1.7939, (1, "AVX512"): 1.8002, (2, "AVX512"): 1.7884,
            (3, "AVX512"): 1.7998, (1337, "AVX2"): 1.7950, (1, "AVX2"): 1.7999,
            (2, "AVX2"): 1.7818, (3, "AVX2"): 1.7998},
    "short causal": {(1337, "AVX512"): 2.1879, (1, "AVX512"): 2.1246, (2, "AVX512"): 2.1444,
                     (3, "AVX512"): 2.1558, (1337, "AVX2"): 2.1879, (1, "AVX2"): 2.1246,
                     (2, "AVX2"): 2.1444, (3, "AVX2"): 2.1552},
    "short no mask": {(1337, "AVX512"): 0.1002, (1, "AVX512"): 0.0943, (2, "AVX512"): 0.0937,
                      (3, "AVX512"): 0.2728, (1337, "AVX2"): 0.1002, (1, "AVX2"): 0.0943,
                      (2, "AVX2"): 0.0938, (3, "AVX2"): 0.2730},
}

# run -> {what was broken: final val loss}: the same script with --broken (seed 1337, AVX-512).
# "mask flipped" removes the causal mask, or adds it to the run that has none.
BROKEN: dict[str, dict[str, float]] = {
    "cpu": {"lr x10": 1.7475, "lr / 30": 2.4960, "mask flipped": 0.0351,
            "optimizer frozen (lr 1e-9)": 4.1789, "weight decay x100": 2.3694},
    "short causal": {"lr x10": 2.4395, "lr / 30": 2.9848, "mask flipped": 0.1002,
                     "optimizer frozen (lr 1e-9)": 4.1758, "weight decay x100": 2.5940},
    "short no mask": {"lr x10": 0.0926, "lr / 30": 2.9743, "mask flipped": 2.1879,
                      "optimizer frozen (lr 1e-9)": 4.1764, "weight decay x100": 2.5776},
}

# The chapter's compared cells and the runs whose bands each one prints. The mask experiment
# trains both of its runs from one config, so a broken config breaks both: the unmasked run
# with lr x10 still lands in its own band (it copies the answer either way), the causal one
# does not, and the cell's lines change.
CELLS: dict[str, tuple[str, ...]] = {"training run": ("cpu",),
                                     "mask experiment": ("short causal", "short no mask")}


@dataclass(frozen=True)
class Band:
    """A closed interval of final validation losses, in nats."""

    lo: float
    hi: float

    def __post_init__(self):
        if not self.lo < self.hi:
            raise ValueError(f"Band: expected lo < hi; got lo={self.lo}, hi={self.hi}")

    @classmethod
    def around(cls, losses) -> Band:
        """The range of ``losses`` widened by MARGIN on each side, to two decimals outward."""
        losses = list(losses)
        if not losses:
            raise ValueError("Band.around: expected at least one measured loss; got none")
        lo, hi = max(0.0, min(losses) - MARGIN), max(losses) + MARGIN
        return cls(math.floor(lo * 100) / 100, math.ceil(hi * 100) / 100)

    def holds(self, loss: float) -> bool:
        return self.lo <= loss <= self.hi

    def verdict(self, what: str, loss: float) -> str:
        """One line that is the same on every machine while the run is healthy."""
        answer = "yes" if self.holds(loss) else f"NO, it is {loss:.3f}"
        return f"{what} inside the expected band [{self.lo:.2f}, {self.hi:.2f}]: {answer}"


def kernel_gap(run: str, seed: int = 1337) -> float:
    """How far apart the two kernel families left one seed's final loss."""
    by_family = [v for (s, _), v in MEASURED[run].items() if s == seed]
    return max(by_family) - min(by_family)


def seed_spread(run: str) -> float:
    """The range of the final loss over the measured seeds (on either kernel family)."""
    values = MEASURED[run].values()
    return max(values) - min(values)


BANDS: dict[str, Band] = {run: Band.around(m.values()) for run, m in MEASURED.items() if m}
