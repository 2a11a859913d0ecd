"""anatomy.interp: attention patterns, head-role scores, direct logit attribution and the
position table's similarity, on small random models and on the shipped character model."""

import numpy as np
import pytest

from anatomy import interp
from anatomy.attention import softmax
from anatomy.blocks import layer_norm, mlp
from anatomy.blocks import layer_norm as _ln
from anatomy.gpt_numpy import embed, forward, lm_loss
from anatomy.interp import (
    PatchRecovery,
    ablate_heads,
    after_blank_line,
    attention_patterns,
    cosine_similarity,
    direct_logit_attribution,
    first_key_weight,
    head_scores,
    logit_diff,
    logit_diff_attribution,
    patch_recovery,
    position_similarity,
    role_targets,
    windows_by_start,
)
from anatomy.params import GPTConfig, block_params, init_params
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
    assert keys("last space", 5) == [2] and keys("last space", 9) == [6]
    assert keys("last space", 1) is None
    # not itself (a space query) nor the character just before: "self" and "previous"
    assert keys("last space", 10) is None and keys("last space", 11) is None
    assert keys("last space", 3) is None and keys("last space", 12) == [10]
    assert keys("line start", 9) == [7] and keys("line start", 8) is None
    assert keys("last newline", 13) == [6] and keys("last newline", 5) is None
    assert keys("last newline", 6) is None and keys("last newline", 7) is None
    assert keys("last newline", 8) == [6]
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
    assert named == [(1, 1, "last space", 0.61, 0.05),      # the gap before the current word
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
    ids = np.array([[0, 1, 2, 1, 1]])               # "ab\nbb" with 1 = "b", 2 = "\n"
    targets, defined = interp.role_targets(ids, whitespace_ids=(2,), newline_ids=(2,))[
        "last space"]
    assert defined[0].tolist() == [False, False, False, False, True]   # 2+ back only
    assert targets[0, 4].tolist() == [False, False, True, False, False]   # the newline at 2
    assert "newline" in interp.ROLE_WORDS["last space"]


# ---------------------------------------------------------------- ablation, attribution, patching


def _trace_with_heads(params, ids, cfg):
    store = {}
    logits, trace = forward(params, ids, cfg, return_trace=True,
                            edit=interp._recorder(params, store))
    return logits, trace, store


def test_head_writes_sum_to_the_attention_write():
    params = _noisy(SMALL)
    ids = np.random.default_rng(1).integers(0, SMALL.V, size=(3, 9))
    logits, trace, store = _trace_with_heads(params, ids, SMALL)
    assert np.array_equal(logits, forward(params, ids, SMALL))   # recording changes nothing
    for i in range(SMALL.L):
        assert store[i].shape == (3, SMALL.h, 9, SMALL.d)
        total = store[i].sum(axis=1) + params[f"blocks.{i}.b_o"]
        assert np.allclose(total, trace[f"blocks.{i}.attn"], atol=1e-12)


def _without_head(params, layer, head, cfg, add=None):
    """The same model with one head's rows of W_o zeroed (and ``add`` [d] put into b_o)."""
    dh = cfg.d_head
    W_o = params[f"blocks.{layer}.W_o"].copy()
    W_o[head * dh:(head + 1) * dh] = 0
    b_o = params[f"blocks.{layer}.b_o"] + (0 if add is None else add)
    return {**params, f"blocks.{layer}.W_o": W_o, f"blocks.{layer}.b_o": b_o}


def test_ablate_heads_equals_editing_the_weights():
    params = _noisy(SMALL)
    ids = np.random.default_rng(3).integers(0, SMALL.V, size=(5, 10))
    assert ablate_heads(params, SMALL, ids, []) == pytest.approx(lm_loss(params, ids, SMALL))
    # zero: that head's rows of W_o are zero (b_o stays)
    zeroed = _without_head(params, 1, 2, SMALL)
    assert ablate_heads(params, SMALL, ids, [(1, 2)], how="zero") == pytest.approx(
        lm_loss(zeroed, ids, SMALL), abs=1e-12)
    # mean: the head's rows zeroed and its mean write over every position added to b_o
    _, _, store = _trace_with_heads(params, ids, SMALL)
    mean = store[0][:, 3].mean(axis=(0, 1))                       # [B, T, d] -> [d]
    meaned = _without_head(params, 0, 3, SMALL, add=mean)
    got = ablate_heads(params, SMALL, ids, [(0, 3)], how="mean", batch=2)   # batches too
    assert got == pytest.approx(lm_loss(meaned, ids, SMALL), abs=1e-12)
    # two heads of one layer, and a [T] sequence
    both = _without_head(_without_head(params, 1, 0, SMALL), 1, 1, SMALL)
    assert ablate_heads(params, SMALL, ids[0], [(1, 0), (1, 1)], how="zero") == pytest.approx(
        lm_loss(both, ids[0], SMALL), abs=1e-12)
    assert ablate_heads(params, SMALL, ids, [(0, 0)]) != ablate_heads(params, SMALL, ids, [])


def test_ablate_heads_where_averages_only_the_marked_predictions():
    params = _noisy(SMALL)
    ids = np.random.default_rng(4).integers(0, SMALL.V, size=(4, 10))
    every = np.ones(ids.shape, bool)
    every[:, 0] = False
    assert ablate_heads(params, SMALL, ids, [(0, 1)], where=every) == pytest.approx(
        ablate_heads(params, SMALL, ids, [(0, 1)]), abs=1e-12)
    one = np.zeros(ids.shape, bool)
    one[2, 7] = True                                  # the prediction of ids[2, 7] alone
    logits = forward(params, ids, SMALL)
    log_p = logits[2, 6] - np.log(np.exp(logits[2, 6]).sum())
    assert ablate_heads(params, SMALL, ids, [], where=one) == pytest.approx(-log_p[ids[2, 7]])
    with pytest.raises(ValueError, match="where: column 0 marks the first id"):
        ablate_heads(params, SMALL, ids, [], where=np.ones(ids.shape, bool))
    with pytest.raises(ValueError, match="where: marks no prediction"):
        ablate_heads(params, SMALL, ids, [], where=np.zeros(ids.shape, bool))
    with pytest.raises(ValueError, match=r"where: expected booleans shaped like ids \(4, 10\)"):
        ablate_heads(params, SMALL, ids, [], where=every[:, 1:])


def test_ablate_heads_errors():
    params = _noisy(SMALL)
    ids = np.arange(8) % SMALL.V
    with pytest.raises(ValueError, match=r"heads: no head \(2, 0\) in this model: layers 0..1"):
        ablate_heads(params, SMALL, ids, [(2, 0)])
    with pytest.raises(ValueError, match=r"heads: no head \(0, 4\).*heads 0..3"):
        ablate_heads(params, SMALL, ids, [(0, 4)])
    with pytest.raises(ValueError, match="heads: expected a list of .* got one pair"):
        ablate_heads(params, SMALL, ids, (0, 1))
    with pytest.raises(ValueError, match="heads: expected \\(layer, head\\) pairs"):
        ablate_heads(params, SMALL, ids, [(0, 1.0)])
    with pytest.raises(ValueError, match="how: expected 'mean' or 'zero', got 'max'"):
        ablate_heads(params, SMALL, ids, [(0, 1)], how="max")
    with pytest.raises(ValueError, match=r"ids: expected integers in \[0, V\) = \[0, 11\)"):
        ablate_heads(params, SMALL, np.array([1, 2, 11]), [(0, 1)])
    with pytest.raises(ValueError, match="ids: T=13 exceeds ctx=12"):
        ablate_heads(params, SMALL, np.zeros(13, int), [(0, 1)])
    with pytest.raises(ValueError, match="ids: expected T >= 2"):
        ablate_heads(params, SMALL, np.array([3]), [(0, 1)])


@pytest.mark.parametrize("tied", [True, False])
def test_logit_diff_attribution_sums_to_the_difference_and_splits_by_head(tied):
    cfg = GPTConfig(V=11, ctx=12, d=16, L=3, h=4, tied=tied)
    params = {k: v.astype(np.float32) for k, v in _noisy(cfg, 6).items()}
    ids = np.random.default_rng(7).integers(0, cfg.V, size=9)
    logits = forward({k: v.astype(np.float64) for k, v in params.items()}, ids, cfg)[-1]
    for target, other in [(3, 5), (0, 10), (4, "mean")]:
        want = float(logit_diff(logits, target, other))
        parts = logit_diff_attribution(params, cfg, ids, target, other)
        assert abs(sum(parts.values()) - want) < 1e-10
        heads = logit_diff_attribution(params, cfg, ids, target, other, by_head=True)
        assert abs(sum(heads.values()) - want) < 1e-10
        for i in range(cfg.L):
            mine = [v for k, v in heads.items() if k.startswith(f"blocks.{i}.head")
                    or k == f"blocks.{i}.b_o"]
            assert len(mine) == cfg.h + 1
            assert sum(mine) == pytest.approx(parts[f"blocks.{i}.attn"], abs=1e-10)
    # against a token: the difference of two raw attributions, piece by piece
    raw_t = direct_logit_attribution(params, ids, cfg, -1, 3)
    raw_o = direct_logit_attribution(params, ids, cfg, -1, 5)
    parts = logit_diff_attribution(params, cfg, ids, 3, 5)
    assert list(parts) == list(raw_t)
    for name in parts:
        assert parts[name] == pytest.approx(raw_t[name] - raw_o[name], abs=1e-10)
    # centred: a push along the mean unembedding row, which raises every logit, counts 0
    assert logit_diff(np.full(cfg.V, 7.0), 2, "mean") == 0.0


def test_logit_diff_attribution_errors():
    params = _noisy(SMALL)
    ids = np.arange(6)
    with pytest.raises(ValueError, match=r"target: expected a token id in \[0, V\)"):
        logit_diff_attribution(params, SMALL, ids, 11, 0)
    with pytest.raises(ValueError, match=r"other: expected a token id in \[0, V\)"):
        logit_diff_attribution(params, SMALL, ids, 1, -1)
    with pytest.raises(ValueError, match="other: expected a token id or 'mean', got 'avg'"):
        logit_diff_attribution(params, SMALL, ids, 1, "avg")
    with pytest.raises(ValueError, match="other: expected a token other than target = 1"):
        logit_diff_attribution(params, SMALL, ids, 1, 1)
    with pytest.raises(ValueError, match=r"ids: expected one sequence \[T\]"):
        logit_diff_attribution(params, SMALL, ids[None], 1, 2)
    with pytest.raises(ValueError, match=r"ids: expected integers in \[0, V\)"):
        logit_diff_attribution(params, SMALL, np.array([0, 12]), 1, 2)


def test_patch_recovery_of_the_last_block_by_hand():
    cfg = GPTConfig(V=11, ctx=12, d=16, L=2, h=4)
    params = _noisy(cfg, 8)
    clean = np.random.default_rng(9).integers(0, cfg.V, size=10)
    corrupt = clean.copy()
    corrupt[4] = (corrupt[4] + 1) % cfg.V                    # one character differs
    target, other = 2, 7
    rec = patch_recovery(params, cfg, clean, corrupt, target, other)
    assert isinstance(rec, PatchRecovery)
    assert rec.heads.shape == (2, 4) and rec.mlps.shape == (2,)
    assert rec.clean == pytest.approx(float(logit_diff(forward(params, clean, cfg)[-1],
                                                       target, other)))
    # By hand, block 1 (the last): the stream before its MLP, and the head and MLP writes.
    _, tc, sc = _trace_with_heads(params, clean, cfg)
    _, tx, sx = _trace_with_heads(params, corrupt, cfg)
    unembed = params["tok_emb"]

    def ld(stream):                                          # [T, d] -> logit difference
        z = _ln(stream, params["lnf_g"], params["lnf_b"])[-1] @ unembed.T
        return z[target] - z[other]

    span = rec.clean - rec.corrupt
    before_mlp = tx["blocks.1.out"] - tx["blocks.1.mlp"]     # [T, d]
    assert (ld(before_mlp + tc["blocks.1.mlp"]) - rec.corrupt) / span == pytest.approx(
        rec.mlps[1], abs=1e-10)
    p = block_params(params, 1)
    x = tx["blocks.0.out"] + tx["blocks.1.attn"] - sx[1][2] + sc[1][2]   # head 2 patched
    out = x + mlp(_ln(x, p["ln2_g"], p["ln2_b"]), p["W_1"], p["b_1"], p["W_2"], p["b_2"])
    assert (ld(out) - rec.corrupt) / span == pytest.approx(rec.heads[1, 2], abs=1e-10)
    # All four heads of block 1 at once: its whole clean attention write (b_o is shared).
    assert rec.attns.shape == (2,)
    x = tx["blocks.0.out"] + tc["blocks.1.attn"]
    out = x + mlp(_ln(x, p["ln2_g"], p["ln2_b"]), p["W_1"], p["b_1"], p["W_2"], p["b_2"])
    assert (ld(out) - rec.corrupt) / span == pytest.approx(rec.attns[1], abs=1e-10)
    # Patching with the clean run itself gives everything back, for every sublayer.
    same = patch_recovery(params, cfg, clean, clean[::-1].copy(), target, other)
    assert np.all(np.isfinite(same.heads)) and np.all(np.isfinite(same.mlps))


def test_patch_recovery_errors():
    params = _noisy(SMALL)
    ids = np.arange(6)
    with pytest.raises(ValueError, match="clean, corrupt: expected two sequences"):
        patch_recovery(params, SMALL, ids, ids[:5], 1, 2)
    with pytest.raises(ValueError, match="the two runs give the same logit difference"):
        patch_recovery(params, SMALL, ids, ids.copy(), 1, 2)
    with pytest.raises(ValueError, match=r"corrupt: expected integers in \[0, V\)"):
        patch_recovery(params, SMALL, ids, ids + 6, 1, 2)
    with pytest.raises(ValueError, match="other: expected a token other than target"):
        patch_recovery(params, SMALL, ids, ids[::-1].copy(), 2, 2)


def test_after_blank_line_marks_the_line_after_two_newlines():
    tok = CharTokenizer("abAB:\n")
    text = "ab\n\nAB:\nab\nAB\n\nA"
    ids = np.array(tok.encode(text))
    flags = after_blank_line(ids, tok.encode("\n")[0])
    marked = "".join(ch for ch, m in zip(text, flags, strict=True) if m)
    assert marked == "AB:" + "A"                           # not "ab" nor the second "AB"
    assert after_blank_line(ids[None], tok.encode("\n")[0]).shape == (1, len(text))


def test_windows_by_start_groups_every_window_by_how_it_begins():
    text = "ab\nCd Xe,\n\nfgh"
    tok = CharTokenizer(text)
    kinds = windows_by_start(text, tok, 3)
    got = {k: [tok.decode(r.tolist()) for r in w] for k, w in kinds.items()}
    # not the window at 0 (its previous character is unknown) nor any that begins on "\n"
    assert got == {"a line": ["Cd ", "fgh"], "a capital": ["Xe,"],
                   "a lower-case letter": ["b\nC", "d X", "e,\n"], "a space": [" Xe"],
                   "punctuation": [",\n\n"]}
    assert list(got) == list(interp.START_KINDS)
    with pytest.raises(ValueError, match="expected at least T \\+ 1 = 15 characters"):
        windows_by_start(text, tok, 14)


def test_first_key_weight_of_a_uniform_head_and_of_a_head_on_key_0(monkeypatch):
    tok = CharTokenizer("ab\n")
    nl = tok.encode("\n")[0]
    ids = np.array([tok.encode("abab\nab"), tok.encode("ababab\n")])     # [2, 7]
    params = init_params(SMALL, 0)
    _fake_patterns(monkeypatch, lambda T: np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None])
    uniform = first_key_weight(params, ids, SMALL, nl)
    # before a newline: t = 2, 3 in row 0 and t = 2..5 in row 1; after: t = 4..6 and t = 6
    assert uniform.uniform_before == pytest.approx(np.mean(1 / np.array([3, 4, 3, 4, 5, 6])))
    assert uniform.uniform_after == pytest.approx(np.mean(1 / np.array([5, 6, 7, 7])))
    assert np.allclose(uniform.before, uniform.uniform_before)
    assert np.allclose(uniform.after, uniform.uniform_after)
    first = np.zeros((7, 7))
    first[:, 0] = 1.0                        # every query on key 0
    _fake_patterns(monkeypatch, lambda T: first[:T, :T])
    on_first = first_key_weight(params, ids, SMALL, nl)
    assert on_first.before.shape == (SMALL.L, SMALL.h)
    assert np.allclose(on_first.before, 1.0) and np.allclose(on_first.after, 1.0)
    assert np.isnan(first_key_weight(params, ids[1, :6], SMALL, nl).after).all()
    with pytest.raises(ValueError, match="every query t >= 2 has a newline in view"):
        first_key_weight(params, np.array(tok.encode("a\nab")), SMALL, nl)
    with pytest.raises(ValueError, match="expected T >= 3"):
        first_key_weight(params, ids[:, :2], SMALL, nl)


