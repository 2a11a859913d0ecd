"""anatomy.params: the config's checks, the one shape table, every row of chapter 7's count of
GPT-2 small, the toy config, the rules of thumb, and a PyTorch model counted independently."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from anatomy.params import (
    BABY_GPT,
    GPT2_SMALL,
    TOY,
    GPTConfig,
    block_params,
    check_params,
    count_breakdown,
    count_params,
    init_params,
    param_shapes,
)

# ---------------------------------------------------------------- chapter 7 figures


def test_gpt2_small_table_to_the_digit():
    rows = count_breakdown(GPT2_SMALL)
    assert rows == {
        "attention per block": 2_362_368,
        "MLP per block": 4_722_432,
        "LayerNorms per block": 3_072,
        "one block": 7_087_872,
        "all blocks": 85_054_464,
        "token embedding": 38_597_376,
        "position embedding": 786_432,
        "final LayerNorm": 1_536,
        "total": 124_439_808,
    }
    assert count_params(GPT2_SMALL) == 124_439_808
    # The table's formulas, as printed in the syllabus.
    assert rows["attention per block"] == 4 * 768**2 + 4 * 768
    assert rows["MLP per block"] == 2 * 768 * 3072 + 3072 + 768


def test_toy_config_counts():
    rows = count_breakdown(TOY)
    assert rows["token embedding"] + rows["position embedding"] == 8_256
    assert rows["one block"] == 49_984
    assert count_params(TOY) == rows["total"] == 108_352


def test_rules_of_thumb():
    d = GPT2_SMALL.d
    assert 12 * d**2 == 7_077_888
    assert abs(7_087_872 - 12 * d**2) / 7_087_872 < 0.002                # within 0.2%
    c = GPT2_SMALL
    approx = 12 * c.L * c.d**2 + c.V * c.d + c.ctx * c.d
    assert abs(approx - count_params(c)) / count_params(c) < 0.002
    embeddings = c.V * c.d + c.ctx * c.d
    assert 0.30 < embeddings / count_params(c) < 1 / 3                    # almost a third


def test_exercise_block_d512():
    rows = count_breakdown(GPTConfig(V=10, ctx=10, d=512, L=1, h=8, d_ff=2048))
    assert (rows["attention per block"], rows["MLP per block"],
            rows["LayerNorms per block"]) == (1_050_624, 2_099_712, 2_048)
    assert rows["one block"] == 3_152_384


def test_untying_adds_exactly_v_times_d():
    untied = dataclasses.replace(GPT2_SMALL, tied=False)
    assert count_params(untied) - count_params(GPT2_SMALL) == 38_597_376
    assert count_breakdown(untied)["untied head"] == 50_257 * 768
    assert list(param_shapes(untied))[-1] == "head"


def test_baby_gpt_is_about_10_7_million():
    # 10,770,816 with biases and the position table; nanoGPT's "10.65M" leaves out the
    # position table and has no biases.
    assert 10.6e6 < count_params(BABY_GPT) < 10.8e6


def test_count_matches_an_equivalent_torch_model(torch_reference):
    c = GPT2_SMALL
    with torch.device("meta"):                   # shapes only: nothing is allocated
        model = torch_reference.GPT(c.V, c.ctx, c.d, c.L, c.h, c.d_ff)
    assert sum(p.numel() for p in model.parameters()) == count_params(c) == 124_439_808


# ---------------------------------------------------------------- the shape table


def test_shape_table_names_and_order():
    cfg = GPTConfig(V=7, ctx=5, d=8, L=2, h=2, d_ff=32)
    shapes = param_shapes(cfg)
    per_block = ["ln1_g", "ln1_b", "W_qkv", "b_qkv", "W_o", "b_o",
                 "ln2_g", "ln2_b", "W_1", "b_1", "W_2", "b_2"]
    assert list(shapes) == (["tok_emb", "pos_emb"]
                            + [f"blocks.{i}.{n}" for i in range(2) for n in per_block]
                            + ["lnf_g", "lnf_b"])
    assert shapes["tok_emb"] == (7, 8) and shapes["pos_emb"] == (5, 8)
    assert shapes["blocks.1.W_qkv"] == (8, 24) and shapes["blocks.1.b_qkv"] == (24,)
    assert shapes["blocks.0.W_1"] == (8, 32) and shapes["blocks.0.W_2"] == (32, 8)
    assert shapes["blocks.0.b_1"] == (32,) and shapes["lnf_g"] == (8,)
    assert sum(math.prod(s) for s in shapes.values()) == count_params(cfg)


def test_config_defaults_and_properties():
    cfg = GPTConfig(V=65, ctx=64, d=64, L=2, h=4)
    assert cfg.d_ff == 256 and cfg.d_head == 16 and cfg.tied
    assert GPT2_SMALL.d_head == 64 and BABY_GPT.d_head == 64
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d = 32


# ---------------------------------------------------------------- initialisation


def test_init_params_follow_the_table_and_gpt2_recipe():
    params = init_params(BABY_GPT, np.random.default_rng(0))
    shapes = param_shapes(BABY_GPT)
    assert list(params) == list(shapes)
    assert all(params[k].shape == s and params[k].dtype == np.float64 for k, s in shapes.items())
    residual = 0.02 / math.sqrt(2 * BABY_GPT.L)
    assert abs(params["tok_emb"].std() - 0.02) < 0.001
    assert abs(params["blocks.0.W_qkv"].std() - 0.02) < 0.001
    assert abs(params["blocks.3.W_o"].std() - residual) < 0.0005
    assert abs(params["blocks.5.W_2"].std() - residual) < 0.0005
    assert (params["blocks.2.b_1"] == 0).all() and (params["lnf_b"] == 0).all()
    assert (params["blocks.2.ln2_g"] == 1).all()
    check_params(params, BABY_GPT)


def test_init_params_is_reproducible_across_dtypes():
    a = init_params(TOY, np.random.default_rng(3))
    b = init_params(TOY, 3, dtype=np.float32)
    assert b["blocks.1.W_1"].dtype == np.float32
    for k in a:
        np.testing.assert_array_equal(a[k].astype(np.float32), b[k])


def test_block_params_uses_short_names():
    params = init_params(TOY, 0)
    p = block_params(params, 1)
    assert set(p) == {"ln1_g", "ln1_b", "W_qkv", "b_qkv", "W_o", "b_o",
                      "ln2_g", "ln2_b", "W_1", "b_1", "W_2", "b_2"}
    assert p["W_o"] is params["blocks.1.W_o"]
    with pytest.raises(ValueError, match=r"i: expected a block index in \[0, L\) = \[0, 2\), "
                                         r"got 2"):
        block_params(params, 2)


# ---------------------------------------------------------------- errors


def test_config_rejects_impossible_shapes():
    with pytest.raises(ValueError, match=r"cfg: d=10 is not divisible by h=3 heads"):
        GPTConfig(V=65, ctx=64, d=10, L=1, h=3)
    with pytest.raises(ValueError, match=r"cfg\.V: expected a positive integer, got 0"):
        GPTConfig(V=0, ctx=64, d=64, L=1, h=4)
    with pytest.raises(ValueError, match=r"cfg\.L: expected a positive integer, got -1"):
        GPTConfig(V=65, ctx=64, d=64, L=-1, h=4)
    with pytest.raises(ValueError, match=r"cfg\.d: expected a positive integer, got 64\.0"):
        GPTConfig(V=65, ctx=64, d=64.0, L=1, h=4)
    with pytest.raises(ValueError, match=r"cfg\.d_ff: expected a positive integer, got 0"):
        GPTConfig(V=65, ctx=64, d=64, L=1, h=4, d_ff=0)


def test_check_params_names_the_bad_entry():
    params = init_params(TOY, 0)
    with pytest.raises(ValueError, match=r"params\['blocks\.0\.W_qkv'\]: expected shape "
                                         r"\[d, 3d\] = \(64, 192\), got \(64, 64\)"):
        check_params({**params, "blocks.0.W_qkv": np.zeros((64, 64))}, TOY)
    with pytest.raises(ValueError, match=r"params: missing key 'lnf_b'"):
        check_params({k: v for k, v in params.items() if k != "lnf_b"}, TOY)
    with pytest.raises(ValueError, match=r"params: unknown key 'head'"):
        check_params({**params, "head": params["tok_emb"]}, TOY)
