"""anatomy.data: the verified Tiny Shakespeare file, the tokenizer, the split, the batches.

No test downloads anything: the "download" tests fetch the local copy through a file:// URL.
"""

import hashlib
import urllib.error
import warnings
from pathlib import Path

import pytest
import torch
from _local_data import DATA

from anatomy import data
from anatomy import text as text_module
from anatomy.data import CharTokenizer, get_batch, load_text, split


@pytest.fixture(scope="module")
def text() -> str:
    return load_text(DATA)


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(data.ENV_VAR, raising=False)


@pytest.fixture
def local_file() -> Path:
    path = DATA / data.FILENAME if DATA.is_dir() else DATA
    assert path.is_file(), f"test data missing: {path}"
    return path


def test_file_has_the_syllabus_figures(text):
    assert len(text) == 1_115_394
    assert len(set(text)) == 65
    assert CharTokenizer(text).vocab_size == 65
    assert hashlib.sha256(text.encode()).hexdigest() == data.SHA256


def test_env_var_may_name_the_file_or_its_folder(monkeypatch, local_file, tmp_path):
    for target in (local_file, local_file.parent):
        monkeypatch.setenv(data.ENV_VAR, str(target))
        assert len(load_text(cache_dir=tmp_path)) == 1_115_394
    assert not any(tmp_path.iterdir()), "a local copy must not be copied into the cache"


def test_wrong_file_is_an_error_naming_both_hashes(tmp_path, local_file):
    bad = tmp_path / "tinyshakespeare.txt"
    bad.write_bytes(local_file.read_bytes().replace(b"ROMEO", b"ROMEX", 1))
    actual = hashlib.sha256(bad.read_bytes()).hexdigest()
    with pytest.raises(data.DataError) as err:      # a ValueError
        load_text(bad)
    message = str(err.value)
    assert str(bad) in message and data.SHA256 in message and actual in message
    assert message.startswith(f"{bad} is not the expected Tiny Shakespeare file")
    assert bad.exists(), "a file the user pointed at is reported, never deleted"


def test_a_text_of_your_own_is_read_unchecked_and_said_so_once(tmp_path):
    own = tmp_path / "my_text.txt"
    text = "Ali makan nasi lemak.\nSiti minum teh tarik.\n" * 30
    own.write_text(text, encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_text(own) == text
    assert [w.category for w in caught] == [data.UncheckedTextWarning]
    n, v = len(text), len(set(text))               # 44 characters x 30 lines
    assert n == 1_320 and 10 < v < 44
    assert str(caught[0].message) == (f"training on {own} (1,320 characters, {v} distinct), "
                                      f"not Tiny Shakespeare: checksum not checked")


def test_tiny_shakespeare_under_another_name_needs_no_warning(tmp_path, local_file):
    copy = tmp_path / "input.txt"                  # the name char-rnn gives it
    copy.write_bytes(local_file.read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_text(copy)) == 1_115_394


def test_the_env_var_copy_is_always_checked(monkeypatch, tmp_path):
    own = tmp_path / "my_text.txt"
    own.write_text("not Shakespeare at all")
    monkeypatch.setenv(data.ENV_VAR, str(own))
    with pytest.raises(data.DataError, match="not the expected Tiny Shakespeare file"):
        load_text(cache_dir=tmp_path)


@pytest.mark.parametrize("content, message", [
    (b"", "is empty: there is no text to train on"),
    (b"a", "holds a single character: a language model needs at least two"),
    (b"caf\xe9 au lait", r"is not UTF-8 text \(byte 0xe9 at offset 3\); save it as UTF-8"),
])
def test_an_unusable_text_of_your_own_is_a_clear_error(tmp_path, content, message):
    own = tmp_path / "my_text.txt"
    own.write_bytes(content)
    with pytest.raises(data.DataError, match=message) as err:
        load_text(own)
    assert str(own) in str(err.value)


def test_missing_path_is_an_error_that_says_how(tmp_path):
    with pytest.raises(FileNotFoundError, match="ANATOMY_DATA"):
        load_text(tmp_path / "nowhere.txt")


def test_bad_cache_file_is_not_used_and_not_kept(no_env, tmp_path):
    cached = tmp_path / data.FILENAME
    cached.write_text("not Shakespeare")
    with pytest.raises(ValueError, match="deleted"):
        load_text(cache_dir=tmp_path, url="file:///nonexistent")
    assert not cached.exists()


def test_download_lands_in_the_cache_atomically(no_env, tmp_path, local_file, monkeypatch):
    text = load_text(cache_dir=tmp_path, url=local_file.as_uri())
    assert len(text) == 1_115_394
    assert sorted(p.name for p in tmp_path.iterdir()) == [data.FILENAME]   # no temporary left

    def offline(*args, **kwargs):
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(text_module.urllib.request, "urlopen", offline)
    assert load_text(cache_dir=tmp_path) == text       # second call: the cache, no network


def test_bad_download_is_an_error_and_is_not_cached(no_env, tmp_path, local_file):
    bad = tmp_path / "served.txt"
    bad.write_bytes(local_file.read_bytes()[:-1])
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match="nothing was cached") as err:
        load_text(cache_dir=cache, url=bad.as_uri())
    assert data.SHA256 in str(err.value)
    assert not (cache / data.FILENAME).exists()


