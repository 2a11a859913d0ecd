"""anatomy.flops: chapter 7's FLOPs, training compute, KV-cache bytes and activation shapes,
with the exact matmul count checked against torch's FlopCounterMode."""

import dataclasses

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from anatomy.flops import (
    activation_shapes,
    activation_values,
    cached_step_flops,
    format_bytes,
    forward_flops_per_token,
    forward_matmul_flops,
    kv_cache_bytes,
    kv_crossover_tokens,
    matmul_flops,
    max_batch,
    training_compute,
    training_flops_per_token,
    training_memory_bytes,
    uncached_step_flops,
    weight_bytes,
)
from anatomy.gpt_torch import GPT
from anatomy.heads import split_heads
from anatomy.params import BABY_GPT, GPT2_SMALL, TOY, GPTConfig, count_params, init_params

# ---------------------------------------------------------------- chapter 7 figures


def test_matmul_convention():
    assert matmul_flops(1, 768, 2304) == 2 * 768 * 2304          # one row: 2 x in x out
    assert matmul_flops(5, 3, 4) == 5 * matmul_flops(1, 3, 4)


def test_gpt2_small_flops_per_token():
    f = forward_flops_per_token(GPT2_SMALL, n=1024)
    assert f["weights"] == 2 * 124_439_808 == 248_879_616
    assert f["attention"] == 4 * 12 * 1024 * 768 == 37_748_736       # scores + values, 12 layers
    assert f["total"] == 286_628_352
    assert forward_flops_per_token(GPT2_SMALL, n=1)["attention"] == 4 * 12 * 768
    t = training_flops_per_token(GPT2_SMALL, n=1024)
    assert t["weights"] == 6 * 124_439_808 and t["attention"] == 3 * 37_748_736


def test_training_compute_budgets():
    assert training_compute(124_439_808, 10**10) == 7_466_388_480_000_000_000   # ~7.5e18
    tokens = 5_000 * 64 * 256                                  # baby GPT: steps x B x T
    assert training_compute(count_params(BABY_GPT), tokens) == 6 * 10_770_816 * 81_920_000
    with pytest.raises(ValueError, match=r"D: expected a positive number, got 0"):
        training_compute(1, 0)


def test_exact_matmul_count_of_gpt2_small():
    assert forward_matmul_flops(GPT2_SMALL, 1024) == 291_648_307_200
    per_token = forward_matmul_flops(GPT2_SMALL, 1024) / 1024
    assert per_token == 284_812_800
    rule = forward_flops_per_token(GPT2_SMALL, 1024)["total"]
    assert round(per_token / rule, 3) == 0.994          # 2N counts pos_emb, biases and norms
    assert forward_matmul_flops(GPT2_SMALL, 8, B=3) == 3 * forward_matmul_flops(GPT2_SMALL, 8)


def test_flop_counter_agrees_on_a_real_forward_pass():
    torch.manual_seed(0)
    model = GPT(TOY, attn="explicit").eval()
    ids = torch.randint(0, TOY.V, (2, 16))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(ids)
    assert counter.get_total_flops() == forward_matmul_flops(TOY, 16, B=2) == 6_819_840


def test_flop_counter_agrees_on_gpt2_small_shapes_only():
    with torch.device("meta"):                    # no memory, no arithmetic: shapes only
        model = GPT(GPT2_SMALL, attn="explicit")
        x = torch.empty(1, 1024, GPT2_SMALL.d)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        for block in model.blocks:
            x = block(x)                          # [B, T, d] -> [B, T, d]
        x @ model.tok_emb.T                       # [B, T, d] @ [d, V] -> [B, T, V]
    assert counter.get_total_flops() == forward_matmul_flops(GPT2_SMALL, 1024)


