"""Chapter 9's expected bands: drawn from the measurements, and wide of every broken run."""

from __future__ import annotations

import dataclasses

import pytest
from _local_data import DATA

from anatomy.train import train
from anatomy.train.bands import (
    BANDS,
    BROKEN,
    CELLS,
    MARGIN,
    MEASURED,
    Band,
    chapter_runs,
    kernel_gap,
    seed_spread,
)


def test_every_chapter_run_has_a_band_measured_on_two_kernel_families():
    assert set(BANDS) == set(MEASURED) == set(BROKEN) == set(chapter_runs())
    for run, measured in MEASURED.items():
        assert len({family for _, family in measured}) == 2, run
        assert len({seed for seed, _ in measured}) >= 2, run
        assert 1337 in {seed for seed, _ in measured}, run          # the chapter's own seed


@pytest.mark.parametrize("run", list(MEASURED))
def test_a_band_holds_every_measured_run_with_the_margin_to_spare(run):
    band = BANDS[run]
    for loss in MEASURED[run].values():
        assert band.lo + MARGIN - 0.01 <= loss <= band.hi - MARGIN + 0.01


@pytest.mark.parametrize("cell", list(CELLS))
def test_every_broken_kind_moves_some_run_of_each_cell_out_of_its_band(cell):
    kinds = set.intersection(*(set(BROKEN[run]) for run in CELLS[cell]))
    assert len(kinds) == 5
    for kind in kinds:
        outside = [run for run in CELLS[cell] if not BANDS[run].holds(BROKEN[run][kind])]
        assert outside, f"{cell}: with {kind} every run stays inside its band"


def test_the_training_runs_band_holds_none_of_its_broken_runs():
    assert not any(BANDS["cpu"].holds(loss) for loss in BROKEN["cpu"].values())


def test_the_kernel_family_moves_a_run_less_than_the_seed_does():
    assert kernel_gap("cpu") < seed_spread("cpu")


def test_the_verdict_line_is_the_same_for_any_healthy_loss():
    band = Band(1.76, 1.83)
    assert band.verdict("val", 1.79) == band.verdict("val", 1.8) == \
        "val inside the expected band [1.76, 1.83]: yes"
    assert band.verdict("val", 2.5) == "val inside the expected band [1.76, 1.83]: NO, it is 2.500"


def test_band_refuses_an_empty_or_reversed_interval():
    with pytest.raises(ValueError, match="expected lo < hi; got lo=2, hi=1"):
        Band(2, 1)
    with pytest.raises(ValueError, match="expected at least one measured loss; got none"):
        Band.around([])


@pytest.mark.slow
def test_a_broken_learning_rate_lands_outside_the_band_when_run_again():
    # the short causal run with a learning rate 30 times too low, trained again here (~15 s)
    cfg = dataclasses.replace(chapter_runs()["short causal"], lr=5e-3 / 30, min_lr=5e-4 / 30)
    loss = train(cfg, progress=False, data_path=DATA, device="cpu").val_loss[-1]
    assert not BANDS["short causal"].holds(loss)
