"""anatomy.train.reference and bench/gpu_reference.py: the stored reference run."""

import dataclasses
import importlib.util
import json

import pytest
from _local_data import DATA, ROOT

from anatomy.train import PRESETS, History, train
from anatomy.train.hardware import describe_device
from anatomy.train.reference import (
    REFERENCE_FILE,
    describe,
    history_of,
    load_reference,
    record_run,
    save_record,
)

QUICK = dataclasses.replace(PRESETS["tiny"], max_steps=12, eval_every=4, eval_iters=2)


@pytest.fixture(scope="module")
def record():
    history = train(QUICK, progress=False, data_path=DATA, device="cpu")
    return record_run(history, QUICK, describe_device("cpu"), "2026-11-29", target=3.8,
                      sample="ROMEO:")


def _bench():
    spec = importlib.util.spec_from_file_location("gpu_reference",
                                                  ROOT / "bench" / "gpu_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_record_round_trips_and_tells_its_figures(record, tmp_path):
    path = save_record(record, tmp_path / "run.json")
    assert load_reference(path) == record
    assert [row[0] for row in record["curve"]] == [0, 4, 8, 12]
    step, seconds = record["step_at_target"], record["time_to_target_s"]
    val = {row[0]: row[2] for row in record["curve"]}
    assert val[step] <= 3.8 and all(v > 3.8 for s, v in val.items() if s < step)
    text = " ".join(describe(record).split())        # wrapped at 78 columns
    assert f"step {step:,}: {seconds:.0f} s after the start" in text
    assert f"{step * record['ms_per_step'] / 1e3:.0f} s of training steps" in text
    assert "and 3 evaluations included" in text                  # steps 0, 4 and 8
    assert f"validation {record['final_val_loss']:.3f}" in text
    assert "MFU" not in text                     # a CPU has no peak, so no MFU is claimed
    assert history_of(record).val_loss == [row[2] for row in record["curve"]]
    assert isinstance(history_of(record), History)


def test_the_chapter_can_draw_a_stored_curve(record):
    import matplotlib.pyplot as plt

    from anatomy.viz.training import draw_loss_curves

    fig = draw_loss_curves({"measured": history_of(record)}, V=65, title="stored")
    assert fig.axes and fig.axes[0].get_title() == "stored"
    plt.close(fig)


def test_a_target_never_reached_is_said_so(record):
    never = {**record, "time_to_target_s": None, "step_at_target": None}
    assert "never reached 3.8" in describe(never)


def test_no_file_means_not_measured(tmp_path):
    assert load_reference(tmp_path / "none.json") is None
    assert "No GPU run has been measured" in describe(None)


def test_chapter_9_shows_what_the_book_file_holds():
    # Absent until a GPU run is measured; either way the recorded chapter must tell the
    # file's state (a record added without `make record` fails here, not only in nbval).
    stored = load_reference()
    if stored is not None:
        assert stored["hardware"]["type"] == "cuda" and stored["config"]["name"] == "gpu"
        assert stored["mfu"] is not None
    notebook = json.loads((ROOT / "chapters" / "09_training.ipynb").read_text())
    cells = [c for c in notebook["cells"]
             if c["cell_type"] == "code" and "load_reference()" in "".join(c["source"])]
    assert len(cells) == 1
    printed = "".join("".join(o.get("text", "")) for o in cells[0]["outputs"]
                      if o.get("name") == "stdout")
    assert printed == describe(stored) + "\n"


@pytest.mark.parametrize("change, message", [
    ({"schema": 2}, "schema 2"),
    ({"mfu": "high"}, "field 'mfu' should be float, got 'high'"),
    ({"compiled": 1}, "field 'compiled' should be bool"),
    ({"wall_s": True}, "field 'wall_s' should be float, got True"),
    ({"curve": [[0, 4.2, 4.2]]}, r"\[step, train, val, seconds\]"),
    ({"config": {"L": 0}}, "TrainConfig.L: expected a positive integer"),
])
def test_bad_records_are_named(record, tmp_path, change, message):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({**record, **change}))
    with pytest.raises(ValueError, match=message):
        load_reference(path)


def test_damaged_files_are_errors_not_absences(record, tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(record)[:200])
    with pytest.raises(ValueError, match="not a reference-run record"):
        load_reference(path)
    path.write_text(json.dumps({k: v for k, v in record.items() if k != "sample"}))
    with pytest.raises(ValueError, match="lacks sample"):
        load_reference(path)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object, got list"):
        load_reference(path)


def test_bench_script_writes_a_record_and_guards_the_book_file(tmp_path, capsys):
    bench = _bench()
    out = tmp_path / "trial.json"
    assert bench.main(["--preset", "tiny", "--device", "cpu", "--data", str(DATA),
                       "--max-steps", "20", "--target", "3.5", "--json", str(out),
                       "--no-progress"]) == 0
    saved = load_reference(out)
    assert saved["config"]["max_steps"] == 20 and saved["hardware"]["type"] == "cpu"
    assert saved["sample"].startswith("\n") and len(saved["sample"]) == 501
    assert describe(saved) in capsys.readouterr().out
    before = REFERENCE_FILE.exists()
    with pytest.raises(SystemExit, match="reference run is a GPU run"):
        bench.main(["--preset", "tiny", "--device", "cpu", "--data", str(DATA)])
    assert REFERENCE_FILE.exists() == before                  # the book's file untouched