# ---------------------------------------------------------------- causes, on the shipped model


@pytest.fixture(scope="module")
def passage():
    from anatomy.examples import PASSAGE
    from anatomy.weights import windows

    params, cfg, tok = load("shakespeare-char")
    return params, cfg, tok, windows(np.array(tok.encode(PASSAGE)), cfg.ctx)   # [20, 64]


def test_shipped_model_names_do_not_predict_what_ablation_costs(passage):
    # Chapter 4's table: mean-ablating each head alone, over the 20 windows of PASSAGE.
    params, cfg, _, rows = passage
    base = ablate_heads(params, cfg, rows, [])
    cost = np.array([[ablate_heads(params, cfg, rows, [(i, k)]) - base for k in range(cfg.h)]
                     for i in range(cfg.L)])                              # [L, h]
    order = [divmod(int(j), cfg.h) for j in np.argsort(-cost, axis=None)]
    assert order[:4] == [(0, 2), (0, 1), (0, 0), (0, 3)]   # layer 0 first, named or not
    assert 0.6 < cost[0, 2] < 0.85 and 0.2 < cost[0, 1] < 0.4     # measured 0.73, 0.30
    assert order.index((1, 3)) >= 8 and cost[1, 3] < 0.05        # the named newline head


def test_shipped_previous_character_head_is_made_by_the_positions(passage):
    params, cfg, tok, rows = passage
    flat = {**params, "pos_emb": np.zeros_like(params["pos_emb"])}
    before = head_scores(params, rows, cfg, tok)
    after = head_scores(flat, rows, cfg, tok)
    assert round(float(before.scores["previous"][0, 2]), 2) == 0.55
    assert abs(after.scores["previous"][0, 2] - after.uniform["previous"]) < 0.01   # 0.060


