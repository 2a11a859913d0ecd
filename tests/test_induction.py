"""anatomy.induction: the repeated sequences, the training windows, the two halves' losses
and the hand-set copier; and the attention-only switch of GPTConfig that its model uses."""

import numpy as np
import pytest
import torch

from anatomy.gpt_numpy import forward, lm_loss
from anatomy.gpt_torch import GPT, from_numpy, to_numpy_params
from anatomy.induction import (
    copier_weights,
    copy_pairs_batch,
    half_losses,
    half_masks,
    repeated_tokens,
)
from anatomy.params import GPTConfig, count_breakdown, count_params, init_params, param_shapes
from anatomy.train import TrainConfig

ATTN = GPTConfig(V=11, ctx=12, d=16, L=2, h=4, attn_only=True)


def _noisy(cfg, seed=0):
    rng = np.random.default_rng(seed)
    return {k: v + rng.normal(0, 0.3, v.shape) for k, v in init_params(cfg, seed).items()}


def test_repeated_tokens_repeat_their_first_half_and_follow_the_seed():
    ids = repeated_tokens(3, 5, 8, 7)
    assert ids.shape == (5, 8) and ids.min() >= 0 and ids.max() < 7
    assert np.array_equal(ids[:, :4], ids[:, 4:])
    assert np.array_equal(ids, repeated_tokens(3, 5, 8, 7))
    assert not np.array_equal(ids, repeated_tokens(4, 5, 8, 7))
    with pytest.raises(ValueError, match="seq_len: expected an even length >= 4"):
        repeated_tokens(0, 2, 7, 5)
    with pytest.raises(ValueError, match="rng: expected a np.random.Generator or a seed"):
        repeated_tokens(-1, 2, 8, 5)
    with pytest.raises(ValueError, match="n_seq"):
        repeated_tokens(0, 0, 8, 5)


def test_copy_pairs_windows_copy_first_half_bigrams_at_random_places():
    rng = np.random.default_rng(0)
    ids, copied = copy_pairs_batch(rng, 300, 17, 50, 3)
    assert ids.shape == copied.shape == (300, 17) and ids.min() >= 0 and ids.max() < 50
    assert (copied.sum(axis=1) == 3).all() and not copied[:, :9].any()
    places = set()
    for row, marks in zip(ids, copied, strict=True):
        for q in np.flatnonzero(marks):                    # ids[q-1], ids[q] copy a bigram
            p = q - 1
            assert any(row[j] == row[p] and row[j + 1] == row[q] for j in range(7))
            places.add(int(p))
    assert places == set(range(8, 16))                     # every place of the second half
    again, _ = copy_pairs_batch(np.random.default_rng(0), 300, 17, 50, 3)
    assert np.array_equal(ids, again)
    assert all(len(set(row[:8])) == 8 for row in ids)     # the first half: distinct ids
    with pytest.raises(ValueError, match="T: expected at most V = 12 ids"):
        copy_pairs_batch(rng, 2, 17, 12, 3)
    with pytest.raises(ValueError, match="pairs: expected at most 4 bigrams for windows of"):
        copy_pairs_batch(rng, 2, 17, 50, 5)
    with pytest.raises(ValueError, match="pairs"):
        copy_pairs_batch(rng, 2, 17, 50, 0)


def test_half_masks_and_losses_pick_each_half():
    first, repeat = half_masks(2, 8)
    assert first[0].tolist() == [False, True, True, True, False, False, False, False]
    assert repeat[0].tolist() == [False] * 5 + [True] * 3
    params = _noisy(ATTN)
    ids = repeated_tokens(1, 3, 12, ATTN.V)
    logits = forward(params, ids, ATTN)
    lp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    nll = -np.take_along_axis(lp[:, :-1], ids[:, 1:, None], -1)[..., 0]       # [n, T-1]
    want = (nll[:, 0:5].mean(), nll[:, 6:].mean())         # targets 1..5 and 7..11
    assert half_losses(params, ATTN, ids) == pytest.approx(want, abs=1e-10)
    with pytest.raises(ValueError, match="second half repeats the first"):
        half_losses(params, ATTN, np.arange(8)[None] % ATTN.V)


def test_attention_only_config_drops_the_mlp_from_the_table():
    names = param_shapes(ATTN)
    assert not any(k.split(".")[-1] in ("ln2_g", "ln2_b", "W_1", "b_1", "W_2", "b_2")
                   for k in names)
    full = GPTConfig(V=11, ctx=12, d=16, L=2, h=4)
    assert count_params(full) - count_params(ATTN) == 2 * (2 * 16 + 2 * 16 * 64 + 64 + 16)
    assert count_breakdown(ATTN)["MLP per block"] == 0
    with pytest.raises(ValueError, match="cfg.attn_only: expected True or False"):
        GPTConfig(V=11, ctx=12, d=16, L=2, h=4, attn_only=1)
    assert TrainConfig(attn_only=True).model_config(11).attn_only
    with pytest.raises(ValueError, match="TrainConfig.attn_only"):
        TrainConfig(attn_only="yes")


def test_attention_only_forward_is_embedding_plus_attention_writes_and_matches_torch():
    params = _noisy(ATTN)
    ids = np.random.default_rng(2).integers(0, ATTN.V, size=(3, 10))
    logits, trace = forward(params, ids, ATTN, return_trace=True)
    assert all(not trace[f"blocks.{i}.mlp"].any() for i in range(ATTN.L))
    stream = trace["embed"] + trace["blocks.0.attn"] + trace["blocks.1.attn"]
    assert np.allclose(stream, trace["blocks.1.out"], atol=1e-12)
    assert forward(params, ids[0], ATTN).shape == (10, ATTN.V)          # [T] as well as [B, T]
    with torch.no_grad():
        theirs = from_numpy(params, ATTN)(torch.from_numpy(ids)).numpy()
    assert np.abs(logits - theirs).max() < 1e-10                        # float64 both
    model = GPT(ATTN)
    assert sorted(to_numpy_params(model)) == sorted(param_shapes(ATTN))
    assert model.num_params() == count_params(ATTN)


def test_the_hand_set_copier_copies_on_fresh_sequences():
    rng = np.random.default_rng(5)
    for V, ctx in [(10, 20), (6, 12), (16, 32)]:
        cfg = GPTConfig(V=V, ctx=ctx, d=2 * V + ctx, L=2, h=1, attn_only=True)
        params = copier_weights(cfg)
        for _ in range(20):
            half = int(rng.integers(2, min(V, ctx // 2) + 1))
            first = rng.permutation(V)[:half]
            ids = np.concatenate([first, first])
            assert np.array_equal(forward(params, ids, cfg)[half:-1].argmax(-1), ids[half + 1:])
        assert lm_loss(params, np.concatenate([first, first]), cfg) < 3.0
    with pytest.raises(ValueError, match="d = 2V \\+ ctx"):
        copier_weights(GPTConfig(V=10, ctx=20, d=48, L=2, h=1, attn_only=True))
