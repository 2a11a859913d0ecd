"""Byte-level BPE from scratch: train it, encode and decode with it, and load GPT-2's own.

A text is UTF-8 bytes first, so a vocabulary that starts from the 256 byte values can spell
any string and never needs an unknown token. Byte-pair encoding (BPE) then learns merges:
count the adjacent pairs of tokens, give the most frequent pair a new id, replace it
everywhere, repeat. GPT-2's tokenizer is exactly this, with 50,000 merges, after a regex
pre-split that keeps merges inside words, numbers, runs of other characters (punctuation,
symbols, emoji) and runs of whitespace (Radford et al., 2019).

::

    from anatomy.tokens import gpt2_tokenizer, train_bpe
    tok = train_bpe(text, vocab_size=512)       # 256 bytes + 256 merges
    gpt2 = gpt2_tokenizer()                     # offline, from the shipped encoder.json
    gpt2.encode("Hello world")                  # [15496, 995]
    gpt2.decode([15496, 995])                   # "Hello world"

The stable API: ``train_bpe``, ``gpt2_tokenizer``, ``Tokenizer.encode``, ``.decode``,
``.merges`` (``(bytes, bytes)`` pairs in rank order) and ``.vocab`` (id -> bytes).

Ids: a byte is one of ids 0..255 (for ``train_bpe``, byte ``b`` is id ``b``; GPT-2 orders
the bytes its own way), merge ``i`` makes id ``256 + i``, and the special tokens come last.

Shapes: encode str -> ids [n]; decode ids [n] -> str
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from types import MappingProxyType

# GPT-2's pre-tokenisation pattern (openai/gpt-2, src/encoder.py): English contractions,
# an optional space then letters, an optional space then digits, an optional space then other
# symbols, whitespace not followed by a non-space (so " word" keeps its space), whitespace.
GPT2_PATTERN = (r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+"""
                r"""|\s+(?!\S)|\s+""")
ENDOFTEXT = "<|endoftext|>"

GPT2_FILE = Path(__file__).resolve().parent / "gpt2-encoder.json"
# SHA-256 of OpenAI's encoder.json for GPT-2 (openai/gpt-2, MIT licence), as shipped here.
GPT2_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
GPT2_VOCAB_SIZE = 50_257


@functools.lru_cache(maxsize=8)
def _compiled(pattern: str):
    try:
        import regex  # \p{L} needs the `regex` module; the stdlib `re` lacks it
    except ImportError as err:  # pragma: no cover - regex ships with tiktoken and Colab
        raise ImportError("anatomy.tokens needs the `regex` package for GPT-2's pattern "
                          "(pip install regex)") from err
    return regex.compile(pattern)


def pre_split(text: str, pattern: str | None = GPT2_PATTERN) -> list[str]:
    """Cut ``text`` into the chunks that BPE works inside (``pattern=None``: one chunk).

    Joining the chunks gives the text back: GPT-2's pattern matches every character.
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str, got {type(text).__name__}")
    if pattern is None:
        return [text] if text else []
    return _compiled(pattern).findall(text)


def merge(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids`` by ``new_id``, scanning left to right.

    Occurrences never overlap: in ``[7, 7, 7]`` the pair ``(7, 7)`` is merged once, at the
    left, giving ``[new_id, 7]``.

    Shapes: ids [n] -> [m], m <= n
    """
    out = []
    skip = False                        # the previous position started a merged pair
    for i, x in enumerate(ids):
        if skip:
            skip = False
        elif i + 1 < len(ids) and x == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            skip = True
        else:
            out.append(x)
    return out


def bpe(ids: Sequence[int], merges: Mapping[tuple[int, int], int]) -> list[int]:
    """Apply a merge table in rank order: while some adjacent pair is in ``merges``, merge the
    pair with the lowest new id (the earliest merge learned) everywhere, then look again.

    Shapes: ids [n] -> [m], m <= n
    """
    ids = list(ids)
    for _ in range(len(ids) - 1):       # each merge shortens ids: at most n - 1 rounds
        ranked = [merges[p] for p in pairwise(ids) if p in merges]
        if not ranked:
            break
        first = min(ranked)                 # the merge learned earliest
        pair = next(p for p in pairwise(ids) if merges.get(p) == first)
        ids = merge(ids, pair, first)
    return ids