def test_shipped_newline_head_looks_at_key_0_by_what_begins_the_window(passage):
    # Chapter 4: L1H3's column at key 0 depends on the window's first character.
    from anatomy.examples import PASSAGE

    params, cfg, tok, rows = passage
    nl = tok.encode("\n")[0]
    kinds = windows_by_start(PASSAGE, tok, cfg.ctx)
    assert len(kinds["a line"]) == 37 and len(kinds["a capital"]) == 78
    w = {k: first_key_weight(params, v, cfg, nl) for k, v in kinds.items()}
    w["cut"] = first_key_weight(params, rows, cfg, nl)
    assert w["a line"].before[1, 3] > max(0.3, 4 * w["a line"].uniform_before)   # 0.37, 0.08
    assert w["a capital"].before[1, 3] > w["a capital"].uniform_before + 0.1   # 0.30, 0.17
    for k in ("cut", "a lower-case letter", "a space"):                        # near uniform
        assert abs(w[k].before[1, 3] - w[k].uniform_before) < 0.03, k
    for one in w.values():
        assert one.after[1, 3] < 0.06
        others = np.delete(one.before.ravel(), 1 * cfg.h + 3)
        assert (others < one.uniform_before + 0.04).all()


def test_shipped_logit_difference_against_the_runner_up(passage):
    from anatomy.examples import PASSAGE

    params, cfg, tok, _ = passage
    ids = np.array(tok.encode(PASSAGE[:50]))                  # "...\n\nBAPTISTA"
    colon, ell = tok.encode(":")[0], tok.encode("L")[0]
    logits = forward({k: v.astype(np.float64) for k, v in params.items()}, ids, cfg)[-1]
    assert int(np.argsort(-logits)[1]) == ell                  # the runner-up
    parts = logit_diff_attribution(params, cfg, ids, colon, ell)
    raw = direct_logit_attribution(params, ids, cfg, -1, colon)
    assert raw["blocks.3.attn"] > 1.5 and parts["blocks.3.attn"] < -0.3   # +1.82 vs -0.42
    assert parts["blocks.1.mlp"] > parts["blocks.0.mlp"]                  # 3.68 vs 3.17


