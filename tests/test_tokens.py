"""anatomy.tokens: byte-level BPE trained here, and GPT-2's tokenizer rebuilt offline.

Trust from comparison: the book's encoder with GPT-2's ranks must give exactly tiktoken's ids
(an independent implementation, in Rust) on all of Tiny Shakespeare and on a battery of hard
strings, and the incremental trainer must learn exactly the merges of the naive recount.
"""

from __future__ import annotations

import hashlib
import random

import pytest
from _local_data import DATA

from anatomy.text import load_text
from anatomy.tokens import (
    ENDOFTEXT,
    GPT2_FILE,
    GPT2_PATTERN,
    GPT2_SHA256,
    Tokenizer,
    TokenizerFileError,
    bits_per_byte,
    bpe,
    bytes_per_token,
    gpt2_byte_order,
    gpt2_ranks,
    gpt2_tokenizer,
    learn_merges,
    learn_merges_naive,
    merge,
    pre_split,
    recover_merges,
    train_bpe,
)

tiktoken = pytest.importorskip("tiktoken")


@pytest.fixture(scope="module")
def gpt2() -> Tokenizer:
    return gpt2_tokenizer()


@pytest.fixture(scope="module")
def reference():
    """tiktoken's Encoding from the same shipped ranks and GPT-2's pattern: no download."""
    return tiktoken.Encoding(name="gpt2-offline", pat_str=GPT2_PATTERN,
                             mergeable_ranks=gpt2_ranks(), special_tokens={ENDOFTEXT: 50256})


@pytest.fixture(scope="module")
def shakespeare() -> str:
    return load_text(DATA)


# Runs of spaces and newlines, contractions, digits, emoji, CJK, combining marks, special
# tokens inside the text, and other characters that tokenizers get wrong.
HARD = ["", " ", "  ", "   hello", "a  b", "\n", "\n\n\n", " \n \n", "\t\tx", "x   \n  y",
        "trailing   ", "\r\n", "\u00a0nbsp", "\u3000x", "a\u200bb", "\ufeffbom",
        "I'm", "don't", "they're", "we've", "you'll", "she'd", "it's", "IT'S", "'s'",
        "rock'n'roll", "o'clock", "I'M", "''''",
        "12345", "3.14159", "1,000,000", "x2y3", "\u0663\u0664\u0665", "\u216b", "\u00bd",
        "\U0001F642", "\U0001F469\u200d\U0001F469\u200d\U0001F467", "\U0001F1EB\U0001F1F7",
        "\U0001F980 rust", "日本語のテキスト", "中文", "한국어", "\U00010000\U00010001",
        "e\u0301", "café", "cafe\u0301", "Zalgo: z\u0336\u0327a\u0308", "ß", "İstanbul",
        ENDOFTEXT, f"a{ENDOFTEXT}b", ENDOFTEXT * 2, f" {ENDOFTEXT} \n", "<|endo", "<|endoftext|",
        "Hello world", "HELLO", "hello", " hello"]


# ---- the shipped file -------------------------------------------------------------------


def test_shipped_file_matches_its_checksum():
    assert hashlib.sha256(GPT2_FILE.read_bytes()).hexdigest() == GPT2_SHA256
    sidecar = (DATA if DATA.is_dir() else DATA.parent) / "gpt2-encoder.json.sha256"
    if sidecar.is_file():
        assert sidecar.read_text().split()[0] == GPT2_SHA256


def test_a_changed_file_is_refused(tmp_path):
    data = bytearray(GPT2_FILE.read_bytes())
    data[100] ^= 1
    bad = tmp_path / "encoder.json"
    bad.write_bytes(bytes(data))
    with pytest.raises(TokenizerFileError, match="SHA-256 expected"):
        gpt2_ranks(bad)


def test_gpt2_tokenizer_shape(gpt2):
    assert gpt2.vocab_size == 50_257 and len(gpt2.merges) == 50_000
    assert gpt2.vocab[50256] == ENDOFTEXT.encode() and gpt2.special_tokens == {ENDOFTEXT: 50256}
    assert gpt2.encode("Hello world") == [15496, 995]
    for i, (a, b) in enumerate(gpt2.merges[:2000]):
        assert gpt2.vocab[256 + i] == a + b
    order = gpt2_byte_order()
    assert sorted(order) == list(range(256)) and order[0] == ord("!")
    assert gpt2.vocab[0] == b"!" and gpt2.vocab[188] == b"\x00"


