"""Chapter 8's checks accept right answers written differently from the library's (float32,
PyTorch, other constructions) and refuse plausible wrong ones that the shared tests do not
name: a model that counts positions instead of reading tokens, a text loss that never
looks at the text's windows. The shared tests (test_exercises.py, test_mutants.py) hold the
rest."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from anatomy.blocks import block, layer_norm
from anatomy.exercises import PASSED, ch08, registry
from anatomy.gpt_numpy import forward, generate, next_token_loss
from anatomy.params import GPTConfig, block_params, param_shapes

EXERCISES = registry()
SEEDS = range(4)


def _passes(exercise_id, answer):
    for seed in SEEDS:
        result = EXERCISES[exercise_id].check(answer, quiet=True, seed=seed)
        assert result.status == PASSED, f"seed {seed}: {result.message}"


def test_embed_by_take_passes():
    _passes("8.1", lambda tok_emb, pos_emb, ids: np.take(tok_emb, ids, axis=0)
            + pos_emb[:np.shape(ids)[-1]])


def test_loss_in_float32_torch_passes():
    # Chapter 9's way: F.cross_entropy on float32 tensors, a tensor scalar as the result.
    def torch_loss(logits, ids):
        z = torch.as_tensor(np.asarray(logits, dtype=np.float32))
        targets = torch.as_tensor(np.asarray(ids))[..., 1:].reshape(-1).long()
        return F.cross_entropy(z[..., :-1, :].reshape(-1, z.shape[-1]), targets)
    _passes("8.2", torch_loss)


def test_loss_in_float32_numpy_passes():
    def float32_loss(logits, ids):
        z = np.asarray(logits, dtype=np.float32)[..., :-1, :]
        z = z - z.max(axis=-1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        return -np.take_along_axis(log_p, ids[..., 1:, None], axis=-1).mean()
    _passes("8.2", float32_loss)


def test_generate_fixed_another_way_passes():
    def fixed(params, ids, cfg, n_new, temperature=0.0, top_k=None, rng=None):
        ids = np.asarray(ids)
        for _ in range(n_new):
            start = max(0, ids.shape[-1] - cfg.ctx)
            last = forward(params, ids[..., start:], cfg)[..., -1, :]
            if temperature == 0:
                nxt = last.argmax(axis=-1)
            else:
                nxt = ch08.sample(ch08.next_token_distribution(last, temperature, top_k), rng)
            ids = np.concatenate([ids, nxt[..., None]], axis=-1)
        return ids
    _passes("8.4", fixed)


def test_the_given_generator_is_not_attempted_and_goes_wrong_past_ctx():
    assert EXERCISES["8.4"].check(ch08._given_generate, quiet=True).status == "not attempted"
    cfg = ch08._GEN_CFG
    params = ch08._random_params(cfg, np.random.default_rng(4), scale=0.5)
    prompt = np.array([1, 2, 3])
    buggy = ch08._given_generate(params, prompt, cfg, 10)
    right = generate(params, prompt, cfg, 10)
    np.testing.assert_array_equal(buggy[:cfg.ctx + 1], right[:cfg.ctx + 1])
    assert not np.array_equal(buggy, right)
    assert len(set(buggy[cfg.ctx:].tolist())) == 1     # stuck on one token, as the text says


@pytest.mark.parametrize("V", [2, 3, 5, 8])
def test_cycle_params_writes_the_cycle(V):
    cfg = GPTConfig(V=V, ctx=6, d=2 * V, L=2, h=2, d_ff=V)
    params = ch08.cycle_params(cfg)
    assert {k: v.shape for k, v in params.items()} == param_shapes(cfg)
    text = generate(params, np.array([0]), cfg, n_new=20)
    np.testing.assert_array_equal(text, np.arange(21) % V)


def test_another_cycle_construction_passes():
    def mine(cfg):
        params = ch08.cycle_params(cfg)
        params["blocks.0.W_2"] *= 3.0                 # a louder write
        params["blocks.0.b_1"][:] = -0.5              # units fire a little later
        return params
    _passes("8.5", mine)


def test_a_model_that_counts_positions_fails():
    # Right from "a" at position 0 (the prediction follows the position, not the token),
    # wrong on any other prompt.
    def by_position(cfg):
        params = {name: np.zeros(shape) for name, shape in param_shapes(cfg).items()}
        for name in params:
            if name.endswith("_g"):
                params[name][:] = 1.0
        nxt = (np.arange(cfg.ctx) + 1) % cfg.V
        params["tok_emb"][:, :cfg.V] = np.eye(cfg.V)
        params["pos_emb"][np.arange(cfg.ctx), nxt] = 10.0
        return params
    result = EXERCISES["8.5"].check(by_position, quiet=True, seed=0)
    assert result.status == "failed" and "should be" in result.message, result.message


def test_text_loss_all_windows_at_once_passes():
    def at_once(params, ids, cfg):
        n = len(ids) // cfg.ctx
        rows = np.asarray(ids)[:n * cfg.ctx].reshape(n, cfg.ctx)     # [n, ctx]
        return next_token_loss(forward(params, rows, cfg), rows)
    _passes("8.6", at_once)


def test_text_loss_check_works_without_tiny_shakespeare(monkeypatch):
    monkeypatch.setattr(ch08, "_validation_text", lambda: None)
    where, ids = ch08._stretch(np.random.default_rng(0), 100)
    assert "random characters" in where and ids.shape == (100,)
    result = EXERCISES["8.6"].check(EXERCISES["8.6"].reference, quiet=True, seed=0)
    assert result.status == PASSED, result.message


def test_forward_from_blocks_passes():
    def from_blocks(params, ids, cfg):
        T = ids.shape[-1]
        x = params["tok_emb"][ids] + params["pos_emb"][:T]              # [..., T, d]
        for i in range(cfg.L):
            x = block(x, block_params(params, i), cfg.h)                # [..., T, d]
        x = layer_norm(x, params["lnf_g"], params["lnf_b"])
        head = params["tok_emb"] if cfg.tied else params["head"]        # [V, d]
        return x @ head.T                                               # [..., T, V]
    _passes("8.C", from_blocks)