# ---------------------------------------------------------------- induction scores, composition


def test_induction_scores_of_a_uniform_head_and_of_a_hand_set_copier():
    from anatomy.induction import copier_weights, repeated_tokens

    cfg = GPTConfig(V=11, ctx=12, d=16, L=2, h=4, attn_only=True)
    flat = {k: (np.zeros_like(v) if "W_qkv" in k else v) for k, v in _noisy(cfg).items()}
    scores = interp.induction_scores(flat, cfg, 5, 12, 0)        # every head uniform
    assert scores.shape == (2, 4)
    assert np.allclose(scores, np.mean(1 / (np.arange(6, 12) + 1)), atol=1e-12)
    copier = GPTConfig(V=10, ctx=20, d=40, L=2, h=1, attn_only=True)
    got = interp.induction_scores(copier_weights(copier), copier, 50, 20, 3)
    assert got[1, 0] > 0.5 and got[0, 0] < 0.2     # block 1 copies; block 0 looks back one
    ids = repeated_tokens(3, 50, 20, copier.V)
    assert np.array_equal(got, interp.repeat_attention(copier_weights(copier), copier, ids))
    with pytest.raises(ValueError, match="seq_len: expected at most ctx = 12 tokens, got 14"):
        interp.induction_scores(flat, cfg, 5, 14, 0)
    with pytest.raises(ValueError, match="seed: expected an integer >= 0"):
        interp.induction_scores(flat, cfg, 5, 12, -1)
    with pytest.raises(ValueError, match="seq_len: expected an even length"):
        interp.induction_scores(flat, cfg, 5, 9, 0)
    with pytest.raises(ValueError, match="second half repeats the first"):
        interp.repeat_attention(flat, cfg, np.arange(8)[None])