def pair_counts(words: Mapping[tuple[int, ...], int]) -> Counter:
    """How often each adjacent pair occurs, over words weighted by their counts."""
    counts: Counter = Counter()
    for word, n in words.items():
        for pair in pairwise(word):
            counts[pair] += n
    return counts


def _check_vocab_size(vocab_size, n_special: int) -> None:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"vocab_size: expected an int, got {type(vocab_size).__name__}")
    least = 256 + n_special
    if vocab_size < least:
        specials = f" + {n_special} special token{'s' * (n_special != 1)}" if n_special else ""
        raise ValueError(f"vocab_size must be at least 256 (one id per byte){specials} = "
                         f"{least}, got {vocab_size}")


def _word_counts(text: str | Sequence[str], pattern: str | None) -> dict[tuple[int, ...], int]:
    """Each distinct chunk of the pre-split text as a tuple of byte values, with its count.

    ``text`` may be a list of texts (the pieces between special tokens), each split alone.
    """
    texts = [text] if isinstance(text, str) else list(text)
    chunks: Counter = Counter()
    for piece in texts:
        chunks.update(pre_split(piece, pattern))
    return {tuple(chunk.encode("utf-8")): n for chunk, n in chunks.items()}


def _as_bytes(merged: list[tuple[int, int]]) -> list[tuple[bytes, bytes]]:
    """Merges as pairs of token ids -> the same merges as pairs of byte strings."""
    vocab = {b: bytes([b]) for b in range(256)}
    out = []
    for i, (a, b) in enumerate(merged):
        out.append((vocab[a], vocab[b]))
        vocab[256 + i] = vocab[a] + vocab[b]
    return out


def learn_merges(text: str | Sequence[str], vocab_size: int, pattern: str | None = GPT2_PATTERN,
                 stats: dict | None = None) -> list[tuple[bytes, bytes]]:
    """The merges BPE learns on ``text``, in rank order, until ``vocab_size`` ids exist.

    The rule, repeated: take the most frequent adjacent pair; on a tie the smallest pair wins,
    compared as (first id, second id); merge it everywhere.
    Merges never cross the chunks of ``pattern`` (GPT-2's pre-split by default); ``text``
    may be a list of texts, each split alone. After a merge only the words that contained
    the pair are recounted, and a heap finds the next best pair, so a step costs the words
    it touches, not the whole text. Training stops
    early if no pair is left. ``stats``, if given, receives ``"symbols_visited"``, the
    symbols of all the words counted (each word once at the start, then after each merge
    every changed word twice: its old pairs out, its new pairs in), and
    ``"symbols_recounted"``, the symbols that recounting every word after each merge
    visits (``learn_merges_naive``'s work).
    """
    _check_vocab_size(vocab_size, 0)
    counted = _word_counts(text, pattern)
    words = [list(w) for w in counted]                    # each distinct chunk, as ids
    freq = list(counted.values())
    counts: defaultdict = defaultdict(int)
    where: defaultdict = defaultdict(set)                 # pair -> indices of its words
    for i, word in enumerate(words):
        for pair in pairwise(word):
            counts[pair] += freq[i]
            where[pair].add(i)
    heap = [(-n, pair) for pair, n in counts.items()]     # most frequent, then smallest pair
    heapq.heapify(heap)
    visited = total = sum(map(len, words))
    recount = 0                          # what recounting every word at every step would visit
    merged = []
    for new_id in range(256, vocab_size):
        recount += total
        pair = None
        while heap:
            n, top = heapq.heappop(heap)
            if counts.get(top, 0) == -n:                  # else a stale count: skip it
                pair = top
                break
        if pair is None:
            break
        merged.append(pair)
        changed = set()
        for i in where.pop(pair):
            old = words[i]
            new = merge(old, pair, new_id)
            visited += len(old) + len(new)                # both are walked below
            for p in pairwise(old):                       # take the old word's pairs out
                counts[p] -= freq[i]
                changed.add(p)
            for p in pairwise(new):                       # and put the new word's in
                counts[p] += freq[i]
                where[p].add(i)
                changed.add(p)
            words[i] = new
            total -= len(old) - len(new)
        for p in changed:
            if counts[p] > 0:
                heapq.heappush(heap, (-counts[p], p))
    if stats is not None:
        stats.update(symbols_visited=visited, symbols_recounted=recount)
    return _as_bytes(merged)


