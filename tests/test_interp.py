"""anatomy.interp: attention patterns, head-role scores, direct logit attribution and the
position table's similarity, on small random models and on the shipped character model."""

import numpy as np
import pytest

from anatomy import interp
from anatomy.attention import softmax
from anatomy.blocks import layer_norm
from anatomy.gpt_numpy import embed, forward
from anatomy.interp import (
    attention_patterns,
    cosine_similarity,
    direct_logit_attribution,
    head_scores,
    position_similarity,
    role_targets,
)
from anatomy.params import GPTConfig, init_params
from anatomy.text import CharTokenizer
from anatomy.weights import load

SMALL = GPTConfig(V=11, ctx=12, d=16, L=2, h=4)


def _noisy(cfg: GPTConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights at a scale where every part of the model matters."""
    rng = np.random.default_rng(seed)
    return {k: (v + rng.normal(0, 0.3, v.shape)) for k, v in init_params(cfg, seed).items()}


def test_attention_patterns_are_block_0s_softmax_and_stack_every_block():
    params = _noisy(SMALL)
    ids = np.random.default_rng(1).integers(0, SMALL.V, size=(3, 10))
    w = attention_patterns(params, ids, SMALL)
    assert w.shape == (SMALL.L, 3, SMALL.h, 10, 10)
    assert np.allclose(w.sum(-1), 1.0) and not np.triu(w, 1).any()   # rows sum to 1, causal
    # Block 0 by hand: LN1 of the embedding, q and k of each head, masked softmax.
    x = layer_norm(embed(params["tok_emb"], params["pos_emb"], ids),
                   params["blocks.0.ln1_g"], params["blocks.0.ln1_b"])       # [B, T, d]
    qkv = x @ params["blocks.0.W_qkv"] + params["blocks.0.b_qkv"]         # [B, T, 3d]
    dh = SMALL.d_head
    q = qkv[..., :SMALL.d].reshape(3, 10, SMALL.h, dh).transpose(0, 2, 1, 3)
    k = qkv[..., SMALL.d:2 * SMALL.d].reshape(3, 10, SMALL.h, dh).transpose(0, 2, 1, 3)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh)                    # [B, h, T, T]
    scores = np.where(np.triu(np.ones((10, 10), bool), 1), -np.inf, scores)
    assert np.allclose(w[0], softmax(scores), atol=1e-12)
    assert attention_patterns(params, ids[0], SMALL).shape == (SMALL.L, SMALL.h, 10, 10)


def test_role_targets_pick_the_right_keys():
    tok = CharTokenizer("abcdexy \n")
    #               0123456 789012 3
    ids = np.array([tok.encode("ab cde\nabc xya")])
    roles = role_targets(ids, tok.encode(" \n"), tok.encode("\n"))

    def keys(role, t):
        targets, defined = roles[role]
        return [int(j) for j in np.flatnonzero(targets[0, t])] if defined[0, t] else None

    assert keys("previous", 4) == [3] and keys("previous", 0) is None
    assert keys("self", 0) == [0] and keys("self", 13) == [13]
    assert keys("first", 5) == [0] and keys("first", 1) is None
    assert keys("word start", 5) == [3] and keys("word start", 9) == [7]   # after " ", "\n"
    assert keys("word start", 13) == [11]
    assert keys("word start", 4) is None           # its start (3) is t - 1: "previous"
    assert keys("word start", 10) is None          # a space is in no word
    assert keys("word start", 1) is None           # the word began before the window
    assert keys("last space", 5) == [2] and keys("last space", 10) == [10]
    assert keys("last space", 9) == [6] and keys("last space", 1) is None
    assert keys("line start", 9) == [7] and keys("line start", 8) is None
    assert keys("last newline", 13) == [6] and keys("last newline", 5) is None
    assert keys("line start", 5) is None           # no newline yet
    assert keys("same char", 7) == [0] and keys("same char", 13) == [0, 7]
    assert keys("same char", 8) == [1] and keys("same char", 2) is None
    assert keys("induction", 13) == [1, 8]         # what followed each earlier "a"
    assert keys("induction", 9) == [4] and keys("induction", 2) is None
    with pytest.raises(ValueError, match=r"ids: expected windows \[B, T\], got shape \(14,\)"):
        role_targets(ids[0])
    for targets, defined in roles.values():
        assert not (targets & ~np.tril(np.ones((14, 14), bool))).any()   # causal keys only
        assert (targets.any(-1) == defined).all()


def _fake_patterns(monkeypatch, make):
    """Make head_scores see the attention pattern make(T) in every head and window."""
    def patterns(params, ids, cfg):
        B, T = ids.shape
        return np.broadcast_to(make(T), (cfg.L, B, cfg.h, T, T))
    monkeypatch.setattr(interp, "attention_patterns", patterns)


def _previous_head(T):
    w = np.eye(T, k=-1)                      # query t takes everything from key t - 1
    w[0, 0] = 1.0                            # query 0 has only itself
    return w


def test_a_uniform_head_scores_the_baseline_and_a_previous_head_scores_one(monkeypatch):
    tok = CharTokenizer("abcdexy \n")
    text = "ab cde\nabc xya bad cab\nexcy ab"
    ids = np.array([tok.encode(text)[i:i + 12] for i in range(0, 20, 4)])   # [5, 12]
    params = init_params(SMALL, 0)
    _fake_patterns(monkeypatch, lambda T: np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None])
    uniform = head_scores(params, ids, SMALL, tok)
    for role in interp.ROLES:
        assert np.allclose(uniform.scores[role], uniform.uniform[role], atol=1e-12), role
    assert uniform.named() == []
    assert uniform.uniform["self"] == pytest.approx(np.mean(1 / np.arange(1, 13)))
    _fake_patterns(monkeypatch, _previous_head)
    previous = head_scores(params, ids, SMALL, tok)
    assert np.allclose(previous.scores["previous"], 1.0)
    assert np.allclose(previous.scores["self"], 1 / 12)           # only query 0 looks at itself
    assert [row[2] for row in previous.named()] == ["previous"] * SMALL.L * SMALL.h
    assert previous.queries["previous"] == 5 * 11 and previous.n_windows == 5


def test_head_scores_without_a_tokenizer_and_bad_windows():
    params = _noisy(SMALL)
    ids = np.random.default_rng(2).integers(0, SMALL.V, size=(6, 12))
    scores = head_scores(params, ids, SMALL)
    assert list(scores.scores) == ["previous", "self", "first", "same char", "induction"]
    assert all(s.shape == (SMALL.L, SMALL.h) for s in scores.scores.values())
    assert all(((0 <= s) & (s <= 1)).all() for s in scores.scores.values())
    with pytest.raises(ValueError, match=r"expected windows \[B, T\] with T >= 3"):
        head_scores(params, ids[0], SMALL)
    with pytest.raises(ValueError, match="no query in these windows has a key for role"):
        head_scores(params, np.arange(3)[None], SMALL)     # no repeated character


@pytest.mark.parametrize("tied", [True, False])
def test_direct_logit_attribution_sums_to_the_logit(tied):
    cfg = GPTConfig(V=11, ctx=12, d=16, L=3, h=4, tied=tied)
    params = {k: v.astype(np.float32) for k, v in _noisy(cfg, 3).items()}
    ids = np.random.default_rng(4).integers(0, cfg.V, size=10)
    logits = forward({k: v.astype(np.float64) for k, v in params.items()}, ids, cfg)
    for pos, target in [(0, 0), (9, 5), (-1, 10), (4, 3)]:
        pieces = direct_logit_attribution(params, ids, cfg, pos, target)
        assert list(pieces) == ["tok_emb", "pos_emb", "blocks.0.attn", "blocks.0.mlp",
                                "blocks.1.attn", "blocks.1.mlp", "blocks.2.attn",
                                "blocks.2.mlp", "lnf_b"]
        assert abs(sum(pieces.values()) - logits[pos, target]) < 1e-10
        assert max(abs(v) for v in pieces.values()) > 0.1      # the pieces are not all tiny


def test_direct_logit_attribution_freezes_the_scale_of_the_real_stream():
    # Each piece is centred, then scaled by the one 1/std of the whole final stream (not
    # normalised on its own), then read by lnf_g and the target's row of the head.
    cfg = GPTConfig(V=11, ctx=12, d=16, L=1, h=4)
    params = _noisy(cfg, 5)
    ids = np.arange(8) % cfg.V
    pieces = direct_logit_attribution(params, ids, cfg, 7, 2)
    _, trace = forward(params, ids, cfg, return_trace=True)
    x = trace["blocks.0.out"][7]
    scale = 1 / np.sqrt(x.var() + 1e-5)
    attn = trace["blocks.0.attn"][7]
    want = (attn - attn.mean()) * scale * params["lnf_g"] @ params["tok_emb"][2]
    assert pieces["blocks.0.attn"] == pytest.approx(want, abs=1e-12)
    assert pieces["lnf_b"] == pytest.approx(params["lnf_b"] @ params["tok_emb"][2])


def test_direct_logit_attribution_errors():
    params = _noisy(SMALL)
    ids = np.arange(6)
    with pytest.raises(ValueError, match=r"pos: expected an integer position in \[-T, T\) = \[-6"):
        direct_logit_attribution(params, ids, SMALL, 6, 0)
    with pytest.raises(ValueError, match=r"target: expected a token id in \[0, V\) = \[0, 11\)"):
        direct_logit_attribution(params, ids, SMALL, 0, 11)
    with pytest.raises(ValueError, match=r"ids: expected one sequence \[T\]"):
        direct_logit_attribution(params, ids[None], SMALL, 0, 0)


def test_cosine_similarity():
    table = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    sim = cosine_similarity(table)
    assert np.allclose(sim, [[1, 0, 0.5 ** 0.5], [0, 1, 0.5 ** 0.5], [0.5 ** 0.5, 0.5 ** 0.5, 1]])
    with pytest.raises(ValueError, match="row 1 is all zeros"):
        cosine_similarity(np.array([[1.0, 0.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match=r"table: expected shape \[n, d\]"):
        cosine_similarity(np.ones(3))


# ---------------------------------------------------------------- the shipped character model


@pytest.fixture(scope="module")
def shipped():
    from _local_data import DATA

    from anatomy.text import load_text, split
    from anatomy.weights import windows

    params, cfg, tok = load("shakespeare-char")
    val = np.array(split(tok.encode(load_text(DATA)))[1])
    return params, cfg, tok, windows(val, cfg.ctx)                # [1742, 64]


def test_shipped_model_has_heads_with_a_nameable_job(shipped):
    # The first 200 validation windows (12,800 queries). Over all 1742 windows the same
    # three heads come out, with 0.70, 0.55 and 0.43.
    params, cfg, tok, rows = shipped
    scores = head_scores(params, rows[:200], cfg, tok)
    named = [(layer, head, role, round(s, 2), round(u, 2))
             for layer, head, role, s, u in scores.named()]
    assert named == [(1, 1, "last space", 0.70, 0.05),      # the gap before the current word
                     (0, 2, "previous", 0.55, 0.06),        # a previous-character head
                     (1, 3, "last newline", 0.44, 0.03)]    # the end of the line before
    # No head looks at the first character of its window (no "attention sink" here).
    assert scores.scores["first"].max() < 0.06


def test_shipped_model_logit_attribution_sums_exactly(shipped):
    params, cfg, _, rows = shipped
    ids = rows[0]
    logits = forward({k: v.astype(np.float64) for k, v in params.items()}, ids, cfg)
    errors = []
    for pos in range(0, cfg.ctx, 4):
        target = int(ids[pos + 1]) if pos + 1 < cfg.ctx else int(logits[pos].argmax())
        pieces = direct_logit_attribution(params, ids, cfg, pos, target)
        errors.append(abs(sum(pieces.values()) - logits[pos, target]))
    assert max(errors) < 1e-10                              # measured: 9e-15 on logits ~10


def test_trained_positions_are_alike_when_near(shipped):
    params, cfg, _, _ = shipped
    sim = position_similarity(params, cfg)
    assert {k: v.shape for k, v in sim.items()} == {"trained": (64, 64), "untrained": (64, 64)}
    adjacent = {k: float(np.diag(v, 1).mean()) for k, v in sim.items()}
    assert round(adjacent["trained"], 2) == 0.69              # neighbours point alike
    assert abs(adjacent["untrained"]) < 0.02                  # random rows: unrelated
    assert np.allclose(np.diag(sim["trained"]), 1.0)


def test_role_words_name_every_role_and_match_how_it_is_measured():
    # one description per role; "last space" counts any whitespace, so a newline can be it
    assert set(interp.ROLE_WORDS) == set(interp.ROLES)
    ids = np.array([[0, 1, 2, 1]])                  # "ab\nb" with 1 = "b", 2 = "\n"
    targets, defined = interp.role_targets(ids, whitespace_ids=(2,), newline_ids=(2,))[
        "last space"]
    assert defined[0].tolist() == [False, False, True, True]
    assert targets[0, 3].tolist() == [False, False, True, False]   # the newline at 2
    assert "newline" in interp.ROLE_WORDS["last space"]