def test_a_generation_step_with_and_without_a_cache():
    head = 2 * 768 * 50_257                                   # one row of logits
    cached = cached_step_flops(GPT2_SMALL, 1024)
    assert cached == forward_matmul_flops(GPT2_SMALL, 1) + 4 * 12 * 1023 * 768 == 284_812_800
    dense = uncached_step_flops(GPT2_SMALL, 1024, all_logits=True)
    assert dense == forward_matmul_flops(GPT2_SMALL, 1024) and dense / cached == 1024
    real = uncached_step_flops(GPT2_SMALL, 1024)              # logits of the last row only
    assert dense - real == 1023 * head
    assert round(real / cached) == 747
    assert uncached_step_flops(TOY, 1) == cached_step_flops(TOY, 1) == forward_matmul_flops(
        TOY, 1)
    with pytest.raises(ValueError, match=r"n: n=65 exceeds ctx=64"):
        cached_step_flops(TOY, 65)


def test_training_memory_of_gpt2_small():
    N = 124_439_808
    short, long = (training_memory_bytes(GPT2_SMALL, T) for T in (256, 1024))
    for m in (short, long):                                   # fp32: 16 bytes per parameter
        assert (m["weights"], m["gradients"], m["AdamW state"]) == (4 * N, 4 * N, 8 * N)
        assert m["total"] == 16 * N + m["activations"]
    per_block = sum(a.size * (3 if a.name.startswith("q, k, v") else 1)
                    for a in activation_shapes(GPT2_SMALL, 1024) if a.stage == "block")
    rest = sum(a.size for a in activation_shapes(GPT2_SMALL, 1024) if a.stage != "block")
    assert activation_values(GPT2_SMALL, 1024) == 12 * per_block + rest
    assert long["activations"] == 4 * activation_values(GPT2_SMALL, 1024)
    assert long["activations"] > 6 * short["activations"]     # the T x T tables: x 16
    # everything scales with B except the position rows pos_emb[:T], shared by the batch
    assert activation_values(TOY, 8, B=3) == 3 * activation_values(TOY, 8) - 2 * 8 * TOY.d
    assert training_memory_bytes(TOY, 8, bytes_per_value=2)["weights"] == 2 * count_params(TOY)
    with pytest.raises(ValueError, match=r"bytes_per_value: expected a positive integer"):
        training_memory_bytes(TOY, 8, bytes_per_value=0)


def test_kv_cache_bytes_of_gpt2_small():
    assert kv_cache_bytes(GPT2_SMALL, 1) == 2 * 12 * 768 * 2 == 36_864        # per token, fp16
    assert kv_cache_bytes(GPT2_SMALL, 1024) == 37_748_736                      # 36 MiB
    assert kv_cache_bytes(GPT2_SMALL, 1024, bytes_per_value=4) == 75_497_472
    assert kv_cache_bytes(GPT2_SMALL, 1024, B=64) == 64 * 37_748_736
    assert weight_bytes(GPT2_SMALL) == 248_879_616
    assert weight_bytes(GPT2_SMALL, 4) == 497_759_232


def test_crossover_where_the_cache_outgrows_the_weights():
    tokens = kv_crossover_tokens(GPT2_SMALL)
    assert tokens == pytest.approx(6_751.29, abs=0.01)
    for nbytes in (2, 4):                                    # the same in any one dtype
        w = weight_bytes(GPT2_SMALL, nbytes)
        assert kv_cache_bytes(GPT2_SMALL, 1024, B=6, bytes_per_value=nbytes) < w
        assert kv_cache_bytes(GPT2_SMALL, 1024, B=7, bytes_per_value=nbytes) > w


def test_max_batch_counts_whole_sequences_beside_the_weights():
    w, kv = weight_bytes(GPT2_SMALL), kv_cache_bytes(GPT2_SMALL, 1024)      # fp16
    assert max_batch(GPT2_SMALL, 1024, 16 * 2**30) == (16 * 2**30 - w) // kv == 448
    assert max_batch(GPT2_SMALL, 1024, w + 5 * kv) == 5                   # exactly full
    assert max_batch(GPT2_SMALL, 1024, w + 5 * kv - 1) == 4               # one byte short
    assert max_batch(GPT2_SMALL, 1024, w - 1) == 0                        # not even the weights
    w4, kv4 = weight_bytes(GPT2_SMALL, 4), kv_cache_bytes(GPT2_SMALL, 1, bytes_per_value=4)
    assert max_batch(GPT2_SMALL, 1, w4 + 3 * kv4, bytes_per_value=4) == 3
    with pytest.raises(ValueError, match="memory"):
        max_batch(GPT2_SMALL, 1024, 0)


