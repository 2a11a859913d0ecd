"""The tokens chapter's exercises ("T.1" ... "T.C"): one merge step (implement), the UTF-8
length of four characters (predict), merges applied by frequency instead of rank (debug), a
short text that GPT-2 spells with many tokens per character (construct), the compression of
a text (measure), and BPE training itself (the challenge)."""

from __future__ import annotations

import math
from collections import Counter
from itertools import pairwise

import numpy as np

from ..tokens import (
    GPT2_PATTERN,
    bpe,
    bytes_per_token,
    gpt2_tokenizer,
    learn_merges,
    merge,
    pre_split,
    train_bpe,
)
from . import register
from ._core import Exercise, Wrong, run, run_unchanged


def _as_ids(got, *, case: str, name: str = "the result") -> list[int]:
    """The reader's return value as a list of ints, or an explanation of why it is not."""
    if got is None:
        raise Wrong(f"on {case}, {name} is None: did you forget to return it?")
    if isinstance(got, (str, bytes)) or not hasattr(got, "__iter__"):
        raise Wrong(f"on {case}, {name} is a {type(got).__name__}; expected a list of ids")
    items = list(got)
    if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in items):
        raise Wrong(f"on {case}, {name} holds {items[:6]!r}...; expected whole-number ids")
    return [int(i) for i in items]


# A small word list with a few non-ASCII words, for fresh random texts.
_WORDS = ("the", "then", "there", "these", "to", "too", "tooth", "a", "an", "and", "band",
          "sand", "low", "lower", "lowest", "new", "newer", "wide", "wider", "café", "naïve",
          "über", "日本", "語", "it's", "don't", "42", "1999", "!", "?!", "...")


def _random_text(rng: np.random.Generator, n_words: int) -> str:
    words = rng.choice(len(_WORDS), size=n_words)
    seps = rng.choice([" ", " ", " ", "  ", "\n", ", "], size=n_words)
    return "".join(_WORDS[w] + str(s) for w, s in zip(words, seps, strict=True)).strip()


# ---- T.1 one merge step (implement) -------------------------------------------------------


def _merge_cases(rng) -> list[tuple[str, list[int], tuple[int, int], int]]:
    cases = [([1, 2, 3, 1, 2], (1, 2), 9), ([7, 7, 7], (7, 7), 8), ([7, 7, 7, 7], (7, 7), 8),
             ([5, 1, 2], (1, 2), 6), ([2, 1], (1, 2), 3), ([1, 2, 3], (3, 1), 5), ([], (1, 2), 3),
             ([4], (4, 4), 5)]
    fixed = len(cases)
    for _ in range(3):
        ids = [int(i) for i in rng.integers(0, 4, size=int(rng.integers(2, 30)))]
        at = int(rng.integers(0, len(ids) - 1))
        cases.append((ids, (ids[at], ids[at + 1]), int(rng.integers(256, 1000))))
    return [(f"{'fresh ' if n >= fixed else ''}ids = {ids}, pair = {pair}, new_id = {new}",
             ids, pair, new) for n, (ids, pair, new) in enumerate(cases)]


def _diagnose_merge(fn, rng) -> None:
    for case, ids, pair, new_id in _merge_cases(rng):
        got = run_unchanged(fn, ids, pair, new_id, case=case, names=("ids", "pair", "new_id"))
        got = _as_ids(got, case=case)
        want = merge(ids, pair, new_id)
        if got == want:
            continue
        message = f"on {case}, got {got} but expected {want}"
        if want and got == want[:-1]:
            raise Wrong(message + ": the last id is lost; a position with no pair after it "
                        "is kept as it is")
        if got == _first_only(ids, pair, new_id):
            raise Wrong(message + ": only the first occurrence is merged; replace every "
                        "occurrence of the pair")
        if got == _overlapping(ids, pair, new_id):
            raise Wrong(message + ": after merging a pair, skip its second id too: both "
                        "are now the one new id")
        if pair[0] == pair[1] and len(ids) >= 3:
            raise Wrong(message + ": occurrences of a pair must not overlap; scan left to "
                        "right and, after merging one, go on after its second id")
        if new_id not in got and new_id in want:
            raise Wrong(message + f": the pair {pair} is never merged (compare the two ids of "
                        "each position with the pair's, in order)")
        raise Wrong(message + ": replace every occurrence of the pair, left to right, and "
                    "keep every other id in place")