def test_recover_merges_undoes_a_rank_table():
    tok = train_bpe("the theme then there these the other " * 5, 290)
    ids = {v: k for k, v in tok.vocab.items() if k < 290}
    assert recover_merges(ids) == tok.merges


# ---- parity with tiktoken ---------------------------------------------------------------


def test_parity_with_tiktoken_on_all_of_tiny_shakespeare(gpt2, reference, shakespeare):
    ids = gpt2.encode(shakespeare)
    assert len(ids) == 338_025
    assert ids == reference.encode(shakespeare)
    assert gpt2.decode(ids) == shakespeare


@pytest.mark.parametrize("text", HARD, ids=ascii)
def test_parity_with_tiktoken_on_hard_strings(gpt2, reference, text):
    assert gpt2.encode_ordinary(text) == reference.encode_ordinary(text)
    allowed = {ENDOFTEXT}
    assert gpt2.encode(text, allowed_special=allowed) == reference.encode(
        text, allowed_special=allowed)
    assert gpt2.encode(text, allowed_special="all") == reference.encode(
        text, allowed_special="all")
    if ENDOFTEXT in text:       # disallowed: both refuse
        with pytest.raises(ValueError):
            reference.encode(text)
        with pytest.raises(ValueError, match="allowed_special"):
            gpt2.encode(text)
    else:
        assert gpt2.encode(text) == reference.encode(text)
    assert gpt2.decode(gpt2.encode_ordinary(text)) == text


def test_parity_with_tiktoken_on_random_unicode(gpt2, reference):
    rng = random.Random(0)
    for _ in range(300):
        chars = [chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x800),
                                 rng.randrange(0x800, 0xD800), rng.randrange(0x10000, 0x11000),
                                 rng.choice([32, 10, 9, 39])]))
                 for _ in range(rng.randrange(1, 25))]
        text = "".join(chars)
        ids = gpt2.encode_ordinary(text)
        assert ids == reference.encode_ordinary(text), ascii(text)
        assert gpt2.decode(ids) == text


# ---- decoding -----------------------------------------------------------------------------


def test_a_slice_inside_a_character_decodes_without_an_exception(gpt2):
    ids = gpt2.encode("\U0001F642")           # 4 bytes, 2 tokens
    assert len(ids) == 2
    assert gpt2.decode(ids[:1]) == "\ufffd"
    with pytest.raises(UnicodeDecodeError):
        gpt2.decode(ids[:1], errors="strict")
    assert gpt2.decode_bytes(ids[:1]) + gpt2.decode_bytes(ids[1:]) == "\U0001F642".encode()


def test_decode_refuses_ids_out_of_range(gpt2):
    with pytest.raises(ValueError, match="id 50257 is out of range.*0 to 50256"):
        gpt2.decode([50257])
    with pytest.raises(ValueError, match="id -1 is out of range"):
        gpt2.decode([-1])
    with pytest.raises(TypeError, match="whole numbers"):
        gpt2.decode([1.5])


# ---- training -----------------------------------------------------------------------------


def test_merge_replaces_left_to_right_without_overlap():
    assert merge([1, 2, 3, 1, 2], (1, 2), 9) == [9, 3, 9]
    assert merge([7, 7, 7], (7, 7), 8) == [8, 7]
    assert merge([7, 7, 7, 7], (7, 7), 8) == [8, 8]
    assert merge([], (1, 2), 3) == [] and merge([2, 1], (1, 2), 3) == [2, 1]


def test_bpe_applies_merges_in_rank_order_not_by_frequency():
    table = {(97, 98): 256, (98, 99): 257}
    assert bpe(list(b"abcbc"), table) == [256, 99, 257]       # "ab" first although "bc" x2
    assert bpe(list(b"abcab"), table) == [256, 99, 256]


def test_incremental_training_equals_the_naive_recount(shakespeare):
    text = shakespeare[:30_000]
    fast, slow = {}, {}
    assert learn_merges(text, 400, stats=fast) == learn_merges_naive(text, 400, stats=slow)
    assert fast["symbols_recounted"] == slow["symbols_visited"]
    assert fast["symbols_visited"] * 10 < slow["symbols_visited"]
    rng = random.Random(1)
    for _ in range(20):
        words = ["a", "b", "ab", "ba", "aab", " ", "é", "x1"]
        text = "".join(rng.choice(words) + rng.choice([" ", "", "\n"]) for _ in range(40))
        V = 256 + rng.randrange(1, 40)
        assert learn_merges(text, V) == learn_merges_naive(text, V), text


