"""anatomy.train.budget: the arithmetic of a run, evaluations included."""

import dataclasses

from _local_data import DATA

from anatomy.flops import forward_flops_per_token, training_flops_per_token
from anatomy.train import PRESETS, train
from anatomy.train.budget import evaluations, run_flops


def test_the_gpu_presets_evaluations_cost_56_percent_more():
    g = PRESETS["gpu"]
    assert evaluations(g) == 21                         # steps 0, 250, ..., 5000
    cost = run_flops(g, 65)
    assert cost["eval_in_steps"] == 21 * 2 * 200 // 3 == 2800
    assert cost["eval"] * 100 == cost["train"] * 56
    model = g.model_config(65)
    assert cost["train"] == 5000 * 64 * 256 * training_flops_per_token(model, 256)["total"]
    assert cost["eval"] == 21 * 2 * 200 * 64 * 256 * forward_flops_per_token(model,
                                                                             256)["total"]


def test_evaluations_counts_what_train_does():
    for max_steps, every in ((60, 20), (10, 4), (7, 10)):
        cfg = dataclasses.replace(PRESETS["tiny"], max_steps=max_steps, eval_every=every,
                                  eval_iters=1)
        rows = []
        train(cfg, progress=False, device="cpu", log=rows.append, data_path=DATA)
        assert evaluations(cfg) == len(rows), (max_steps, every, rows)
