"""anatomy.weights: the shipped character model loads with NumPy alone, is what its make
command produces, and gives the same numbers in NumPy and PyTorch.

Tolerances (measured on the shipped weights): NumPy vs PyTorch logits differ by at most
1.8e-5 in float32 on logits up to 12.5 (asserted: 5e-5) and by 3e-14 in float64 (asserted:
1e-10); the NumPy and PyTorch validation losses over all 1742 windows, recorded at make
time, differ by 2e-8 (asserted: 1e-6), and recomputing the NumPy one here gives the recorded
value (asserted: 1e-5, room for another BLAS).
"""

import hashlib
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from _local_data import DATA

from anatomy import weights
from anatomy.gpt_numpy import forward
from anatomy.gpt_torch import from_numpy
from anatomy.params import GPTConfig, count_params, param_shapes
from anatomy.text import SHA256, load_text, split
from anatomy.train import TrainConfig
from anatomy.weights import WeightsError, load, window_loss
from anatomy.weights import make as make_mod

NAME = "shakespeare-char"


@pytest.fixture(scope="module")
def shipped():
    params, cfg, tok = load(NAME)
    return params, cfg, tok, weights.info(NAME)


@pytest.fixture(scope="module")
def val_ids(shipped):
    _, _, tok, _ = shipped
    return np.array(split(tok.encode(load_text(DATA)))[1])


def test_load_gives_the_shape_table_a_config_and_a_tokenizer(shipped):
    params, cfg, tok, meta = shipped
    assert cfg == GPTConfig(V=65, ctx=64, d=128, L=4, h=4, d_ff=512, tied=True)
    assert list(params) == list(param_shapes(cfg))           # names and order of the table
    assert {k: v.shape for k, v in params.items()} == param_shapes(cfg)
    assert all(v.dtype == np.float32 for v in params.values())
    assert sum(v.size for v in params.values()) == count_params(cfg) == meta["n_params"]
    text = "ROMEO:\nBut soft, what light?"
    assert tok.vocab_size == cfg.V and tok.decode(tok.encode(text)) == text
    logits = forward(params, np.array(tok.encode(text)), cfg)
    assert logits.shape == (len(text), cfg.V) and np.isfinite(logits).all()
    assert load(NAME, dtype=np.float64)[0]["tok_emb"].dtype == np.float64


def test_sidecar_describes_the_file_and_the_command(shipped):
    params, cfg, _, meta = shipped
    assert meta["weights"]["sha256"] == weights.file_sha256(weights.FOLDER / f"{NAME}.npz")
    assert meta["weights"]["params_sha256"] == weights.params_digest(params)
    assert meta["data"]["sha256"] == SHA256
    steps = meta["final"]["step"]
    # The recipe in the file is the one the make command runs today.
    assert TrainConfig.from_dict(meta["train_config"]) == make_mod.recipe(steps)
    rec = meta["record"]
    assert meta["command"] == make_mod.command(steps, rec["step"], rec["threads"], NAME)
    # The .npz is written byte for byte from the arrays, so the file's digest is reproducible.
    assert weights.file_sha256(weights.FOLDER / f"{NAME}.npz") == \
        hashlib.sha256(make_mod.npz_bytes(params)).hexdigest()
    assert meta["final"]["val_loss_windows"]["n_windows"] == 111_540 // cfg.ctx