def test_offline_without_a_copy_says_how_to_provide_one(no_env, tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(text_module.urllib.request, "urlopen", offline)
    with pytest.raises(RuntimeError) as err:
        load_text(cache_dir=tmp_path)
    assert "ANATOMY_DATA" in str(err.value) and "path=" in str(err.value)
    assert not any(tmp_path.iterdir())


def test_tokenizer_round_trip(text):
    tok = CharTokenizer(text)
    ids = tok.encode(text)
    assert len(ids) == len(text) and min(ids) == 0 and max(ids) == 64
    assert tok.decode(ids) == text
    assert tok.decode(torch.tensor(ids[:100])) == text[:100]
    assert CharTokenizer(tok.vocab).vocab == tok.vocab    # the saved vocab rebuilds it
    assert tok.vocab == "".join(sorted(set(text)))


def test_unknown_character_names_it_and_its_position(text):
    tok = CharTokenizer(text)
    with pytest.raises(ValueError, match=r"character '€' at position 6 is not in the vocab"):
        tok.encode("hello €")
    with pytest.raises(ValueError, match=r"id 65 at position 1 is outside \[0, V\) = \[0, 65\)"):
        tok.decode([0, 65])


def test_split_is_first_ninety_percent_then_the_rest(text):
    ids = torch.tensor(CharTokenizer(text).encode(text))
    train, val = split(ids)
    assert (len(train), len(val)) == (1_003_854, 111_540)
    assert torch.equal(torch.cat([train, val]), ids)
    with pytest.raises(ValueError, match="frac"):
        split(ids, 1.0)


def test_batches_are_shifted_windows_and_reproducible():
    ids = torch.arange(1000)
    x, y = get_batch(ids, 4, 8, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 8) and x.dtype == y.dtype == torch.int64
    assert torch.equal(y, x + 1)                                     # targets = next tokens
    assert torch.equal(x[:, 1:] - x[:, :-1], torch.ones(4, 7, dtype=torch.int64))  # windows
    again, _ = get_batch(ids, 4, 8, torch.Generator().manual_seed(0))
    other, _ = get_batch(ids, 4, 8, torch.Generator().manual_seed(1))
    assert torch.equal(x, again) and not torch.equal(x, other)


def test_batch_needs_one_token_more_than_T():
    ids = torch.arange(9)
    x, y = get_batch(ids, 2, 8, torch.Generator().manual_seed(0))   # the only window
    assert torch.equal(x[0], ids[:8]) and torch.equal(y[0], ids[1:])
    with pytest.raises(ValueError, match="T=9 needs at least T \\+ 1 = 10 tokens"):
        get_batch(ids, 2, 9, torch.Generator())
