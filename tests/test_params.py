"""anatomy.params: the config's checks, the one shape table, every row of chapter 7's count of
GPT-2 small, the toy config, the rules of thumb, and a PyTorch model counted independently."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from anatomy.params import (
    BABY_GPT,
    BIAS_NAMES,
    GPT2_SMALL,
    LINEAR_BIAS_NAMES,
    TOY,
    GPTConfig,
    block_params,
    check_params,
    count_approx,
    count_block,
    count_breakdown,
    count_by_kind,
    count_module_params,
    count_non_embedding,
    count_params,
    init_params,
    param_shapes,
    shape_for,
    shape_table,
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


def test_nanogpt_printed_counts():
    # nanoGPT's get_num_params() leaves out the position table and counts the tied head once:
    # "123.65M" for GPT-2 small; its baby GPT (shakespeare_char) also has bias=False.
    assert count_params(GPT2_SMALL, without=("pos_emb",)) == 123_653_376
    biases = ("b_qkv", "b_o", "b_1", "b_2", "ln1_b", "ln2_b", "lnf_b")
    baby = count_params(BABY_GPT, without=("pos_emb", *biases))
    assert baby == 10_646_784 and f"{baby / 1e6:.2f}M" == "10.65M"


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


# ---------------------------------------------------------------- chapter 7: closed forms,
# variants and independent counts (PyTorch modules, Hugging Face transformers)


def test_count_block_closed_form_matches_the_table():
    assert count_block(512, 2048) == 1_050_624 + 2_099_712 + 2_048 == 3_152_384
    assert count_block(768, 3072) == 7_087_872
    for d, h, d_ff in ((64, 4, 256), (48, 3, 100), (384, 6, 1536)):
        cfg = GPTConfig(V=11, ctx=7, d=d, L=1, h=h, d_ff=d_ff)
        assert count_block(d, d_ff) == count_breakdown(cfg)["one block"]
    with pytest.raises(ValueError, match=r"d_ff: expected a positive integer, got 0"):
        count_block(64, 0)


def test_rule_of_thumb_and_its_error():
    assert count_approx(GPT2_SMALL) == 12 * 12 * 768**2 + 50_257 * 768 + 1_024 * 768
    assert count_approx(GPT2_SMALL) == 124_318_464
    err_block = (7_087_872 - 12 * 768**2) / 7_087_872
    assert round(100 * err_block, 2) == 0.14
    err_total = (count_params(GPT2_SMALL) - count_approx(GPT2_SMALL)) / count_params(GPT2_SMALL)
    assert round(100 * err_total, 3) == 0.098
    untied = dataclasses.replace(GPT2_SMALL, tied=False)
    assert count_approx(untied) - count_approx(GPT2_SMALL) == 38_597_376


def test_counts_without_some_entries_explain_other_published_figures():
    c = GPT2_SMALL
    assert count_params(c) - count_params(c, without=("b_qkv",)) == 12 * 3 * 768 == 27_648
    linear_biases = ("b_qkv", "b_o", "b_1", "b_2")
    assert count_params(c) - count_params(c, without=linear_biases) == 82_944
    all_biases = (*linear_biases, "ln1_b", "ln2_b", "lnf_b")
    assert count_params(c) - count_params(c, without=all_biases) == 82_944 + 19_200
    assert count_params(c, without=("tok_emb", "pos_emb")) == 85_056_000   # non-embedding
    assert count_params(c, without="b_qkv") == count_params(c, without=("b_qkv",))
    with pytest.raises(ValueError, match=r"without: unknown parameter name 'b_ln'"):
        count_params(c, without=("b_ln",))


def test_bias_names_are_every_bias_and_shift_of_the_table():
    short = {name.rsplit(".", 1)[-1] for name in param_shapes(GPT2_SMALL)}
    assert set(BIAS_NAMES) == {n for n in short if n.startswith("b_") or n.endswith("_b")}
    assert len(set(BIAS_NAMES)) == len(BIAS_NAMES) == 7
    assert set(LINEAR_BIAS_NAMES) == {n for n in BIAS_NAMES if n.startswith("b_")}
    assert count_params(GPT2_SMALL, without=LINEAR_BIAS_NAMES) == 124_356_864
    assert count_params(GPT2_SMALL, without=BIAS_NAMES) == 124_337_664
    assert count_params(BABY_GPT, without=("pos_emb", *BIAS_NAMES)) == 10_646_784


def test_gpt1_sized_model_is_the_117m():
    gpt1 = GPTConfig(V=40_478, ctx=512, d=768, L=12, h=12)
    assert count_params(gpt1, without=("lnf_g", "lnf_b")) == 116_534_784   # post-norm, no LN_f


def test_shape_table_rows_and_kinds():
    rows = shape_table(GPT2_SMALL)
    assert [r.name for r in rows[:4]] == ["tok_emb", "pos_emb", "ln1_g", "ln1_b"]
    qkv = next(r for r in rows if r.name == "W_qkv")
    assert (qkv.spec, qkv.shape, qkv.times, qkv.count) == ("[d, 3d]", (768, 2304), 12, 21_233_664)
    assert sum(r.count for r in rows) == 124_439_808
    kinds = count_by_kind(GPT2_SMALL)
    assert kinds == {"embeddings": 39_383_808, "attention": 28_348_416, "MLP": 56_669_184,
                     "LayerNorms": 38_400, "total": 124_439_808}
    untied = count_by_kind(dataclasses.replace(GPT2_SMALL, tied=False))
    assert untied["head"] == 38_597_376 and untied["total"] == 163_037_184
    assert shape_table(dataclasses.replace(TOY, tied=False))[-1].name == "head"


def test_torch_block_with_multihead_attention():
    d, h, d_ff = 768, 12, 3072
    block = torch.nn.ModuleList([torch.nn.LayerNorm(d), torch.nn.MultiheadAttention(d, h),
                                 torch.nn.LayerNorm(d), torch.nn.Linear(d, d_ff),
                                 torch.nn.Linear(d_ff, d)])
    assert sum(p.numel() for p in block.parameters()) == 7_087_872


def test_hugging_face_gpt2_counts_the_same():
    from transformers import GPT2Config, GPT2LMHeadModel

    with torch.device("meta"):                    # GPT-2 small's shapes; nothing downloaded
        hf = GPT2LMHeadModel(GPT2Config(vocab_size=50_257, n_positions=1_024, n_embd=768,
                                        n_layer=12, n_head=12))
    assert hf.lm_head.weight is hf.transformer.wte.weight          # tied: counted once
    assert sum(p.numel() for p in hf.parameters()) == count_params(GPT2_SMALL) == 124_439_808

    torch.manual_seed(0)                          # a toy one with real random weights
    kw = dict(vocab_size=65, n_positions=64, n_embd=64, n_layer=2, n_head=4,
              bos_token_id=0, eos_token_id=0)
    tiny = GPT2LMHeadModel(GPT2Config(**kw))
    assert sum(p.numel() for p in tiny.parameters()) == count_params(TOY) == 108_352
    untied = GPT2LMHeadModel(GPT2Config(**kw, tie_word_embeddings=False))
    assert sum(p.numel() for p in untied.parameters()) == count_params(
        dataclasses.replace(TOY, tied=False)) == 108_352 + 65 * 64


def test_hugging_face_gpt1_counts_the_same():
    from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel

    with torch.device("meta"):
        hf = OpenAIGPTLMHeadModel(OpenAIGPTConfig())          # V = 40,478, ctx = 512
    gpt1 = GPTConfig(V=40_478, ctx=512, d=768, L=12, h=12)
    assert sum(p.numel() for p in hf.parameters()) == count_params(
        gpt1, without=("lnf_g", "lnf_b"))


# ---------------------------------------------------------------- chapter 7 exercises 7.4, 7.5


def test_non_embedding_count_and_shapes_for_a_budget():
    assert count_non_embedding(768, 12) == count_params(GPT2_SMALL, without=("tok_emb",
                                                                           "pos_emb"))
    assert shape_for(85_056_000) == (768, 12)            # GPT-2 small's own shape comes back
    for N in np.geomspace(1e7, 1e11, 400):               # every budget the exercise may draw
        d, L = shape_for(float(N))
        assert d % 64 == 0 and 32 <= d / L <= 256
        assert abs(count_non_embedding(d, L) / N - 1) < 0.10
    with pytest.raises(ValueError, match=r"N: expected a number of parameters of at least "
                                         r"1e5, got 10"):
        shape_for(10)
    with pytest.raises(ValueError, match=r"L: expected a positive integer, got 0"):
        count_non_embedding(64, 0)


def test_module_count_takes_each_tensor_once():
    emb, head = torch.nn.Embedding(50, 16), torch.nn.Linear(16, 50, bias=False)
    model = torch.nn.ModuleDict({"emb": emb, "head": head, "ln": torch.nn.LayerNorm(16)})
    head.weight = emb.weight                                     # tied: one tensor
    model.register_buffer("mask", torch.ones(8, 8, dtype=torch.bool))
    emb.weight.requires_grad_(False)                             # frozen still counts
    assert count_module_params(model) == 50 * 16 + 2 * 16
    listed = sum(t.numel() for t in model.state_dict().values())
    assert listed - count_module_params(model) == 50 * 16 + 64  # the trap of exercise 7.4
    with torch.device("meta"):
        from anatomy.gpt_torch import GPT
        assert count_module_params(GPT(GPT2_SMALL)) == 124_439_808
    with pytest.raises(TypeError, match=r"model: expected a torch.nn.Module, got dict"):
        count_module_params({"W": np.zeros(3)})