def test_activation_shapes_of_gpt2_small():
    acts = {a.name: a for a in activation_shapes(GPT2_SMALL, 1024)}
    assert acts["qkv = LN1(x) @ W_qkv"].shape == (1, 1024, 2304)
    assert acts["scores = q k^T / sqrt(d_head)"].shape == (1, 12, 1024, 1024)
    assert acts["hidden = LN2(x) @ W_1"].shape == (1, 1024, 3072)
    assert acts["logits = LN_f(x) @ tok_emb^T"].shape == (1, 1024, 50257)
    assert acts["pos_emb[:T]"].spec == "[T, d]"
    untied = activation_shapes(dataclasses.replace(GPT2_SMALL, tied=False), 4)
    assert untied[-1].name == "logits = LN_f(x) @ head^T"


def test_growing_T_changes_activations_not_parameters():
    short = {a.name: a.size for a in activation_shapes(GPT2_SMALL, 512, B=2)}
    long = {a.name: a.size for a in activation_shapes(GPT2_SMALL, 1024, B=2)}
    assert long["scores = q k^T / sqrt(d_head)"] == 4 * short["scores = q k^T / sqrt(d_head)"]
    assert long["LN1(x)"] == 2 * short["LN1(x)"]
    assert count_params(GPT2_SMALL) == 124_439_808           # T is not in the shape table


def test_activation_shapes_match_a_numpy_forward():
    cfg, B, T = TOY, 2, 7
    p = init_params(cfg, 0)
    ids = np.random.default_rng(0).integers(0, cfg.V, (B, T))
    x = p["tok_emb"][ids] + p["pos_emb"][:T]                     # [B, T, d]
    qkv = x @ p["blocks.0.W_qkv"]                                # [B, T, d] @ [d, 3d] -> [B, T, 3d]
    q = split_heads(qkv[..., : cfg.d], cfg.h)                    # [B, T, d] -> [B, h, T, d_head]
    scores = q @ np.swapaxes(q, -1, -2)                          # -> [B, h, T, T]
    hidden = x @ p["blocks.0.W_1"]                               # [B, T, d] @ [d, d_ff]
    logits = x @ p["tok_emb"].T                                  # [B, T, d] @ [d, V]
    acts = {a.name: a.shape for a in activation_shapes(cfg, T, B)}
    assert acts["ids"] == ids.shape and acts["x = sum"] == x.shape
    assert acts["qkv = LN1(x) @ W_qkv"] == qkv.shape
    assert acts["q, k, v (each, split into heads)"] == q.shape
    assert acts["scores = q k^T / sqrt(d_head)"] == scores.shape
    assert acts["hidden = LN2(x) @ W_1"] == hidden.shape
    assert acts["logits = LN_f(x) @ tok_emb^T"] == logits.shape


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(37_748_736) == "36.0 MiB"
    assert format_bytes(248_879_616) == "237.4 MiB"
    assert format_bytes(3 * 2**30) == "3.0 GiB"


# ---------------------------------------------------------------- errors


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"T: T=2048 exceeds ctx=1024"):
        kv_cache_bytes(GPT2_SMALL, 2048)
    with pytest.raises(ValueError, match=r"n: n=65 exceeds ctx=64"):
        forward_flops_per_token(TOY, 65)
    with pytest.raises(ValueError, match=r"B: expected a positive integer, got 0"):
        activation_shapes(TOY, 4, B=0)
    with pytest.raises(ValueError, match=r"bytes_per_value: expected a positive integer, got 2.5"):
        weight_bytes(TOY, 2.5)
    with pytest.raises(TypeError, match=r"cfg: expected a GPTConfig .*, got dict"):
        forward_matmul_flops({"d": 64}, 4)
    with pytest.raises(ValueError, match=r"rows: expected a positive integer, got 0"):
        matmul_flops(0, 3, 4)


# ---------------------------------------------------------------- the calculator that shows them
# (anatomy.viz.calculator: the chapter's tables and lab render the numbers tested above)