def test_break_path_recomputes_only_the_chosen_projection():
    cfg = GPTConfig(V=11, ctx=12, d=16, L=2, h=4, attn_only=True)
    params = _noisy(cfg, 3)
    ids = np.random.default_rng(4).integers(0, cfg.V, size=(3, 9))
    _, trace, store = _trace_with_heads(params, ids, cfg)
    write = store[0][:, 2]                                      # [B, T, d] head (0, 2)
    mean = write.mean(axis=(0, 1))                              # [d]
    x = trace["blocks.0.out"]                                   # [B, T, d], block 1's input
    p = block_params(params, 1)
    d = cfg.d
    for path, col in (("q", 0), ("k", 1), ("v", 2)):
        got = interp.break_path(params, cfg, ids, (0, 2), 1, path)
        parts = []
        for c in range(3):
            stream = x - write + mean if c == col else x
            y = _ln(stream, p["ln1_g"], p["ln1_b"]) @ p["W_qkv"][:, c * d:(c + 1) * d] \
                + p["b_qkv"][c * d:(c + 1) * d]
            parts.append(y.reshape(3, 9, 4, 4).transpose(0, 2, 1, 3))   # [B, h, T, d_head]
        scores = parts[0] @ parts[1].transpose(0, 1, 3, 2) / 2.0
        scores = np.where(np.triu(np.ones((9, 9), bool), 1), -np.inf, scores)
        weights = softmax(scores)                               # [B, h, T, T]
        assert np.allclose(got.weights, weights, atol=1e-12)
        out = (weights @ parts[2]).transpose(0, 2, 1, 3).reshape(3, 9, d) @ p["W_o"] + p["b_o"]
        logits = _ln(x + out, params["lnf_g"], params["lnf_b"]) @ params["tok_emb"].T
        assert np.allclose(got.logits, logits, atol=1e-10)
    # a head that writes nothing: cutting its path changes nothing
    silent = dict(params)
    W_o = params["blocks.0.W_o"].copy()
    W_o[8:12] = 0
    silent["blocks.0.W_o"] = W_o
    cut = interp.break_path(silent, cfg, ids, (0, 2), 1, "k", how="zero")
    assert np.allclose(cut.logits, forward(silent, ids, cfg), atol=1e-12)


def test_break_path_errors():
    cfg = GPTConfig(V=11, ctx=12, d=16, L=2, h=4, attn_only=True)
    params = _noisy(cfg)
    ids = np.arange(6)
    with pytest.raises(ValueError, match="path: expected one of 'q', 'k', 'v', got 'o'"):
        interp.break_path(params, cfg, ids, (0, 1), 1, "o")
    with pytest.raises(ValueError, match="how: expected 'mean' or 'zero'"):
        interp.break_path(params, cfg, ids, (0, 1), 1, "k", how="max")
    with pytest.raises(ValueError, match=r"layer: expected a block after the head's \(layer 1\)"):
        interp.break_path(params, cfg, ids, (1, 1), 1, "k")
    with pytest.raises(ValueError, match=r"heads: no head \(0, 4\)"):
        interp.break_path(params, cfg, ids, (0, 4), 1, "k")
    with pytest.raises(ValueError, match=r"ids: expected integers in \[0, V\)"):
        interp.break_path(params, cfg, ids + 10, (0, 1), 1, "k")
