"""anatomy.train.watch: the probe records the pre-clip norms and changes nothing."""

import dataclasses

import pytest
import torch
from _local_data import DATA

from anatomy.data import CharTokenizer, load_text
from anatomy.exercises import registry
from anatomy.params import GPTConfig
from anatomy.train import PRESETS, loop, train
from anatomy.train.step import train_step
from anatomy.train.watch import clipped_share, matrix_moves, watch_grad_norms

QUICK = dataclasses.replace(PRESETS["tiny"], max_steps=6, eval_every=3, eval_iters=1)


def test_watching_records_one_norm_per_step_and_leaves_the_run_alone():
    plain = train(QUICK, progress=False, data_path=DATA, device="cpu")
    step = loop.train_step
    with watch_grad_norms() as norms:
        watched = train(QUICK, progress=False, data_path=DATA, device="cpu")
    assert loop.train_step is step                       # restored on exit
    assert len(norms) == QUICK.max_steps and all(n > 0 for n in norms)
    assert watched.step_loss == plain.step_loss
    pairs = zip(watched.model.state_dict().values(), plain.model.state_dict().values(),
                strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)


def test_clipped_share_counts_norms_above_the_threshold():
    norms = [0.5, 1.0, 1.5, 2.0]
    assert clipped_share(norms, 1.0) == 0.5              # 1.0 itself is not scaled down
    assert clipped_share(norms, 1.0, start=2) == 1.0
    assert clipped_share(norms, 1.0, stop=2) == 0.0
    with pytest.raises(ValueError, match="no steps"):
        clipped_share(norms, 1.0, start=4)


def test_matrix_moves_compare_steps_alone_and_see_the_clip_before_unscale_bug():
    text = load_text(DATA)[:20_000]
    ids = torch.tensor(CharTokenizer(text).encode(text))
    cfg = GPTConfig(V=len(set(text)), ctx=16, d=32, L=1, h=2)
    ours = matrix_moves(train_step, cfg, ids, 8, 16, n_steps=3)
    assert ours == matrix_moves(train_step, cfg, ids, 8, 16, n_steps=3)   # same weights, batches
    assert all(m > 0 for m in ours)
    bug = matrix_moves(registry()["9.6"].given, cfg, ids, 8, 16, n_steps=3)
    assert all(b < o for b, o in zip(bug, ours, strict=True))   # 1/S reaches AdamW's eps
    no_scaler = matrix_moves(registry()["9.6"].given, cfg, ids, 8, 16, n_steps=3,
                             float16_scaler=False)
    assert no_scaler == pytest.approx(ours, rel=1e-5)   # S = 1: the order does not matter
