"""anatomy.gpt_torch: the PyTorch GPT against the NumPy GPT, and its two attention paths."""

import math

import numpy as np
import pytest
import torch
from _local_data import DATA

from anatomy import gpt_numpy
from anatomy.data import CharTokenizer, get_batch, load_text
from anatomy.gpt_torch import (
    GPT,
    check_token_ids,
    configure_optimizer,
    explicit_attention,
    from_numpy,
    load_numpy_params,
    to_numpy_params,
    unwrap,
)
from anatomy.params import BABY_GPT, TOY, GPTConfig, count_params, init_params, param_shapes

SMALL = GPTConfig(V=11, ctx=8, d=16, L=2, h=4)


def _ids(cfg: GPTConfig, B: int = 3, T: int | None = None, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(cfg.V, (B, T or cfg.ctx), generator=g)


@pytest.mark.parametrize("tied", [True, False])
def test_state_dict_is_the_shape_table(tied):
    cfg = GPTConfig(V=11, ctx=8, d=16, L=2, h=4, tied=tied)
    model = GPT(cfg)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert shapes == param_shapes(cfg)          # the same names with the same shapes
    assert model.num_params() == count_params(cfg)


@pytest.mark.parametrize("cfg, n", [(TOY, 108_352), (BABY_GPT, 10_770_816)])
def test_parameter_count_matches_the_numpy_table(cfg, n):
    with torch.device("meta"):          # shapes only: no memory, no initialisation cost
        model = GPT(cfg)
    assert model.num_params() == count_params(cfg) == n


def test_device_is_where_the_weights_are():
    model = GPT(GPTConfig(V=11, ctx=8, d=16, L=1, h=4))
    assert model.device == torch.device("cpu")
    assert model.to("meta").device == torch.device("meta")   # follows the weights when moved


@pytest.mark.parametrize("tied", [True, False])
def test_same_logits_as_the_numpy_gpt_in_float64(tied):
    cfg = GPTConfig(V=11, ctx=8, d=16, L=2, h=4, tied=tied)
    params = init_params(cfg, np.random.default_rng(0))
    # Larger weights than the 0.02 init, so the comparison exercises every nonlinearity.
    params = {k: v * (1 if k.endswith(("_g", "_b")) else 20) for k, v in params.items()}
    model = from_numpy(params, cfg)
    assert next(model.parameters()).dtype == torch.float64
    ids = _ids(cfg)
    want = gpt_numpy.forward(params, ids.numpy(), cfg)
    got = model(ids).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)   # tolerance: float64 rounding
    assert np.abs(want).max() > 1.0                              # not a trivially small case