def learn_merges_naive(text: str | Sequence[str], vocab_size: int,
                       pattern: str | None = GPT2_PATTERN,
                       stats: dict | None = None) -> list[tuple[bytes, bytes]]:
    """The same merges as ``learn_merges``, recounting every pair of every word after each
    merge: the textbook loop, kept to measure what the incremental counts save."""
    _check_vocab_size(vocab_size, 0)
    words = _word_counts(text, pattern)
    visited = 0
    merged = []
    for new_id in range(256, vocab_size):
        counts = pair_counts(words)
        visited += sum(map(len, words))
        if not counts:
            break
        # most frequent; on a tie, the smallest pair
        pair = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        merged.append(pair)
        words = {tuple(merge(w, pair, new_id)): n for w, n in words.items()}
    if stats is not None:
        stats["symbols_visited"] = visited
    return _as_bytes(merged)


def _check_specials(special_tokens) -> tuple[str, ...]:
    if isinstance(special_tokens, str):
        raise TypeError(f"special_tokens: expected a sequence of strings, got the string "
                        f"{special_tokens!r}; write ({special_tokens!r},)")
    specials = tuple(special_tokens)
    for s in specials:
        if not isinstance(s, str) or not s:
            raise ValueError(f"special_tokens: each must be a non-empty str, got {s!r}")
    if len(set(specials)) != len(specials):
        raise ValueError(f"special_tokens: listed twice in {list(specials)}")
    return specials


def train_bpe(text: str, vocab_size: int, special_tokens: Sequence[str] = (), *,
              pattern: str | None = GPT2_PATTERN, naive: bool = False) -> Tokenizer:
    """Train a byte-level BPE tokenizer of ``vocab_size`` ids on ``text``.

    ``vocab_size`` counts the 256 bytes, the merges and the ``special_tokens``, which get
    the last ids. A special token is never split or merged: the training text is cut at
    every occurrence of one, so no merge learns from it or across it. ``naive=True``
    recounts every pair after each merge (same result, slower).
    """
    specials = _check_specials(special_tokens)
    _check_vocab_size(vocab_size, len(specials))
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str, got {type(text).__name__}")
    # Cut at the special tokens: the pieces are pre-split and counted apart, so no merge
    # learns from a special token or spans one.
    pieces = _special_regex(specials).split(text) if specials else text
    learn = learn_merges_naive if naive else learn_merges
    merges = learn(pieces, vocab_size - len(specials), pattern)
    return Tokenizer(merges, specials, pattern=pattern)


def _special_regex(specials: Iterable[str]):
    ordered = sorted(specials, key=len, reverse=True)     # the longest match first
    return re.compile("|".join(re.escape(s) for s in ordered))


