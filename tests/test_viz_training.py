"""anatomy.viz.training: chapter 9's figures draw what the library computes, the per-position
loss is the mean cross-entropy, and the sampling lab runs."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from anatomy.data import CharTokenizer  # noqa: E402
from anatomy.gpt_torch import GPT  # noqa: E402
from anatomy.params import GPTConfig  # noqa: E402
from anatomy.sampling import sample  # noqa: E402
from anatomy.train import PRESETS, History, lr_at  # noqa: E402
from anatomy.viz.training import (  # noqa: E402
    _smooth,
    draw_loss_by_position,
    draw_loss_curves,
    draw_lr_schedule,
    draw_next_chars,
    loss_at_last_row,
    loss_by_position,
    next_char_probs,
    sampling_lab,
)

TEXT = "nasi lemak, roti canai, teh tarik.\n" * 3


@pytest.fixture
def small():
    tokenizer = CharTokenizer(TEXT)
    torch.manual_seed(0)
    model = GPT(GPTConfig(V=tokenizer.vocab_size, ctx=8, d=16, L=1, h=2))
    return model, tokenizer


def test_lr_figure_plots_lr_at_for_every_step():
    cfg = PRESETS["tiny"]
    fig = draw_lr_schedule(cfg)
    line = fig.axes[0].lines[0]
    np.testing.assert_allclose(line.get_ydata(), [lr_at(s, cfg) for s in range(61)])
    plt.close(fig)


def test_smoothing_is_a_running_mean():
    np.testing.assert_allclose(_smooth([1, 3, 5, 7], 2), [1, 2, 4, 6])


def test_loss_curves_show_every_run_and_ln_v():
    h = History(step=[0, 2], train_loss=[4.0, 3.0], val_loss=[4.1, 3.2], lr=[1, 1],
                step_loss=[4.0, 3.5])
    fig = draw_loss_curves({"a": h, "b": h}, V=65)
    ax = fig.axes[0]
    assert len(ax.lines) == 7                     # 3 per run + ln V
    assert ax.lines[-1].get_ydata()[0] == pytest.approx(math.log(65))
    plt.close(fig)


def test_loss_by_position_is_the_mean_cross_entropy(small):
    model, tokenizer = small
    data = torch.tensor(tokenizer.encode(TEXT))
    model.train()
    per_t = loss_by_position(model, data, T=8, B=16, n_batches=2, seed=3)
    assert per_t.shape == (8,) and model.training           # left as it was found
    gen = torch.Generator().manual_seed(3)
    from anatomy.data import get_batch

    model.eval()
    with torch.no_grad():
        means = [model(*get_batch(data, 16, 8, gen))[1] for _ in range(2)]
    assert per_t.mean() == pytest.approx(float(sum(means) / 2), rel=1e-5)
    fig = draw_loss_by_position({"causal": per_t}, V=tokenizer.vocab_size)
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), per_t)
    plt.close(fig)


def test_loss_at_last_row_is_the_last_position_of_loss_by_position(small):
    model, tokenizer = small
    data = torch.tensor(tokenizer.encode(TEXT))
    model.train()
    per_t = loss_by_position(model, data, T=8, B=16, n_batches=2, seed=3)
    last = loss_at_last_row(model, data, 8, B=16, n_batches=2, seed=3)
    assert model.training                                   # left as it was found
    assert last == pytest.approx(float(per_t[-1]), rel=1e-5)
    gen = torch.Generator().manual_seed(5)                  # a shorter window, by hand
    from anatomy.data import get_batch

    model.eval()
    with torch.no_grad():
        x, y = get_batch(data, 16, 3, gen)                  # [16, 3]
        want = torch.nn.functional.cross_entropy(model(x)[:, -1], y[:, -1]).item()
    assert loss_at_last_row(model, data, 3, B=16, n_batches=1, seed=5) == pytest.approx(want)
    fig = draw_loss_by_position({"causal": per_t}, title="the last row")
    assert fig.axes[0].get_title() == "the last row"
    plt.close(fig)


def test_next_char_probs_follow_temperature_and_top_k(small):
    model, tokenizer = small
    p = next_char_probs(model, tokenizer, "nasi ", 1.0)
    assert p.shape == (tokenizer.vocab_size,) and p.sum() == pytest.approx(1.0, abs=1e-6)
    greedy = next_char_probs(model, tokenizer, "nasi ", 0.0)
    assert greedy.max() == 1.0 and greedy.argmax() == p.argmax()
    top3 = next_char_probs(model, tokenizer, "nasi ", 1.0, top_k=3)
    assert (top3 > 0).sum() == 3
    fig = draw_next_chars(p, tokenizer.vocab, "nasi ", n=5)
    widths = [bar.get_width() for bar in fig.axes[0].patches]
    np.testing.assert_allclose(widths, np.sort(p)[::-1][:5], rtol=1e-6)
    plt.close(fig)
    with pytest.raises(ValueError, match="expected shape"):
        draw_next_chars(p[:3], tokenizer.vocab, "nasi ")


def test_lab_samples_what_sample_gives(monkeypatch, small):
    import IPython.display

    model, tokenizer = small
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs: shown.extend(objs))
    sampling_lab(model, tokenizer, ["nasi ", "roti"], n_chars=20)
    (box,) = shown
    prompt, (temperature, top_k), seed, picture, text = (box.children[0],
                                                         box.children[1].children,
                                                         *box.children[2:])
    assert bytes(picture.value).startswith(b"\x89PNG")
    want = sample(model, tokenizer, "nasi ", 20, temperature=0.8,
                  generator=torch.Generator().manual_seed(0))
    assert want in text.value.replace("&#x27;", "'")
    seed.value, temperature.value = 3, 0.0
    greedy = sample(model, tokenizer, "nasi ", 20, temperature=0.0)
    assert greedy in text.value.replace("&#x27;", "'")
    prompt.value, temperature.value, top_k.value = "roti", 1.0, 1       # top-1 is greedy
    assert sample(model, tokenizer, "roti", 20, temperature=0.0) in text.value
    assert plt.get_fignums() == []
