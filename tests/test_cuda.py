"""The GPU side of chapter 9, on a real CUDA card: skipped where there is none (as in CI).

What the CPU tests cannot show: bf16 autocast and TF32 on the card, fp16 with a live grad
scaler, ``torch.compile`` by default, SDPA's fused kernels against the explicit attention,
the peak FLOP/s looked up for the actual card, and a resume on the GPU. Run them with
``python -m pytest tests/test_cuda.py`` on a GPU machine (``bench/gpu_reference.py`` names
the command that runs them before the reference run).
"""

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch
from _local_data import DATA

from anatomy.data import load_text, split
from anatomy.gpt_torch import GPT
from anatomy.params import GPTConfig
from anatomy.sampling import sample
from anatomy.train import PRESETS, mfu, peak_flops, train
from anatomy.train.hardware import choose_precision, describe_device
from anatomy.viz.training import loss_by_position, next_char_probs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

QUICK = dataclasses.replace(PRESETS["tiny"], max_steps=40, eval_every=20, eval_iters=4)


def test_the_card_is_known_and_described():
    facts = describe_device("cuda")
    assert facts["name"] == torch.cuda.get_device_name()
    assert facts["memory_gib"] > 1 and facts["cuda"]
    major = torch.cuda.get_device_capability()[0]
    expected = "bfloat16" if major >= 8 else "float16"
    assert choose_precision("cuda").name == expected
    if any(card in facts["name"] for card in ("H100", "H200", "A100")):
        assert peak_flops("cuda") is not None


def test_sdpa_kernels_agree_with_the_explicit_attention_on_the_card():
    torch.backends.cuda.matmul.allow_tf32 = False          # compare float32 with float32
    cfg = GPTConfig(V=65, ctx=128, d=128, L=2, h=4, d_ff=512)
    torch.manual_seed(0)
    sdpa = GPT(cfg, attn="sdpa").cuda()
    explicit = GPT(cfg, attn="explicit").cuda()
    explicit.load_state_dict(sdpa.state_dict())
    ids = torch.randint(0, 65, (4, 128), device="cuda")
    a, b = sdpa(ids), explicit(ids)
    assert (a - b).abs().max().item() <= 1e-4 * max(1.0, a.abs().max().item())
    with torch.autocast("cuda", dtype=torch.bfloat16):       # the flash kernel's dtype
        c = sdpa(ids).float()
    assert (c - a).abs().max().item() < 0.1 * max(1.0, a.abs().max().item())


@pytest.mark.parametrize("precision", ["auto", "float16", "float32"])
def test_each_precision_trains_on_the_card(precision):
    history = train(dataclasses.replace(QUICK, precision=precision), progress=False,
                    data_path=DATA, device="cuda")
    s = history.stats
    assert s["device"].startswith("cuda") and s["compiled"]        # compile is on for CUDA
    assert all(math.isfinite(v) for v in history.step_loss)
    assert history.val_loss[-1] < history.val_loss[0] - 0.3
    assert s["tokens_per_s"] > 0
    if peak_flops("cuda") is not None:
        assert 0 < s["mfu"] < 1
        assert s["mfu"] == pytest.approx(mfu(s["tokens_per_s"], QUICK.model_config(65), "cuda"))


def test_a_resumed_gpu_run_follows_the_whole_one(tmp_path):
    # Not bit-identical on a GPU (some kernels add in a varying order), but close.
    cfg = dataclasses.replace(QUICK, dropout=0.1, ckpt_every=20, compile=False)

    def cut_at_20(row):
        if row["step"] == 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path, progress=False, log=cut_at_20, data_path=DATA, device="cuda")
    resumed = train(None, tmp_path, resume=True, progress=False, data_path=DATA,
                    device="cuda")
    whole = train(cfg, progress=False, data_path=DATA, device="cuda")
    np.testing.assert_allclose(resumed.step_loss, whole.step_loss, rtol=2e-2)
    np.testing.assert_allclose(resumed.val_loss, whole.val_loss, rtol=2e-2)


def test_chapter_9_helpers_follow_a_model_trained_on_the_card():
    # In Colab with a GPU runtime, chapter 9's runs train on the card and its figures and
    # samples are then drawn from that model: the helpers must move their inputs to it.
    history = train(dataclasses.replace(QUICK, compile=False), progress=False,
                    data_path=DATA, device="cuda")
    on_card, tok = history.model, history.tokenizer
    on_cpu = copy.deepcopy(on_card).cpu()
    val_ids = split(torch.tensor(tok.encode(load_text(DATA))))[1]
    np.testing.assert_allclose(loss_by_position(on_card, val_ids, QUICK.T),
                               loss_by_position(on_cpu, val_ids, QUICK.T), atol=1e-2)
    np.testing.assert_allclose(next_char_probs(on_card, tok, "ROMEO:"),
                               next_char_probs(on_cpu, tok, "ROMEO:"), atol=1e-3)
    text = sample(on_card, tok, "ROMEO:", 40, 0.8, generator=torch.Generator().manual_seed(0))
    assert text.startswith("ROMEO:") and len(text) == 46