def test_numpy_round_trip_is_exact():
    model = GPT(SMALL)
    params = to_numpy_params(model)
    assert set(params) == set(param_shapes(SMALL))
    again = load_numpy_params(GPT(SMALL), params)
    for (name, a), b in zip(model.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_loading_wrong_weights_names_the_problem():
    params = init_params(SMALL, 0)
    with pytest.raises(ValueError, match="W_qkv"):
        load_numpy_params(GPT(SMALL), {**params, "blocks.0.W_qkv": np.zeros((16, 47))})
    with pytest.raises(ValueError, match="head"):
        load_numpy_params(GPT(SMALL), {**params, "head": np.zeros((11, 16))})


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_and_explicit_attention_agree(dtype, tol, causal):
    torch.manual_seed(0)
    sdpa = GPT(SMALL, attn="sdpa", causal=causal).to(dtype)
    sdpa.reset_parameters()
    with torch.no_grad():             # bigger weights: attention far from uniform
        for p in sdpa.parameters():
            p.mul_(25 if p.ndim == 2 else 1)
    explicit = GPT(SMALL, attn="explicit", causal=causal).to(dtype)
    explicit.load_state_dict(sdpa.state_dict())
    ids = _ids(SMALL)
    a, b = sdpa(ids), explicit(ids)
    assert (a - b).abs().max().item() <= tol * max(1.0, a.abs().max().item())


def test_explicit_attention_masks_the_future():
    q, k, v = (torch.randn(1, 1, 4, 2, dtype=torch.float64) for _ in range(3))
    out = explicit_attention(q, k, v, causal=True)
    assert torch.allclose(out[..., 0, :], v[..., 0, :])   # position 0 can only see itself


@pytest.mark.parametrize("attn", ["sdpa", "explicit"])
def test_causal_mask_decides_whether_the_future_leaks(attn):
    torch.manual_seed(0)
    ids = _ids(SMALL, B=1)
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % SMALL.V
    causal = GPT(SMALL, attn=attn, causal=True)
    before, after = causal(ids), causal(changed)
    assert torch.equal(before[0, :-1], after[0, :-1])       # earlier positions: untouched
    assert not torch.allclose(before[0, -1], after[0, -1])
    leaky = GPT(SMALL, attn=attn, causal=False)
    leaky.load_state_dict(causal.state_dict())
    before, after = leaky(ids), leaky(changed)
    moved = (before[0, :-1] - after[0, :-1]).abs().amax(dim=-1)
    assert (moved > 0).all()                                 # every earlier position saw it


def test_loss_at_init_is_about_ln_V():
    text = load_text(DATA)
    tok = CharTokenizer(text)
    ids = torch.tensor(tok.encode(text))
    torch.manual_seed(0)
    model = GPT(TOY).eval()
    x, y = get_batch(ids, 16, TOY.ctx, torch.Generator().manual_seed(0))
    logits, loss = model(x, y)
    assert logits.shape == (16, 64, 65)
    assert abs(loss.item() - math.log(65)) < 0.1          # ln 65 = 4.17


def test_ids_are_checked_with_clear_errors():
    model = GPT(SMALL)
    with pytest.raises(TypeError, match=r"ids: expected integers in \[0, V\) = \[0, 11\), got "
                                        r"dtype torch.float32"):
        model(torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"expected shape \[B, T\].*ids\[None\]"):
        model(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="T=9 exceeds ctx=8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, 11\), got max 11"):
        model(torch.tensor([[1, 11]]))
    with pytest.raises(ValueError, match="got min -1"):
        model(torch.tensor([[-1, 2]]))
    with pytest.raises(ValueError, match="targets: expected shape"):
        model(torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="attn"):
        GPT(SMALL, attn="flash")


def test_token_ids_are_checked_by_value_anywhere():
    check_token_ids(torch.tensor([[0, 10], [3, 4]]), 11)
    check_token_ids(torch.zeros(0, dtype=torch.long), 11)            # nothing to check
    with pytest.raises(ValueError, match=r"data: expected integers in \[0, V\) = \[0, 11\), "
                                         r"got max 11"):
        check_token_ids(torch.tensor([0, 11]), 11, "data")
    with pytest.raises(ValueError, match="got min -3"):
        check_token_ids(torch.tensor([[-3], [12]]), 11)               # the low end first


def test_trusting_id_values_drops_only_the_value_check_and_only_inside():
    model = GPT(SMALL)
    bad = torch.tensor([[1, 11]])
    with model.trusting_id_values():
        assert not model.check_id_values
        with pytest.raises(ValueError, match="T=9 exceeds ctx=8"):     # shapes still checked
            model(torch.zeros(1, 9, dtype=torch.long))
        with pytest.raises(TypeError, match="dtype torch.float32"):    # and dtypes
            model(torch.zeros(1, 4))
    assert model.check_id_values
    with pytest.raises(ValueError, match=r"\[0, 11\), got max 11"):   # back on afterwards
        model(bad)
    with pytest.raises(RuntimeError, match="mid-block"), model.trusting_id_values():
        raise RuntimeError("mid-block")                                # even after an error
    with pytest.raises(ValueError, match="got max 11"):
        model(bad)


@pytest.mark.parametrize("attn", ["sdpa", "explicit"])
def test_a_trusted_forward_and_backward_read_no_values(attn):
    # On the meta device a tensor has a shape and a dtype but no values: anything that reads
    # one (the way .item(), bool() or .tolist() make a GPU sync) raises. So the trusted path,
    # dropout and loss included, provably never reads a value back from the device, while
    # the checked path does.
    model = GPT(SMALL, dropout=0.1, attn=attn).to("meta")
    ids = torch.zeros(2, SMALL.ctx, dtype=torch.long, device="meta")
    with pytest.raises(RuntimeError, match="meta tensors"):
        model(ids)
    with model.trusting_id_values():
        logits, loss = model(ids, ids)
        loss.backward()
    assert logits.shape == (2, SMALL.ctx, SMALL.V) and logits.is_meta and loss.shape == ()
    assert model.tok_emb.grad.shape == (SMALL.V, SMALL.d)


def test_gpt2_initialisation():
    torch.manual_seed(0)
    cfg = GPTConfig(V=65, ctx=64, d=128, L=8, h=4)
    model = GPT(cfg)
    block = model.blocks[0]
    assert abs(model.tok_emb.std().item() - 0.02) < 0.001
    assert abs(block.W_1.std().item() - 0.02) < 0.001
    assert abs(block.W_2.std().item() - 0.02 / math.sqrt(16)) < 0.0005   # 1/sqrt(2L)
    assert abs(block.W_o.std().item() - 0.02 / math.sqrt(16)) < 0.0005
    assert torch.equal(block.ln1_g, torch.ones(128)) and not block.b_qkv.any()


def test_dropout_only_while_training():
    torch.manual_seed(0)
    model = GPT(SMALL, dropout=0.5)
    ids = _ids(SMALL)
    assert not torch.equal(model(ids), model(ids))           # training: random masks
    model.eval()
    assert torch.equal(model(ids), model(ids))               # eval: deterministic
    with pytest.raises(ValueError, match="dropout"):
        GPT(SMALL, dropout=1.0)


def test_weight_decay_on_matrices_only():
    model = GPT(GPTConfig(V=11, ctx=8, d=16, L=2, h=4, tied=False))
    opt = configure_optimizer(model, lr=1e-3, weight_decay=0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decay, no_decay = ({names[id(p)] for p in g["params"]} for g in opt.param_groups)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    assert decay == {n for n, p in model.named_parameters() if p.ndim == 2}
    assert {"tok_emb", "pos_emb", "head", "blocks.1.W_qkv"} <= decay
    assert {"lnf_g", "blocks.0.b_qkv", "blocks.0.ln1_b"} <= no_decay
    assert len(decay) + len(no_decay) == len(names)


def test_unwrap_finds_the_model_inside_wrappers():
    model = GPT(SMALL)
    wrapper = torch.nn.Module()
    wrapper.module = model                       # how DistributedDataParallel holds it
    assert unwrap(wrapper) is model
    with pytest.raises(TypeError, match="expected a GPT"):
        unwrap(torch.nn.Linear(2, 2))