def test_head_and_length_choices():
    from anatomy.viz.calculator import head_choices, length_choices, snap_heads

    assert head_choices(768) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    assert all(640 % h == 0 for h in head_choices(640))
    assert snap_heads(768, 12) == 12 and snap_heads(640, 12) == 10 and snap_heads(64, 3) == 2
    assert length_choices(1024) == [2**k for k in range(11)]
    assert length_choices(1000)[-2:] == [512, 1000]


def test_tables_render_as_markdown_and_html():
    from anatomy.viz.calculator import Table, markdown_table, shape_table_display

    assert markdown_table(("a", "n"), [("x", 1234)]) == "| a | n |\n|:---|---:|\n| x | 1,234 |"
    t = Table(("a", "n"), [("`code`", 5), ("**bold**", 6)], align="lr")
    assert "<code>code</code>" in t._repr_html_() and "<b>bold</b>" in t._repr_html_()
    assert repr(t) == t._repr_markdown_()
    with pytest.raises(ValueError, match=r"expected 2 columns each"):
        Table(("a", "n"), [("x",)])
    shapes = shape_table_display(GPT2_SMALL)._repr_markdown_()
    assert "| `W_qkv` | `[d, 3d]` | (768, 2304) | 12 | 21,233,664 |" in shapes
    assert shapes.endswith("**124,439,808** |")


def test_calculator_panels_follow_T_but_not_N():
    from anatomy.viz.calculator import calculator_html

    short, long = (calculator_html(GPT2_SMALL, T) for T in (512, 1024))
    for page in (short, long):
        assert "<td style='padding:1px 8px;border-bottom:1px solid #ddd;text-align:right'>" \
               "124,439,808</td>" in page
    assert "(1, 12, 512, 512)" in short and "(1, 12, 1024, 1024)" in long
    assert "36.0 MiB" in long and "18.0 MiB" in short              # KV cache, fp16
    train = training_memory_bytes(GPT2_SMALL, 1024)
    assert f"training (fp32): total</td><td style='padding:1px 8px;border-bottom:1px solid " \
           f"#ddd;text-align:right'>{format_bytes(train['total'])}" in long


def test_memory_figure_stacks_the_same_parameters_over_growing_activations():
    import matplotlib

    matplotlib.use("Agg")
    from anatomy.viz.calculator import memory_figure

    configs = {"toy": TOY, "baby GPT": BABY_GPT}
    fig = memory_figure(configs, lengths=(16, 64))
    panels = fig.axes
    assert len(panels) == 2
    for ax, T in zip(panels, (16, 64), strict=True):
        bars = ax.patches                                     # 4 parts x 2 configs, in order
        assert len(bars) == 8
        weights = [b.get_height() * 2**30 for b in bars[:2]]
        assert weights == pytest.approx([4 * count_params(c) for c in configs.values()])
        acts = [b.get_height() * 2**30 for b in bars[6:]]
        assert acts == pytest.approx([training_memory_bytes(c, T)["activations"]
                                      for c in configs.values()])
    assert panels[0].patches[0].get_height() == panels[1].patches[0].get_height()
    assert panels[1].patches[6].get_height() > panels[0].patches[6].get_height()
    matplotlib.pyplot.close(fig)


def test_calculator_lab_snaps_heads_and_lengths(monkeypatch):
    import IPython.display

    from anatomy.viz.calculator import calculator_lab

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    calculator_lab(GPT2_SMALL, T=1024)
    box = shown[0]
    d, _, h = box.children[0].children
    ctx, T, _ = box.children[1].children
    panels = box.children[3]
    assert "124,439,808" in panels.value
    d.value = 640                                  # 12 does not divide 640: h snaps to 10
    assert h.value == 10 and all(640 % c == 0 for c in h.options)
    ctx.value = 256                                # T may not exceed ctx
    assert T.value == 256 and max(T.options) == 256
    before = panels.value
    T.value = 64                                   # activations shrink, N stays
    N = f"{count_params(GPTConfig(V=50257, ctx=256, d=640, L=12, h=10)):,}"
    assert N in before and N in panels.value
    assert "(1, 10, 256, 256)" in before and "(1, 10, 64, 64)" in panels.value
