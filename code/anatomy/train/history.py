"""What a training run returns: the loss curve, and (kept apart) how fast it ran.

Losses on the CPU are reproducible to the bit; timings never are. The two live in separate
fields so a notebook can print ``history.table()`` (rounded losses only) and still get its
tokens per second from ``history.stats``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class History:
    """One run's record.

    ``step``, ``train_loss``, ``val_loss``, ``lr``: one entry per evaluation (train and val
    loss are means over ``eval_iters`` fixed batches of each split, in eval mode).
    ``step_loss``: the training loss of every optimizer step, in order.
    ``time_s``: wall-clock seconds since the run started when each evaluation finished
    (everything counted: data, compilation, steps, evaluations, checkpoints; a resumed run
    continues the clock of the work it kept). A timing, so never printed by ``table``.
    ``stats``: run facts that vary from machine to machine (tokens_per_s, wall_s, mfu,
    device, precision, ...); never part of a printed comparison.
    ``model`` and ``tokenizer``: what ``train`` trained, for sampling; not saved with the rest.
    """

    step: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    step_loss: list[float] = field(default_factory=list)
    time_s: list[float] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    model: object = field(default=None, repr=False, compare=False)
    tokenizer: object = field(default=None, repr=False, compare=False)

    def record(self, step: int, train_loss: float, val_loss: float, lr: float,
               time_s: float) -> dict:
        self.time_s.append(time_s)
        self.step.append(step)
        self.train_loss.append(train_loss)
        self.val_loss.append(val_loss)
        self.lr.append(lr)
        return {"step": step, "train_loss": train_loss, "val_loss": val_loss, "lr": lr}

    @property
    def final_val_loss(self) -> float | None:
        return self.val_loss[-1] if self.val_loss else None

    def time_to(self, val_loss: float) -> tuple[int, float] | None:
        """(step, seconds) of the first evaluation whose validation loss was at most
        ``val_loss``, or None if none was. The answer is only as fine as ``eval_every``."""
        for step, loss, t in zip(self.step, self.val_loss, self.time_s, strict=True):
            if loss <= val_loss:
                return step, t
        return None

    def rows(self, digits: int = 3) -> list[tuple[int, float, float]]:
        """(step, train loss, val loss) per evaluation, losses rounded to ``digits``."""
        return [(s, round(tr, digits), round(va, digits))
                for s, tr, va in zip(self.step, self.train_loss, self.val_loss, strict=True)]

    def table(self, digits: int = 3) -> str:
        """The loss curve as aligned text, with no timings in it."""
        lines = [f"{'step':>6}  {'train':>7}  {'val':>7}"]
        lines += [f"{s:>6}  {tr:>7.{digits}f}  {va:>7.{digits}f}"
                  for s, tr, va in self.rows(digits)]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> dict:
        """The record as plain lists and a dict (no model), for a checkpoint."""
        return {"step": list(self.step), "train_loss": list(self.train_loss),
                "val_loss": list(self.val_loss), "lr": list(self.lr),
                "step_loss": list(self.step_loss), "time_s": list(self.time_s),
                "stats": dict(self.stats)}

    @classmethod
    def from_dict(cls, values: dict) -> History:
        if "time_s" not in values:              # checkpoints written before it existed
            values = {**values, "time_s": [0.0] * len(values.get("step", []))}
        return cls(**{k: (dict(v) if k == "stats" else list(v)) for k, v in values.items()})