def test_tie_breaking_takes_the_smallest_pair():
    # "ba ab" pre-splits into "ba", " ab": (b, a), (' ', a) and (a, b) occur once each.
    assert learn_merges("ba ab", 257) == [(b" ", b"a")]
    # A more frequent pair wins over a smaller one.
    assert learn_merges("zz zz ab", 257) == [(b"z", b"z")]


def test_training_is_greedy_so_a_smaller_vocab_is_a_prefix(shakespeare):
    text = shakespeare[:50_000]
    big = train_bpe(text, 600)
    assert big.truncate(400).merges == train_bpe(text, 400).merges == big.merges[:144]


def test_merges_never_cross_the_pre_split(shakespeare):
    tok = train_bpe(shakespeare[:50_000], 700)
    for i in range(256, tok.vocab_size):
        piece = tok.vocab[i].decode("utf-8", errors="ignore")
        if piece and len(tok.vocab[i].decode("utf-8", errors="replace")) == len(piece):
            assert pre_split(piece) == [piece], piece
    unsplit = train_bpe(shakespeare[:5_000], 400, pattern=None)
    assert any(len(pre_split(t.decode("utf-8", "replace"))) > 1
               for t in unsplit.vocab.values()), "without the pre-split, merges cross words"


def test_special_tokens_are_never_split_or_merged():
    text = f"low lower{ENDOFTEXT}lowest{ENDOFTEXT} newer"
    tok = train_bpe(text, 262, special_tokens=[ENDOFTEXT])
    assert tok.vocab_size == 262 and tok.special_tokens == {ENDOFTEXT: 261}
    pieces = ["low lower", "lowest", " newer"]
    assert tok.merges == learn_merges(pieces, 261)
    assert all(b"<|" not in a + b and b"|>" not in a + b for a, b in tok.merges)
    ids = tok.encode(text, allowed_special={ENDOFTEXT})
    assert ids.count(261) == 2 and tok.decode(ids) == text
    assert 261 not in tok.encode_ordinary(text)
    with pytest.raises(ValueError, match="special token '<\\|endoftext\\|>'"):
        tok.encode(text)


@pytest.mark.parametrize("text", HARD, ids=ascii)
def test_round_trip_with_a_trained_tokenizer(text, shakespeare):
    tok = _small(shakespeare)
    assert tok.decode(tok.encode(text, allowed_special="all")) == text


def _small(text: str, cache={}) -> Tokenizer:           # noqa: B006 - a deliberate cache
    if "tok" not in cache:
        cache["tok"] = train_bpe(text[:20_000], 350, special_tokens=[ENDOFTEXT])
    return cache["tok"]


# ---- errors -------------------------------------------------------------------------------


def test_vocab_size_below_the_bytes_and_specials_is_refused():
    with pytest.raises(ValueError, match=r"at least 256 \(one id per byte\) = 256, got 255"):
        train_bpe("abc", 255)
    with pytest.raises(ValueError, match="256 .* \\+ 2 special tokens = 258, got 257"):
        train_bpe("abc", 257, special_tokens=["<a>", "<b>"])
    with pytest.raises(TypeError, match="vocab_size: expected an int"):
        train_bpe("abc", 300.0)
    with pytest.raises(TypeError, match="write \\('<a>',\\)"):
        train_bpe("abc", 300, special_tokens="<a>")


def test_unknown_allowed_special_is_refused(gpt2):
    with pytest.raises(ValueError, match="are not special tokens"):
        gpt2.encode("x", allowed_special={"<|fim|>"})
    with pytest.raises(TypeError, match="write \\{'<\\|endoftext\\|>'\\}"):
        gpt2.encode("x", allowed_special=ENDOFTEXT)


def test_merges_must_build_on_existing_tokens():
    with pytest.raises(ValueError, match="merges\\[1\\].*not a token"):
        Tokenizer([(b"a", b"b"), (b"abc", b"d")])


# ---- measures -----------------------------------------------------------------------------


def test_measures(gpt2, shakespeare):
    assert bytes_per_token(gpt2, "Hello world") == 11 / 2
    assert bits_per_byte(0.6931471805599453, 4, 4) == pytest.approx(1.0)
    # A model with 3 bytes per token needs 3x the loss per token for the same bits per byte.
    assert bits_per_byte(3.0, 100, 300) == pytest.approx(bits_per_byte(1.0, 300, 300))
    assert 3.0 < bytes_per_token(gpt2, shakespeare[:100_000]) < 3.5
