"""anatomy.hf: the GPT-2 demo says one line and returns None offline; its comparison runs on
a small randomly initialised GPT2LMHeadModel (no download) with a byte-level tokenizer."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from anatomy import hf
from anatomy.gpt_numpy import forward, lm_loss
from anatomy.params import GPTConfig, init_params
from anatomy.weights import load, window_loss


class ByteTokenizer:
    """A stand-in for GPT-2's tokenizer: one token per byte (V = 256)."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


def _tiny_gpt2(seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=256, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():                  # larger weights, so logits are of order 1-10
        for p in model.parameters():
            if p.ndim == 2:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
    return model


TEXT = ("ROMEO:\nBut soft, what light through yonder window breaks?\nIt is the east, and "
        "Juliet is the sun.\n")


def test_compare_with_a_small_random_gpt2():
    model = _tiny_gpt2()
    got = hf.compare_with_hf(model, ByteTokenizer(), prompt="ROMEO:", n_new=5, text=TEXT)
    assert got["cfg"] == GPTConfig(V=256, ctx=32, d=32, L=2, h=4, d_ff=128, tied=True)
    assert got["max_abs_diff"] < 1e-4 and got["same_argmax"]
    prompt = torch.tensor([ByteTokenizer().encode("ROMEO:")])
    with torch.no_grad():            # Hugging Face's own greedy decoding, token for token
        theirs = model.generate(prompt, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert got["continuation"] == ByteTokenizer().decode(theirs[0, 6:].tolist())
    bpc = got["bits_per_char"]
    assert got["n_chars"] == len(TEXT) and set(bpc) == {"gpt2", "shakespeare-char"}
    # A random byte model is about as unsure as a uniform guess over 256 bytes (8 bits);
    # the trained character model is far surer.
    assert 5 < bpc["gpt2"] < 12 and bpc["shakespeare-char"] < 3.5
    params, cfg, tok = load("shakespeare-char")
    whole = window_loss(params, np.array(tok.encode(TEXT[:64])), cfg)    # one full window
    assert hf.compare_with_hf(model, ByteTokenizer(), text=TEXT[:64])["bits_per_char"][
        "shakespeare-char"] == pytest.approx(whole / math.log(2), rel=1e-6)


def test_total_nats_predicts_every_id_but_the_first_once():
    cfg = GPTConfig(V=7, ctx=5, d=8, L=1, h=2)
    params = init_params(cfg, 0)
    ids = np.random.default_rng(0).integers(0, cfg.V, size=23)
    # By hand: id t (t >= 1) is predicted inside the window starting at
    # ((t - 1) // (ctx - 1)) * (ctx - 1), from the ids of that window before it.
    want = 0.0
    for t in range(1, len(ids)):
        start = ((t - 1) // (cfg.ctx - 1)) * (cfg.ctx - 1)
        logits = forward(params, ids[start:t], cfg)[-1]                 # [V]
        want += -(logits[ids[t]] - np.log(np.exp(logits - logits.max()).sum()) - logits.max())
    assert hf.total_nats(params, ids, cfg) == pytest.approx(want, rel=1e-10)
    short = ids[:4]                                                     # fits one window
    assert hf.total_nats(params, short, cfg) == pytest.approx(3 * lm_loss(params, short, cfg))
    with pytest.raises(ValueError, match=r"ids: expected shape \[N\] with N >= 2"):
        hf.total_nats(params, ids[:1], cfg)


def test_offline_by_setting_prints_one_line_and_returns_none():
    # Decided before transformers is imported (its import alone takes seconds).
    code = ("import sys\nfrom anatomy.hf import gpt2_demo\nassert gpt2_demo() is None\n"
            "assert 'transformers' not in sys.modules\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": "/nonexistent-hf-home"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert lines == [hf._skip_line("HF_HUB_OFFLINE is set")], lines
    assert "needs the internet" in lines[0]


def test_no_route_or_no_transformers_is_one_line(monkeypatch, capsys):
    def not_cached(name, local_files_only=False, **kwargs):
        assert local_files_only, "no download may be tried without a route"
        raise OSError("not in the cache")

    monkeypatch.setattr(GPT2LMHeadModel, "from_pretrained", not_cached)
    for var in hf._OFFLINE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hf, "_reachable", lambda host, timeout=3.0: False)
    assert hf.gpt2_demo() is None
    out = capsys.readouterr()
    assert out.out.splitlines() == [hf._skip_line("huggingface.co is not reachable")]
    assert out.err == ""
    monkeypatch.setitem(sys.modules, "transformers", None)     # import fails
    assert hf.load_gpt2() is None
    assert "transformers is not installed" in capsys.readouterr().out
