"""anatomy.memory: what autograd keeps for the backward pass, and what a step leaves."""

import pytest
import torch

from anatomy.flops import training_memory_bytes
from anatomy.gpt_torch import GPT, configure_optimizer
from anatomy.memory import activation_bytes, saved_bytes, training_state, weight_copies
from anatomy.params import TOY, GPTConfig


def test_a_matmul_and_a_relu_keep_their_inputs_and_output_not_the_weight():
    x = torch.randn(4, 8, requires_grad=True)               # 128 bytes
    W = torch.nn.Parameter(torch.randn(8, 16))              # 512 bytes
    # x @ W keeps x and W (each is needed for the other's gradient); relu keeps its output
    assert saved_bytes(lambda: (x @ W).relu().sum(), exclude=[W]) == 128 + 4 * 16 * 4
    assert saved_bytes(lambda: (x @ W).relu().sum()) == 128 + 256 + 512


def test_views_of_one_tensor_count_once():
    x = torch.randn(4, 8, requires_grad=True)

    def product_of_halves():
        a = x.exp()                       # exp keeps its result a [4, 8]
        return (a[:2] * a[2:]).sum()      # the product keeps both halves: views of a

    assert saved_bytes(product_of_halves) == 4 * 8 * 4


def test_nothing_is_kept_without_gradients():
    model = GPT(TOY)
    ids = torch.randint(0, TOY.V, (2, 16))
    with torch.no_grad():
        assert activation_bytes(model, ids) == 0


def test_the_table_is_an_upper_bound_and_fused_attention_keeps_less():
    cfg = GPTConfig(V=65, ctx=64, d=64, L=2, h=4)
    B, T = 2, 64
    ids = torch.randint(0, cfg.V, (B, T))
    torch.manual_seed(0)
    explicit = activation_bytes(GPT(cfg, attn="explicit"), ids, ids)
    fused = activation_bytes(GPT(cfg, attn="sdpa"), ids, ids)
    table = training_memory_bytes(cfg, T, B)["activations"]
    weights_tables = cfg.L * B * cfg.h * T * T * 4           # softmax's output, every block
    assert weights_tables < explicit < table
    assert fused < explicit


def test_meta_tensors_are_refused():
    with torch.device("meta"):
        model = GPT(TOY)
    ids = torch.zeros(1, 4, dtype=torch.long, device="meta")
    with pytest.raises(ValueError, match="meta"):
        activation_bytes(model, ids)


@pytest.mark.parametrize("autocast", [False, True])
def test_adamw_keeps_16_bytes_per_parameter_in_fp32_and_under_autocast(autocast):
    torch.manual_seed(0)
    model = GPT(TOY)
    optimizer = configure_optimizer(model, lr=1e-3)
    ids = torch.randint(0, TOY.V, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits, loss = model(ids, ids)
    assert logits.dtype == (torch.bfloat16 if autocast else torch.float32)
    N = model.num_params()
    assert training_state(model, optimizer)["gradients"] == ((), 0)   # nothing yet
    loss.backward()
    optimizer.step()
    state = training_state(model, optimizer)
    assert state["weights"] == state["gradients"] == (("float32",), 4 * N)
    assert state["optimizer state"] == (("float32",), 8 * N)        # two moments, no counters
    assert state["in all"] == (("float32",), 16 * N)


def test_autocast_keeps_a_16_bit_copy_of_every_weight_matrix_until_backward():
    torch.manual_seed(0)
    # explicit attention: PyTorch's fused bfloat16 CPU attention fails with AVX-512 off
    model = GPT(TOY, attn="explicit")
    ids = torch.randint(0, TOY.V, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        copies = weight_copies(model, lambda: model(ids, ids))
    # every matrix a product reads: W_qkv, W_o, W_1, W_2 per block and the tied head;
    # the position table is only looked up, so it is never cast
    matrices = {n: p for n, p in model.named_parameters() if p.ndim == 2 and n != "pos_emb"}
    assert set(copies) == set(matrices)
    assert copies == {n: 2 * p.numel() for n, p in matrices.items()}


def test_without_autocast_no_weight_is_copied():
    model = GPT(TOY)
    ids = torch.randint(0, TOY.V, (2, 16))
    assert weight_copies(model, lambda: model(ids, ids)) == {}


def test_plain_sgd_keeps_no_optimizer_state():
    model = GPT(TOY)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.randint(0, TOY.V, (2, 16))
    model(ids, ids)[1].backward()
    optimizer.step()
    assert training_state(model, optimizer)["optimizer state"] == ((), 0)