def test_loading_imports_no_torch():
    code = ("import sys\nimport numpy as np\nfrom anatomy.weights import load\n"
            "from anatomy.gpt_numpy import forward\n"
            "params, cfg, tok = load('shakespeare-char')\n"
            "forward(params, np.array(tok.encode('ROMEO:')), cfg)\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_first_steps_of_the_make_command_reproduce_the_record(shipped):
    # Re-runs the recorded prefix of the make command (about 20 s on one free CPU thread).
    _, _, _, meta = shipped
    rec = meta["record"]
    cfg = make_mod.recipe(meta["final"]["step"])
    _, again = make_mod.train_with_record(cfg, rec["step"], data_path=DATA,
                                          threads=rec["threads"], stop_at_record=True)
    assert again["threads"] == rec["threads"]
    verdict = make_mod.compare_record(rec, again)
    here = make_mod.records_match(again, rec)
    assert verdict == ("identical" if here else "close")


def test_compare_record_is_exact_on_the_same_machine_and_loose_elsewhere(shipped):
    rec = shipped[3]["record"]
    assert make_mod.compare_record(rec, dict(rec)) == "identical"
    with pytest.raises(ValueError, match="same machine, torch and threads, but the weights"):
        make_mod.compare_record(rec, {**rec, "params_sha256": "0" * 64})
    elsewhere = {**rec, "processor": "another CPU", "params_sha256": "0" * 64}
    assert make_mod.compare_record(rec, {**elsewhere, "val_loss": rec["val_loss"] + 0.009}) \
        == "close"
    with pytest.raises(ValueError, match=r"val_loss at step 200: .* more than 0.01 apart"):
        make_mod.compare_record(rec, {**elsewhere, "val_loss": rec["val_loss"] + 0.011})
    with pytest.raises(ValueError, match="re-run recorded step 150"):
        make_mod.compare_record(rec, {**rec, "step": 150})


def test_numpy_val_loss_is_the_recorded_one(shipped, val_ids):
    params, cfg, _, meta = shipped
    recorded = meta["final"]["val_loss_windows"]
    got = window_loss(params, val_ids, cfg)
    assert got == pytest.approx(recorded["numpy"], abs=1e-5)
    assert recorded["torch"] == pytest.approx(recorded["numpy"], abs=1e-6)
    assert abs(got - meta["final"]["val_loss"]) < 0.05     # the sampled estimate agrees


@pytest.mark.parametrize("dtype, tol", [(np.float32, 5e-5), (np.float64, 1e-10)])
def test_numpy_logits_equal_pytorch_logits(shipped, val_ids, dtype, tol):
    params, cfg, _, _ = shipped
    params = {k: v.astype(dtype) for k, v in params.items()}
    ids = weights.windows(val_ids, cfg.ctx)[:16]                   # [16, ctx]
    ours = forward(params, ids, cfg)
    with torch.no_grad():
        theirs = from_numpy(params, cfg).eval()(torch.from_numpy(ids)).numpy()
    assert np.abs(ours - theirs).max() < tol


def test_window_loss_is_the_mean_over_windows(shipped, val_ids):
    params, cfg, _, _ = shipped
    rows = weights.windows(val_ids[:5 * cfg.ctx + 7], cfg.ctx)    # the 7 extra are dropped
    assert rows.shape == (5, cfg.ctx)
    each = [window_loss(params, row, cfg) for row in rows]
    assert window_loss(params, rows.reshape(-1), cfg, batch=2) == pytest.approx(np.mean(each))
    with pytest.raises(ValueError, match="at least T = 64"):
        weights.windows(val_ids[:10], cfg.ctx)
    with pytest.raises(ValueError, match="T: expected an integer >= 2"):
        weights.windows(val_ids, 1)


def _copy(tmp_path, *suffixes):
    for suffix in suffixes:
        shutil.copy(weights.FOLDER / f"{NAME}{suffix}", tmp_path / f"{NAME}{suffix}")
    return tmp_path


def test_unknown_name_lists_the_known_ones():
    known = r"known: 'induction', 'shakespeare-char'"
    with pytest.raises(ValueError, match=r"unknown model 'shakespeare'; " + known):
        load("shakespeare")
    assert NAME in weights.names()


def test_altered_weights_are_refused(tmp_path):
    folder = _copy(tmp_path, ".npz", ".json")
    data = bytearray((folder / f"{NAME}.npz").read_bytes())
    data[len(data) // 2] ^= 1                                      # one bit of one weight
    (folder / f"{NAME}.npz").write_bytes(bytes(data))
    with pytest.raises(WeightsError, match="corrupt or altered: SHA-256 expected"):
        load(NAME, folder=folder)


def test_missing_files_are_named(tmp_path):
    folder = _copy(tmp_path, ".npz")
    with pytest.raises(FileNotFoundError, match="sidecar shakespeare-char.json .* is missing"):
        load(NAME, folder=folder)
    (folder / f"{NAME}.npz").unlink()
    _copy(tmp_path, ".json")
    with pytest.raises(FileNotFoundError, match="weights file .*shakespeare-char.npz is missing"):
        load(NAME, folder=folder)


def test_a_garbled_sidecar_is_refused(tmp_path):
    folder = _copy(tmp_path, ".npz", ".json")
    (folder / f"{NAME}.json").write_text("{not json")
    with pytest.raises(WeightsError, match="not a readable sidecar"):
        load(NAME, folder=folder)
    meta = weights.info(NAME)
    del meta["weights"]
    (folder / f"{NAME}.json").write_text(json.dumps(meta))
    with pytest.raises(WeightsError, match="lacks or garbles the field 'weights'"):
        load(NAME, folder=folder)


@pytest.mark.parametrize("change, says", [
    ({"V": 66}, r"does not fit the config in shakespeare-char.json: params\['tok_emb'\]"),
    ({"d": "64"}, r"impossible config: cfg.d: expected a positive integer"),
])
def test_a_sidecar_config_that_does_not_fit_is_refused(tmp_path, change, says):
    folder = _copy(tmp_path, ".npz", ".json")
    meta = weights.info(NAME)
    meta["config"].update(change)
    (folder / f"{NAME}.json").write_text(json.dumps(meta))
    with pytest.raises(WeightsError, match=says):
        load(NAME, folder=folder)


def test_make_refuses_a_record_step_it_cannot_record(capsys):
    with pytest.raises(SystemExit) as err:
        make_mod.main(["--steps", "2000", "--record-step", "75"])
    assert err.value.code == 2
    assert "record_step: expected a multiple of eval_every=50" in capsys.readouterr().err
    with pytest.raises(ValueError, match="below steps=50"):
        make_mod.train_with_record(make_mod.recipe(50), 50)


# ---- the draft model of the inference chapter (speculative decoding) ---------------------


def test_the_draft_model_is_what_its_recipe_makes():
    meta = weights.info(make_mod.DRAFT)
    params, cfg, tok = load(make_mod.DRAFT)
    steps, rec = meta["final"]["step"], meta["record"]
    assert TrainConfig.from_dict(meta["train_config"]) == make_mod.recipe(steps, make_mod.DRAFT)
    assert meta["command"] == make_mod.command(steps, rec["step"], rec["threads"],
                                               make_mod.DRAFT)
    assert "--name shakespeare-char-draft" in meta["command"]
    assert (cfg.L, cfg.d) == (1, 64) and tok.vocab == weights.info(NAME)["vocab"]
    assert meta["weights"]["params_sha256"] == weights.params_digest(params)
    assert weights.file_sha256(weights.FOLDER / f"{make_mod.DRAFT}.npz") == \
        hashlib.sha256(make_mod.npz_bytes(params)).hexdigest()
    # A draft only helps if it is cheaper, and it must still have learned something.
    assert count_params(cfg) * 10 < count_params(load(NAME)[1])
    assert meta["final"]["val_loss_windows"]["numpy"] < 2.0


def test_first_steps_of_the_draft_recipe_reproduce_its_record():
    # Re-runs the draft's recorded prefix (200 steps of a one-block model, about 10 s).
    meta = weights.info(make_mod.DRAFT)
    rec = meta["record"]
    cfg = make_mod.recipe(meta["final"]["step"], make_mod.DRAFT)
    _, again = make_mod.train_with_record(cfg, rec["step"], data_path=DATA,
                                          threads=rec["threads"], stop_at_record=True)
    verdict = make_mod.compare_record(rec, again)
    assert verdict == ("identical" if make_mod.records_match(again, rec) else "close")


def test_the_copy_task_recipe_writes_a_model_that_loads_without_a_tokenizer(tmp_path):
    # A short run of the induction recipe (100 steps, about 5 s): the files load with NumPy
    # alone, with no tokenizer, and the book's forward pass runs them on [T] and [B, T] ids.
    meta = make_mod.make(100, tmp_path, name=make_mod.INDUCTION, record_step=50,
                         echo=lambda *_: None)
    params, cfg, tok = load(make_mod.INDUCTION, folder=tmp_path)
    assert tok is None and meta["vocab"] is None and cfg.attn_only and cfg.L == 2
    assert list(params) == list(param_shapes(cfg))
    ids = np.arange(cfg.ctx) % cfg.V
    assert forward(params, ids, cfg).shape == (cfg.ctx, cfg.V)
    assert forward(params, np.stack([ids, ids[::-1]]), cfg).shape == (2, cfg.ctx, cfg.V)
    assert [row[0] for row in meta["history"]] == [0, 50, 100]
    numpy_halves, torch_halves = meta["final"]["halves"].values()
    assert np.allclose(numpy_halves, torch_halves, atol=1e-4)
    cfg_run = make_mod.recipe(100, make_mod.INDUCTION)
    _, again = make_mod.train_with_record(cfg_run, 50, stop_at_record=True)
    assert make_mod.compare_record(meta["record"], again) == "identical"


def test_the_induction_model_loads_without_a_tokenizer_and_is_what_its_recipe_makes():
    params, cfg, tok = load(make_mod.INDUCTION)
    meta = weights.info(make_mod.INDUCTION)
    assert tok is None and meta["vocab"] is None
    assert cfg == GPTConfig(V=64, ctx=32, d=64, L=2, h=2, attn_only=True)
    assert list(params) == list(param_shapes(cfg))
    assert meta["command"] == make_mod.command(2000, 200, 1, make_mod.INDUCTION)
    assert meta["train_config"] == make_mod.recipe(None, make_mod.INDUCTION).to_dict()
    assert weights.params_digest(params) == meta["weights"]["params_sha256"]
    ids = np.arange(cfg.ctx) % cfg.V
    assert forward(params, ids, cfg).shape == (cfg.ctx, cfg.V)
    assert forward(params, np.stack([ids, ids]), cfg).shape == (2, cfg.ctx, cfg.V)


def test_first_steps_of_the_induction_recipe_reproduce_its_record():
    # Re-runs the recorded prefix (200 steps of a two-block attention-only model, ~5 s).
    meta = weights.info(make_mod.INDUCTION)
    rec = meta["record"]
    cfg = make_mod.recipe(meta["final"]["step"], make_mod.INDUCTION)
    _, again = make_mod.train_with_record(cfg, rec["step"], threads=rec["threads"],
                                          stop_at_record=True)
    verdict = make_mod.compare_record(rec, again)
    assert verdict == ("identical" if make_mod.records_match(again, rec) else "close")


def test_the_induction_model_has_the_circuit_the_chapter_shows():
    # The chapter's claims, on sequences the run never scored: a previous-token head in
    # layer 0, induction heads in layer 1, and the induction pattern lost when, and only
    # when, layer 1's keys stop reading the previous-token head (K-composition).
    from anatomy import interp
    from anatomy.induction import half_losses, repeated_tokens

    params, cfg, _ = load(make_mod.INDUCTION)
    ids = repeated_tokens(7, 128, cfg.ctx, cfg.V)
    first, repeat = half_losses(params, cfg, ids)
    assert abs(first - np.log(cfg.V)) < 0.1 and repeat < 1.0
    scores = interp.induction_scores(params, cfg, 128, cfg.ctx, 7)      # [L, h]
    assert scores[1].min() > 0.5 and scores[0].max() < 0.1
    t = np.arange(1, cfg.ctx)
    prev = interp.attention_patterns(params, ids, cfg)[..., t, t - 1].mean(axis=(1, 3))
    head = (0, int(np.argmax(prev[0])))
    assert prev[head] > 0.4
    q = np.arange(cfg.ctx // 2, cfg.ctx)
    for path, collapses in (("q", False), ("k", True), ("v", False)):
        broken = interp.break_path(params, cfg, ids, head, 1, path)
        score = broken.weights[:, :, q, q - cfg.ctx // 2 + 1].mean()
        assert (score < 0.1) == collapses, (path, score)


def test_the_costliest_head_of_the_induction_model_is_the_predict_answer():
    # Exercise N.2's answer, held to the shipped model on sequences it never scored.
    from anatomy.exercises.induction import WORST_HEAD
    from anatomy.induction import half_masks, repeated_tokens
    from anatomy.interp import ablate_heads

    params, cfg, _ = load(make_mod.INDUCTION)
    ids = repeated_tokens(11, 128, cfg.ctx, cfg.V)
    repeat = half_masks(*ids.shape)[1]
    base = ablate_heads(params, cfg, ids, [], where=repeat)
    cost = {(i, k): ablate_heads(params, cfg, ids, [(i, k)], where=repeat) - base
            for i in range(cfg.L) for k in range(cfg.h)}
    ranked = sorted(cost, key=cost.get, reverse=True)
    assert ranked[0] == WORST_HEAD and cost[ranked[0]] > cost[ranked[1]] + 0.5