class Tokenizer:
    """A byte-level BPE tokenizer: 256 byte tokens, merges in rank order, special tokens.

    ``merges[i]`` is the pair ``(left, right)`` of byte strings whose merge makes id
    ``256 + i``; ``byte_ids[b]`` is the id of byte ``b`` (``range(256)`` unless given); the
    special tokens get the ids after the merges. ``pattern`` is the pre-split.
    """

    def __init__(self, merges: Sequence[tuple[bytes, bytes]],
                 special_tokens: Sequence[str] = (), *, pattern: str | None = GPT2_PATTERN,
                 byte_ids: Sequence[int] | None = None, name: str = "bpe"):
        specials = _check_specials(special_tokens)
        byte_ids = list(range(256)) if byte_ids is None else [int(i) for i in byte_ids]
        if sorted(byte_ids) != list(range(256)):
            raise ValueError("byte_ids: expected each of the ids 0..255 exactly once")
        vocab = {byte_ids[b]: bytes([b]) for b in range(256)}
        ids = {tok: i for i, tok in vocab.items()}             # bytes -> id (first one)
        table = {}
        for rank, (left, right) in enumerate(merges):
            if left not in ids or right not in ids:
                missing = left if left not in ids else right
                raise ValueError(f"merges[{rank}] = ({left!r}, {right!r}): {missing!r} is "
                                 "not a token made by a byte or an earlier merge")
            new_id = 256 + rank
            table[(ids[left], ids[right])] = new_id
            vocab[new_id] = left + right
            ids.setdefault(left + right, new_id)
        first_special = 256 + len(table)
        self._specials = {s: first_special + j for j, s in enumerate(specials)}
        for s, i in self._specials.items():
            vocab[i] = s.encode("utf-8")
        self._vocab = vocab
        self._merges = [(vocab[a], vocab[b]) for a, b in table]
        self._table = table
        self._byte_ids = byte_ids
        self.pattern = pattern
        self.name = name
        self._cache: dict[str, tuple[int, ...]] = {}

    # ---- what it holds --------------------------------------------------------------

    @property
    def merges(self) -> list[tuple[bytes, bytes]]:
        """The merges in rank order: ``merges[i]`` makes id ``256 + i``."""
        return list(self._merges)

    @property
    def vocab(self) -> Mapping[int, bytes]:
        """Every id, special tokens included, mapped to its bytes (read-only)."""
        return MappingProxyType(self._vocab)

    @property
    def special_tokens(self) -> Mapping[str, int]:
        """Each special token's id (read-only)."""
        return MappingProxyType(self._specials)

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    def __len__(self) -> int:
        return len(self._vocab)

    def __repr__(self) -> str:
        return (f"Tokenizer({self.name}: V = {self.vocab_size:,}, {len(self._merges):,} "
                f"merges, special tokens {list(self._specials)})")

    def __deepcopy__(self, memo) -> Tokenizer:
        # Nothing of it can be changed from outside (merges is a copy, vocab read-only), so
        # a copy may share it; the exercise checks deep-copy their inputs.
        return self

    def truncate(self, vocab_size: int) -> Tokenizer:
        """The same tokenizer with only its first merges: BPE is greedy, so this is exactly
        what training to ``vocab_size`` would have given (same text, same pre-split)."""
        _check_vocab_size(vocab_size, len(self._specials))
        n = vocab_size - 256 - len(self._specials)
        if n > len(self._merges):
            raise ValueError(f"vocab_size {vocab_size:,} is larger than this tokenizer's "
                             f"{self.vocab_size:,}")
        return Tokenizer(self._merges[:n], list(self._specials), pattern=self.pattern,
                         byte_ids=self._byte_ids, name=self.name)

    # ---- encoding -------------------------------------------------------------------

    def _encode_chunk(self, chunk: str) -> tuple[int, ...]:
        got = self._cache.get(chunk)
        if got is None:
            got = tuple(bpe([self._byte_ids[b] for b in chunk.encode("utf-8")], self._table))
            self._cache[chunk] = got
        return got

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode ``text`` as plain text: a special token's characters are ordinary text."""
        out: list[int] = []
        for chunk in pre_split(text, self.pattern):
            out.extend(self._encode_chunk(chunk))
        return out

    def encode(self, text: str, allowed_special: Iterable[str] | str = ()) -> list[int]:
        """Encode ``text`` to ids. A special token in the text becomes its one id if it is
        in ``allowed_special`` (or that is ``"all"``); any other special token in the text
        is an error, as in tiktoken (``encode_ordinary`` treats it as plain text)."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        if allowed_special == "all":
            allowed = set(self._specials)
        elif isinstance(allowed_special, str):
            raise TypeError(f"allowed_special: expected a set of special tokens or 'all', "
                            f"got the string {allowed_special!r}; write {{{allowed_special!r}}}")
        else:
            allowed = set(allowed_special)
        unknown = allowed - set(self._specials)
        if unknown:
            raise ValueError(f"allowed_special: {sorted(unknown)} are not special tokens of "
                             f"this tokenizer; it has {list(self._specials) or 'none'}")
        for s in self._specials:
            if s not in allowed and s in text:
                raise ValueError(
                    f"the text contains the special token {s!r}, which is not allowed: pass "
                    f"allowed_special={{{s!r}}} to encode it as its id {self._specials[s]}, "
                    f"or use encode_ordinary(text) to encode it as plain text")
        if not allowed:
            return self.encode_ordinary(text)
        out: list[int] = []
        at = 0
        for found in _special_regex(allowed).finditer(text):
            out.extend(self.encode_ordinary(text[at:found.start()]))
            out.append(self._specials[found.group()])
            at = found.end()
        out.extend(self.encode_ordinary(text[at:]))
        return out

    # ---- decoding -------------------------------------------------------------------

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes that ``ids`` stand for, joined (any slice of ids has bytes)."""
        parts = []
        for i in ids:
            if isinstance(i, bool) or not hasattr(i, "__index__"):
                raise TypeError(f"ids: expected whole numbers, got {i!r}")
            token = self._vocab.get(int(i))
            if token is None:
                raise ValueError(f"id {int(i)} is out of range: this tokenizer's ids are 0 to "
                                 f"{self.vocab_size - 1}")
            parts.append(token)
        return b"".join(parts)

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """The text of ``ids``. A slice can end (or start) inside a character's bytes;
        ``errors="replace"`` (the default, as in tiktoken) shows each broken piece as
        U+FFFD, ``errors="strict"`` raises ``UnicodeDecodeError``."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)


# ---- GPT-2's tokenizer, offline ---------------------------------------------------------


def gpt2_byte_order() -> list[int]:
    """The 256 byte values in the order GPT-2 numbers them (ids 0..255).

    GPT-2's encoder.json stores each token as printable text: the 188 bytes that print
    (``!`` to ``~``, ``¡`` to ``¬``, ``®`` to ``ÿ``) stand for themselves, and the other 68
    are drawn as the characters from U+0100 on, in byte order. Its ids follow that list.
    """
    shown = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
             *range(ord("®"), ord("ÿ") + 1)]
    return shown + [b for b in range(256) if b not in set(shown)]


def _gpt2_unprintable() -> dict[str, int]:
    """The printable character encoder.json uses for each byte -> that byte."""
    order = gpt2_byte_order()
    shown = set(order[:188])
    chars, extra = {}, 0
    for b in range(256):
        if b in shown:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


class TokenizerFileError(ValueError):
    """The shipped GPT-2 file is not the one this library expects."""


def gpt2_ranks(path: str | Path | None = None) -> dict[bytes, int]:
    """GPT-2's 50,256 ordinary tokens as bytes -> id, read from the shipped encoder.json
    after checking its SHA-256 (the form ``tiktoken.Encoding`` takes as mergeable ranks)."""
    path = Path(path) if path is not None else GPT2_FILE
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != GPT2_SHA256:
        raise TokenizerFileError(f"{path.name} is not GPT-2's encoder.json: SHA-256 expected "
                                 f"{GPT2_SHA256}, got {digest}")
    byte_of = _gpt2_unprintable()
    return {bytes(byte_of[c] for c in token): i for token, i in json.loads(data).items()
            if token != ENDOFTEXT}


def recover_merges(ranks: Mapping[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merge list behind a rank table: token ``r`` (r >= 256) splits into the two parts
    that BPE makes of its bytes using only the tokens of lower rank."""
    by_rank = sorted((r, tok) for tok, r in ranks.items() if r >= 256)
    merges = []
    for r, token in by_rank:
        parts = [token[i:i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best = min((ranks.get(parts[i] + parts[i + 1], r), i)
                       for i in range(len(parts) - 1))
            if best[0] >= r:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) != 2:
            raise ValueError(f"token {r} ({token!r}) does not split into two earlier tokens")
        merges.append((parts[0], parts[1]))
    return merges


@functools.lru_cache(maxsize=1)
def gpt2_tokenizer() -> Tokenizer:
    """GPT-2's tokenizer (V = 50,257), built offline from the shipped encoder.json: the 256
    bytes in GPT-2's order, 50,000 merges recovered from the ranks, ``<|endoftext|>`` last."""
    ranks = gpt2_ranks()
    byte_order = gpt2_byte_order()
    byte_ids = [0] * 256
    for i, b in enumerate(byte_order):
        byte_ids[b] = i
    if any(ranks[bytes([b])] != byte_ids[b] for b in range(256)):
        raise TokenizerFileError("encoder.json does not number the bytes in GPT-2's order")
    tok = Tokenizer(recover_merges(ranks), (ENDOFTEXT,), byte_ids=byte_ids, name="gpt2")
    if tok.vocab_size != GPT2_VOCAB_SIZE:      # pragma: no cover - the checksum rules it out
        raise TokenizerFileError(f"expected {GPT2_VOCAB_SIZE:,} ids, got {tok.vocab_size:,}")
    return tok


# ---- measures ---------------------------------------------------------------------------


def bytes_per_token(tokenizer: Tokenizer, text: str) -> float:
    """Compression: the UTF-8 bytes of ``text`` per token (special tokens read as text)."""
    return len(text.encode("utf-8")) / len(tokenizer.encode_ordinary(text))


def bits_per_byte(nats_per_token: float, tokens: int, n_bytes: int) -> float:
    """A loss in nats per token, as bits per byte of the same text: the total information,
    ``nats_per_token * tokens / ln 2`` bits, shared out over its bytes. A character model
    on ASCII text has one token per byte; any tokenizer's model is compared the same way."""
    import math

    return nats_per_token * tokens / (math.log(2) * n_bytes)
