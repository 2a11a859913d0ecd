"""Shared worked-example recipes, drawn exactly in the syllabus's order.

They are fixtures (not an importable helper module) so they work under any pytest import mode.
"""

from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from anatomy.examples import ali_makan


def _legacy_draws(seed: int, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    # A private RandomState(seed) gives exactly the numbers of np.random.seed(seed) followed by
    # randn calls, without touching the global state.
    rs = np.random.RandomState(seed)
    return [rs.randn(*shape) for shape in shapes]


@pytest.fixture
def legacy_draws() -> Callable[..., list[np.ndarray]]:
    """``np.random.seed(seed)``, then ``randn(*shape)`` for each shape, in order."""
    return _legacy_draws


@pytest.fixture
def ch1_qkv() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chapter 1's "Ali makan nasi lemak": seed 0, X (4, 8), then W_q, W_k, W_v (8, 4) / sqrt 8.

    Also pins ``anatomy.examples.ali_makan`` to the syllabus's figures.
    """
    ex = ali_makan()                       # the book's own recipe, shared with chapter 3
    X = ex["X"]
    return X @ ex["W_q"], X @ ex["W_k"], X @ ex["W_v"]   # each [T, d] @ [d, d_k] -> [4, 4]


# ---------------------------------------------------------------- an independent PyTorch GPT
# Built from the library's own modules (nn.LayerNorm, nn.MultiheadAttention, nn.Linear, GELU),
# not from anatomy.gpt_torch, so that agreement with the NumPy code means two independent
# implementations agree. torch stores Linear weights [out, in]; ours are [in, out].


def _copy(dst: torch.Tensor, src: np.ndarray) -> None:
    with torch.no_grad():
        dst.copy_(torch.from_numpy(np.ascontiguousarray(src)))


class TorchBlock(nn.Module):
    """Pre-norm block: x + MHA(LN1(x)), then + MLP(LN2(x)). Shapes: x [B, T, d] -> [B, T, d]"""

    def __init__(self, d: int, h: int, d_ff: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(approximate="tanh"),
                                 nn.Linear(d_ff, d))

    def load(self, p: dict[str, np.ndarray]) -> "TorchBlock":
        pairs = [(self.ln1.weight, p["ln1_g"]), (self.ln1.bias, p["ln1_b"]),
                 (self.attn.in_proj_weight, p["W_qkv"].T), (self.attn.in_proj_bias, p["b_qkv"]),
                 (self.attn.out_proj.weight, p["W_o"].T), (self.attn.out_proj.bias, p["b_o"]),
                 (self.ln2.weight, p["ln2_g"]), (self.ln2.bias, p["ln2_b"]),
                 (self.mlp[0].weight, p["W_1"].T), (self.mlp[0].bias, p["b_1"]),
                 (self.mlp[2].weight, p["W_2"].T), (self.mlp[2].bias, p["b_2"])]
        for dst, src in pairs:
            _copy(dst, src)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[-2]
        # nn.MultiheadAttention's boolean attn_mask: True = NOT allowed, as in anatomy.
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        a = self.ln1(x)
        x = x + self.attn(a, a, a, attn_mask=causal, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TorchGPT(nn.Module):
    """Token + position embeddings, L blocks, final LayerNorm, head tied to the token table."""

    def __init__(self, V: int, ctx: int, d: int, L: int, h: int, d_ff: int):
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(V, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(TorchBlock(d, h, d_ff) for _ in range(L))
        self.lnf = nn.LayerNorm(d)

    def load(self, params: dict[str, np.ndarray]) -> "TorchGPT":
        _copy(self.tok_emb.weight, params["tok_emb"])
        _copy(self.pos_emb.weight, params["pos_emb"])
        for i, blk in enumerate(self.blocks):
            prefix = f"blocks.{i}."
            blk.load({k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)})
        _copy(self.lnf.weight, params["lnf_g"])
        _copy(self.lnf.bias, params["lnf_b"])
        return self

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        T = ids.shape[-1]
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(T))
        for blk in self.blocks:
            x = blk(x)
        return self.lnf(x) @ self.tok_emb.weight.T      # [B, T, d] @ [d, V] -> [B, T, V]


@pytest.fixture
def torch_reference() -> SimpleNamespace:
    """``.Block(d, h, d_ff)`` and ``.GPT(V, ctx, d, L, h, d_ff)``, each with ``.load(params)``."""
    return SimpleNamespace(Block=TorchBlock, GPT=TorchGPT)


def pytest_terminal_summary(terminalreporter):
    """Print the mutation test's counts, one line per exercise (test_mutants.py)."""
    import sys

    module = sys.modules.get("test_mutants")
    lines = getattr(module, "AUDITS", [])
    if lines:
        terminalreporter.write_sep("-", "mutation test: mutants per exercise")
        for line in lines:
            terminalreporter.write_line(line)


# Over about 20 s on one free core each (measured with --durations): left out of `make
# test-fast`, run by `make test`. By node id prefix, so a parametrised case can be named.
SLOW = (
    "test_weights.py::test_first_steps_of_the_make_command_reproduce_the_record",
    "test_weights.py::test_numpy_val_loss_is_the_recorded_one",
    "test_train.py::test_torch_compile_gives_the_eager_losses_and_plain_checkpoints",
    "test_train.py::test_torchrun_two_processes_follow_the_single_process_curve",
    "test_checkpoint.py::test_killed_run_resumes_to_bit_identical_weights",
    "test_exercises.py::test_known_wrong_answers_fail_with_their_message[9.C]",
    "test_exercises.py::test_reference_passes[9.C]",
    "test_exercises.py::test_reference_passes[2.1]",
    "test_exercises_holes.py::test_generic_wrong_answers_fail_with_a_case_named[9.C]",
    "test_exercises_holes.py::test_each_folded_solution_pastes_into_its_chapter[9.C]",
    "test_ci_scripts.py::test_the_switches_take_effect_on_this_machine",
    "test_mutants.py::",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        node = item.nodeid.removeprefix("tests/")
        if node.startswith(SLOW):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _no_figure_from_an_earlier_test():
    """Start every test with no open matplotlib figure, so a test that checks its own figures
    are closed (plt.get_fignums() == []) is not failed by another test in the same worker."""
    import sys
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")
    yield