def _merge_battery(rng):
    return [((ids, pair, new_id), {}) for _, ids, pair, new_id in _merge_cases(rng)]


def _first_only(ids, pair, new_id):
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == tuple(pair):
            return [*ids[:i], new_id, *ids[i + 2:]]
    return list(ids)


def _overlapping(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
        else:
            out.append(ids[i])
        i += 1
    return out


def _overlapping_runs(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 1 if pair[0] == pair[1] and i + 2 < len(ids) else 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _drops_last(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _in_place(ids, pair, new_id):
    i = 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == tuple(pair):
            ids[i:i + 2] = [new_id]
        i += 1
    return ids


register(Exercise(
    id="T.1",
    title="One merge step",
    kind="implement",
    reference=merge,
    diagnose=_diagnose_merge,
    battery=_merge_battery,
    unchanged=("ids",),
    success="every occurrence of the pair replaced left to right, no overlaps, the rest "
            "kept, for an empty list, a pair at the end, runs like [7, 7, 7] and fresh "
            "random ids",
    wrong_answers=(
        (_first_only, "only the first occurrence"),
        (_overlapping, "skip its second id"),
        (_overlapping_runs, "must not overlap"),
        (_drops_last, "the last id is lost"),
        (_in_place, "changed its input ids in place"),
    ),
))

# ---- T.2 the UTF-8 length of four characters (predict) ------------------------------------

_CHARS = ("ß", "A", "🚀", "∑")
_LENGTHS = tuple(len(c.encode("utf-8")) for c in _CHARS)


def _why_length(c: str) -> str:
    point = ord(c)
    n = len(c.encode("utf-8"))
    if point < 0x80:
        rule = "below U+0080, ASCII, 1 byte"
    elif point < 0x800:
        rule = "from U+0080 to U+07FF, 2 bytes"
    elif point < 0x10000:
        rule = "from U+0800 to U+FFFF, 3 bytes"
    else:
        rule = "from U+10000 on, 4 bytes"
    return f"{c!r} is U+{point:04X}, {rule} (so {n})"


def _diagnose_lengths(answer, rng) -> None:
    if isinstance(answer, (str, bytes)) or not hasattr(answer, "__iter__"):
        raise Wrong("answer with four whole numbers, one per character, e.g. (1, 1, 1, 1)")
    items = list(answer)
    if len(items) != len(_CHARS):
        raise Wrong(f"answer with {len(_CHARS)} numbers, one per character of "
                    f"{' '.join(_CHARS)}; got {len(items)}")
    try:
        got = [int(i) for i in items]
    except (TypeError, ValueError):
        raise Wrong("answer with whole numbers, e.g. (1, 1, 1, 1)") from None
    if got != items:
        raise Wrong(f"answer with whole numbers, got {items!r}")
    if got == [1] * len(_CHARS):
        raise Wrong("that is one per character, the length of the str; UTF-8 spends 1 to 4 "
                    "bytes per character")
    if got == [len(c.encode("utf-16-le")) // 2 for c in _CHARS]:
        raise Wrong("those are UTF-16 code units (what JavaScript's .length counts), not "
                    "UTF-8 bytes")
    for c, mine, want in zip(_CHARS, got, _LENGTHS, strict=True):
        if mine != want:
            raise Wrong(f"{c!r}: you said {mine}; {_why_length(c)}")


register(Exercise(
    id="T.2",
    title="How many bytes is a character?",
    kind="predict",
    reference=_LENGTHS,
    diagnose=_diagnose_lengths,
    success="the UTF-8 length grows with the code point: 1 byte for ASCII, 2 up to U+07FF, "
            "3 up to U+FFFF, 4 beyond",
    explain="; ".join(_why_length(c) for c in _CHARS) + ".",
    wrong_answers=(((1, 1, 1, 1), "one per character"), ((1, 1, 2, 1), "UTF-16"),
                   ((2, 1, 3, 3), "'🚀'"), ((2, 1, 4, 2), "'∑'"), ("2143", "four whole"),
                   ((2, 1, 4), "answer with 4 numbers")),
))

# ---- T.3 merges applied by frequency instead of rank (debug) ------------------------------


def _given_apply_merges(ids, merges):
    """Encode one chunk. `merges` maps a pair of ids to the id its merge
    made; a smaller new id was learned earlier."""
    ids = list(ids)
    while len(ids) > 1:
        seen = Counter(pairwise(ids))
        known = [p for p in seen if p in merges]
        if not known:
            break
        pair = max(known, key=seen.get)     # the pair seen most often here
        ids = merge(ids, pair, merges[pair])
    return ids


def _fixed_apply_merges(ids, merges):
    """Encode one chunk. `merges` maps a pair of ids to the id its merge
    made; a smaller new id was learned earlier."""
    ids = list(ids)
    while len(ids) > 1:
        seen = Counter(pairwise(ids))
        known = [p for p in seen if p in merges]
        if not known:
            break
        pair = min(known, key=merges.get)   # the merge learned first
        ids = merge(ids, pair, merges[pair])
    return ids


def _table(text: str, vocab_size: int) -> dict[tuple[int, int], int]:
    """The merge table of a BPE trained on ``text``: (left id, right id) -> new id."""
    tok = train_bpe(text, vocab_size)
    ids = {v: k for k, v in tok.vocab.items()}
    return {(ids[a], ids[b]): 256 + i for i, (a, b) in enumerate(tok.merges)}


_ABC = {(97, 98): 256, (98, 99): 257}                 # "ab" learned before "bc"
# "bc" learned first: rank order differs from the pairs' own order and from left to right
_CBA = {(98, 99): 256, (97, 98): 257}


def _apply_cases(rng) -> list[tuple[str, list[int], dict]]:
    cases = [("ids of 'abcab' with merges ab -> 256, then bc -> 257", list(b"abcab"), _ABC),
             ("ids of 'abcbc' with the same merges", list(b"abcbc"), _ABC),
             ("ids of 'bcab' with the same merges", list(b"bcab"), _ABC),
             ("a single id", [97], _ABC), ("no ids at all", [], _ABC),
             ("ids of 'abc' with merges bc -> 256, then ab -> 257", list(b"abc"), _CBA)]
    text = _random_text(rng, 60)
    table = _table(text, 256 + int(rng.integers(15, 40)))
    for chunk in sorted(set(text.split()), key=len, reverse=True)[:4]:
        cases.append((f"fresh chunk {chunk!r} with merges trained on a fresh random text",
                      list(chunk.encode("utf-8")), table))
    return cases


def _diagnose_apply(fn, rng) -> None:
    for case, ids, merges in _apply_cases(rng):
        got = _as_ids(run(fn, ids, merges, case=case), case=case)
        want = bpe(ids, merges)
        if got == want:
            continue
        message = f"on {case}, got {got} but expected {want}"
        if got == _given_apply_merges(ids, merges):
            raise Wrong(message + ": the merges are applied by how often their pair occurs in "
                        "this chunk; training decided the order, so apply the earliest "
                        "learned merge (the smallest new id) first")
        raise Wrong(message + ": at every step merge the pair whose merge was learned first, "
                    "until no known pair is left")


def _apply_battery(rng):
    return [((ids, merges), {}) for _, ids, merges in _apply_cases(rng)]


def _merging_by(choose):
    """A wrong encoder that merges, among the known pairs, the one ``choose`` picks."""
    def apply(ids, merges):
        ids = list(ids)
        while len(ids) > 1:
            known = [p for p in pairwise(ids) if p in merges]
            if not known:
                break
            pair = choose(known, merges)
            ids = merge(ids, pair, merges[pair])
        return ids
    return apply


_latest_first = _merging_by(lambda known, merges: max(known, key=merges.get))
_smallest_pair = _merging_by(lambda known, merges: min(known))   # smallest ids, not rank
_leftmost_known = _merging_by(lambda known, merges: known[0])


def _reverse_pass(ids, merges):
    ids = list(ids)
    for pair, new_id in sorted(merges.items(), key=lambda kv: kv[1], reverse=True):
        ids = merge(ids, pair, new_id)
    return ids


register(Exercise(
    id="T.3",
    title="Merges applied in the wrong order",
    kind="debug",
    reference=bpe,
    given=_given_apply_merges,
    shown=_fixed_apply_merges,
    diagnose=_diagnose_apply,
    battery=_apply_battery,
    success="the library's ids on 'abcab', 'abcbc', 'bcab', one id, no ids, 'abc' with "
            "'bc' learned first and fresh chunks under fresh merge tables",
    explain="The bug is `max(known, key=seen.get)`: it picks the pair that is most frequent "
            "in this one chunk. Training already decided the order, so encoding must replay "
            "it: among the known pairs, merge the one with the smallest new id. (Applying "
            "each merge once to the whole chunk, in the order learned, is the same thing.)",
    wrong_answers=(
        (_latest_first, "merge the pair whose merge was learned first"),
        (_reverse_pass, "but expected"),
        (_smallest_pair, "with merges bc -> 256, then ab -> 257"),
        (_leftmost_known, "with merges bc -> 256, then ab -> 257"),
    ),
))

# ---- T.4 many tokens per character (construct) --------------------------------------------

_MOST_CHARS = 12
_TARGET = 3.0


def _diagnose_dense(answer, rng) -> None:
    if not isinstance(answer, str):
        raise Wrong(f"answer with a string (a str), e.g. 'hello'; got a "
                    f"{type(answer).__name__}")
    if not answer:
        raise Wrong("the empty string has no characters, so it has no tokens per character; "
                    "give a non-empty string")
    if len(answer) > _MOST_CHARS:
        raise Wrong(f"{len(answer)} characters is too long: at most {_MOST_CHARS}")
    ids = gpt2_tokenizer().encode_ordinary(answer)
    rate = len(ids) / len(answer)
    if rate < _TARGET:
        raise Wrong(f"{answer!r} is {len(answer)} character(s) and {len(ids)} GPT-2 token(s), "
                    f"{rate:.2f} per character; the target is at least {_TARGET:g}. Text "
                    "that was common in GPT-2's training merges well: which characters "
                    "take the most bytes, and which of those did it rarely see?")


register(Exercise(
    id="T.4",
    title="Many tokens per character",
    kind="construct",
    reference="\U00010000\U00010001\U00010002",
    diagnose=_diagnose_dense,
    success=f"at most {_MOST_CHARS} characters at {_TARGET:g} or more GPT-2 tokens each",
    explain="One answer of many: characters from U+10000 on take 4 bytes in UTF-8, and "
            "rare ones (here three Linear B syllables) were too rare in GPT-2's training "
            "text for any merge of their bytes, so each byte stays a token: 4 per character.",
    wrong_answers=(("hello", "per character"), ("", "empty"), (42, "a string"),
                   ("\U0001F642\U0001F642", "per character"),
                   ("\U00010000" * 13, "too long")),
))

# ---- T.5 the compression of a text (measure) ----------------------------------------------


def _small_tokenizer(rng):
    return train_bpe(_random_text(rng, 80), 256 + int(rng.integers(10, 60)))


def _compression_cases(rng) -> list[tuple[str, object, str]]:
    gpt2 = gpt2_tokenizer()
    cases = [("GPT-2 on 'Hello world'", gpt2, "Hello world"),
             ("GPT-2 on 'naïve café, 日本語'", gpt2, "naïve café, 日本語"),
             ("GPT-2 on text with '<|endoftext|>' in it (read it as text)", gpt2,
              "end<|endoftext|>start")]
    for _ in range(2):
        cases.append(("GPT-2 on a fresh random text", gpt2, _random_text(rng, 30)))
    for _ in range(2):
        cases.append(("a fresh BPE trained on a random text, on another", _small_tokenizer(rng),
                      _random_text(rng, 40)))
    return cases


def _diagnose_compression(fn, rng) -> None:
    for case, tok, text in _compression_cases(rng):
        got = run(fn, tok, text, case=case)
        if got is None:
            raise Wrong(f"on {case}, the result is None: did you forget to return it?")
        try:
            value = float(got)
        except (TypeError, ValueError):
            raise Wrong(f"on {case}, the result is a {type(got).__name__}; expected one "
                        "number") from None
        n_bytes, n_tokens = len(text.encode("utf-8")), len(tok.encode_ordinary(text))
        want = n_bytes / n_tokens
        if math.isclose(value, want, rel_tol=1e-9):
            continue
        message = f"on {case}, got {value:.6g} but expected {want:.6g}"
        if math.isclose(value, len(text) / n_tokens, rel_tol=1e-9):
            raise Wrong(message + f": that is characters per token; count UTF-8 bytes "
                        f"(this text has {len(text)} characters and {n_bytes} bytes)")
        if math.isclose(value, n_tokens / n_bytes, rel_tol=1e-9):
            raise Wrong(message + ": that is tokens per byte, upside down")
        raise Wrong(message + f": the text is {n_bytes} bytes in UTF-8 and {n_tokens} tokens")


def _compression_battery(rng):
    return [((tok, text), {}) for _, tok, text in _compression_cases(rng)]


def _chars_per_token(tokenizer, text):
    return len(text) / len(tokenizer.encode_ordinary(text))


def _tokens_per_byte(tokenizer, text):
    return len(tokenizer.encode_ordinary(text)) / len(text.encode("utf-8"))


def _words_per_token(tokenizer, text):
    return len(text.split()) / len(tokenizer.encode_ordinary(text))


register(Exercise(
    id="T.5",
    title="Measure the compression of a text",
    kind="measure",
    reference=bytes_per_token,
    diagnose=_diagnose_compression,
    battery=_compression_battery,
    success="UTF-8 bytes per token, for GPT-2 on ASCII, accented and CJK text, a special "
            "token read as text, and fresh tokenizers on fresh texts",
    wrong_answers=(
        (_chars_per_token, "characters per token"),
        (_tokens_per_byte, "upside down"),
        (_words_per_token, "expected"),
        (lambda tokenizer, text: 4.0, "expected"),
    ),
))

# ---- T.C challenge: train BPE (implement) -------------------------------------------------


def _train_cases(rng) -> list[tuple[str, str, int]]:
    cases = [("'aaabdaaabac', V = 259", "aaabdaaabac", 259),
             ("'ba ab' (a three-way tie), V = 257", "ba ab", 257),
             ("'low lower lowest newer wider', V = 270", "low lower lowest newer wider", 270),
             ("'ab ab' (it runs out of pairs), V = 300", "ab ab", 300),
             ("'naïve café', V = 262", "naïve café", 262),
             ("'a  b\\n\\nc', V = 258", "a  b\n\nc", 258)]
    for _ in range(2):
        text = _random_text(rng, int(rng.integers(20, 80)))
        V = 256 + int(rng.integers(5, 40))
        cases.append((f"a fresh random text of {len(text)} characters, V = {V}", text, V))
    return cases


def _describe(merges) -> str:
    return ", ".join(f"({a!r}, {b!r})" for a, b in merges[:3]) + (", ..." * (len(merges) > 3))


def _as_merges(got, *, case: str) -> list[tuple[bytes, bytes]]:
    if got is None:
        raise Wrong(f"on {case}, the result is None: did you forget to return the merges?")
    if isinstance(got, (str, bytes)) or not hasattr(got, "__iter__"):
        raise Wrong(f"on {case}, the result is a {type(got).__name__}; expected a list of "
                    "merges")
    items = list(got)
    for item in items:
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise Wrong(f"on {case}, {item!r} is not a pair; each merge is a pair of byte "
                        "strings, e.g. (b'a', b'b')")
        if not all(isinstance(part, bytes) for part in item):
            raise Wrong(f"on {case}, the merge {tuple(item)!r} is not a pair of bytes; "
                        "return each merge as the bytes of its two parts, e.g. (b'a', b'b'), "
                        "not as ids or str")
    return [tuple(item) for item in items]


def _diagnose_train(fn, rng) -> None:
    for case, text, V in _train_cases(rng):
        got = _as_merges(run(fn, text, V, case=case), case=case)
        want = learn_merges(text, V)
        if got == want:
            continue
        if got == learn_merges(text, V, pattern=None):
            raise Wrong(f"on {case}, your merges cross the pre-split: a merge joins the end of "
                        "one chunk to the start of the next. Split the text with GPT-2's "
                        "pattern first and count pairs inside each chunk")
        if len(got) != len(want):
            raise Wrong(f"on {case}, you returned {len(got)} merges; expected {len(want)} "
                        f"(vocab_size - 256, fewer only when no pair is left)")
        k = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
        message = (f"on {case}, merge {k} is {got[k]!r} but should be {want[k]!r} (the "
                   f"first {k} agree)")
        counts = Counter()
        for chunk in _split_words(text, want[:k]):
            counts.update(pairwise(chunk))
        mine, right = counts.get(got[k], 0), counts.get(want[k], 0)
        if mine == right:
            raise Wrong(message + f": both pairs occur {right} times at that point; on a tie "
                        "take the smallest pair (the smaller first id, then the smaller second "
                        "id)")
        raise Wrong(message + f": at that point {want[k]!r} occurs {right} times and "
                    f"{got[k]!r} {mine}; count the pairs of the merged text after each merge, "
                    "weighted by how often each chunk occurs")


def _split_words(text: str, merges) -> list[tuple[bytes, ...]]:
    """Every chunk of ``text`` after ``merges``, as tokens (bytes), one entry per occurrence."""
    out = []
    for chunk in pre_split(text, GPT2_PATTERN):
        parts = [bytes([b]) for b in chunk.encode("utf-8")]
        for a, b in merges:
            i, merged = 0, []
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        out.append(tuple(parts))
    return out


def _train_battery(rng):
    return [((text, V), {}) for _, text, V in _train_cases(rng)]


def _no_pre_split(text, vocab_size):
    return learn_merges(text, vocab_size, pattern=None)


def _largest_on_tie(text, vocab_size):
    words = Counter(tuple(c.encode("utf-8")) for c in _pre(text))
    merged = []
    for new_id in range(256, vocab_size):
        counts = Counter()
        for w, n in words.items():
            for p in pairwise(w):
                counts[p] += n
        if not counts:
            break
        pair = max(counts, key=lambda p: (counts[p], p))
        merged.append(pair)
        words = Counter({tuple(merge(w, pair, new_id)): n for w, n in words.items()})
    vocab = {b: bytes([b]) for b in range(256)}
    for i, (a, b) in enumerate(merged):
        vocab[256 + i] = vocab[a] + vocab[b]
    return [(vocab[a], vocab[b]) for a, b in merged]


def _pre(text):
    return pre_split(text, GPT2_PATTERN)


def _unweighted(text, vocab_size):
    words = [tuple(c.encode("utf-8")) for c in set(_pre(text))]
    merged = []
    for new_id in range(256, vocab_size):
        counts = Counter(p for w in words for p in pairwise(w))
        if not counts:
            break
        pair = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        merged.append(pair)
        words = [tuple(merge(w, pair, new_id)) for w in words]
    vocab = {b: bytes([b]) for b in range(256)}
    for i, (a, b) in enumerate(merged):
        vocab[256 + i] = vocab[a] + vocab[b]
    return [(vocab[a], vocab[b]) for a, b in merged]


def _as_ids_pairs(text, vocab_size):
    tok = train_bpe(text, vocab_size)
    ids = {v: k for k, v in tok.vocab.items()}
    return [(ids[a], ids[b]) for a, b in tok.merges]


register(Exercise(
    id="T.C",
    title="Challenge: train byte-level BPE",
    kind="implement",
    reference=learn_merges,
    diagnose=_diagnose_train,
    battery=_train_battery,
    success="the same merges in the same order as the library's trainer: GPT-2's pre-split, "
            "pairs weighted by chunk counts, ties to the smallest pair, an early stop when "
            "no pair is left, on fixed and fresh random texts",
    explain="The library counts every pair once, then after each merge recounts only the "
            "words that held the merged pair, and keeps the counts in a heap so that the "
            "next best pair is found without scanning them all.",
    wrong_answers=(
        (_no_pre_split, "cross the pre-split"),
        (_largest_on_tie, "on a tie"),
        (_unweighted, "weighted by how often"),
        (_as_ids_pairs, "not a pair of bytes"),
    ),
))
