"""Training the PyTorch GPT on Tiny Shakespeare (chapter 9), one concept per module:

- ``config``       ``TrainConfig``, the presets and ``preset_for(device)``
- ``schedule``     ``lr_at``: warmup, then cosine decay
- ``hardware``     device choice, mixed precision, peak FLOP/s and MFU
- ``distributed``  data parallelism under ``torchrun``
- ``history``      what a run returns: the loss curve and its stats
- ``loop``         ``train()`` itself, evaluation, ``load_trained``
- ``reference``    the measured GPU reference run that chapter 9 shows

From a notebook::

    from anatomy.train import PRESETS, train
    history = train(PRESETS["cpu"], progress=False)
    print(history.table())

From a shell: ``python -m anatomy.train --preset cpu --out runs/cpu`` (see ``--help``).
"""

from anatomy.sampling import sample
from anatomy.train.config import PRESETS, TrainConfig, preset, preset_for
from anatomy.train.hardware import mfu, peak_flops, pick_device
from anatomy.train.history import History
from anatomy.train.loop import estimate_loss, load_trained, seed_everything, train
from anatomy.train.schedule import lr_at

__all__ = [
    "PRESETS", "History", "TrainConfig", "estimate_loss", "load_trained", "lr_at", "mfu",
    "peak_flops", "pick_device", "preset", "preset_for", "sample", "seed_everything",
    "train",
]
