"""Tiny Shakespeare as text, with nothing but the standard library (chapters 1-9).

Where the text comes from, in order of preference:

1. an explicit ``path`` (a file, or a folder holding ``tinyshakespeare.txt``);
2. the environment variable ``ANATOMY_DATA`` (the same: a file or a folder);
3. a cached copy in ``cache_dir`` (default ``~/.cache/anatomy``);
4. a download from the canonical char-rnn repository into that cache.

Every copy of Tiny Shakespeare, wherever it came from, must match one SHA-256 digest, so every
reader of the book trains on exactly the same 1,115,394 characters. The one exception is a text
of the reader's own: an explicit ``path`` to a file with another name than
``tinyshakespeare.txt`` is read as UTF-8 without the check (it has its own vocabulary), and an
``UncheckedTextWarning`` says so.

The loader, the split and the character tokenizer live here, not in ``anatomy.data`` (which
makes PyTorch batches), so the NumPy chapters read and encode the text without importing
torch; ``anatomy.data`` re-exports all of them unchanged.

Shapes: encode str[n] -> ids [n]; decode ids [n] -> str[n]; ids [N] -> train, val
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
import warnings
from collections.abc import Sequence
from pathlib import Path

from anatomy.atomic import atomic_write

DATA_URL = ("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/"
            "tinyshakespeare/input.txt")
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
FILENAME = "tinyshakespeare.txt"
ENV_VAR = "ANATOMY_DATA"

_HOW_TO_PROVIDE = (
    f"To use a local copy, set the environment variable {ENV_VAR} to the file (or the folder "
    f"holding {FILENAME}), or pass load_text(path=...). The file is {DATA_URL}")


class DataError(ValueError):
    """A training text that cannot be used: not the expected file, not UTF-8 text, empty,
    or too short for the run."""


class DataUnavailableError(DataError, RuntimeError):
    """No local copy of Tiny Shakespeare and no way to download one (offline, say)."""


class UncheckedTextWarning(UserWarning):
    """Training on a text of the reader's own, which no digest can vouch for."""


def sha256_of(data: bytes) -> str:
    """Hex SHA-256 digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def _resolve(path: str | os.PathLike, origin: str) -> Path:
    """A file, or a folder that holds ``FILENAME``; ``origin`` says who named it, for errors."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / FILENAME
    if not path.is_file():
        raise FileNotFoundError(f"{origin}: no Tiny Shakespeare file at {path}. {_HOW_TO_PROVIDE}")
    return path


def _read_verified(path: Path) -> str:
    data = path.read_bytes()
    actual = sha256_of(data)
    if actual != SHA256:
        raise DataError(f"{path} is not the expected Tiny Shakespeare file: SHA-256 "
                        f"expected {SHA256}, got {actual}. Replace it with a fresh copy of "
                        f"{DATA_URL}")
    return data.decode("utf-8")


def _read_own(path: Path) -> str:
    """A reader's own text: any UTF-8 file, its digest not checked (and a warning says so)."""
    data = path.read_bytes()
    if not data:
        raise DataError(f"{path} is empty: there is no text to train on")
    if sha256_of(data) == SHA256:              # Tiny Shakespeare under another name
        return data.decode("utf-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path} is not UTF-8 text (byte {data[err.start]:#04x} at offset "
                        f"{err.start:,}); save it as UTF-8 and try again") from None
    if len(text) < 2:
        raise DataError(f"{path} holds a single character: a language model needs at least "
                        f"two (one to read, the next to predict), and a real run thousands")
    warnings.warn(f"training on {path} ({len(text):,} characters, {len(set(text))} distinct), "
                  f"not Tiny Shakespeare: checksum not checked", UncheckedTextWarning,
                  stacklevel=3)
    return text


def _download(url: str, dest: Path) -> str:
    """Fetch ``url``, check it, then publish it at ``dest`` in one atomic rename."""
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as err:
        raise DataUnavailableError(f"could not download Tiny Shakespeare from {url} ({err}) and no "
                           f"local copy was found. {_HOW_TO_PROVIDE}") from err
    actual = sha256_of(data)
    if actual != SHA256:
        # Checked before anything touches the disk, so a bad download never lands in the cache.
        raise DataError(f"the download from {url} is not the expected Tiny Shakespeare file: "
                        f"SHA-256 expected {SHA256}, got {actual}; nothing was cached")
    atomic_write(dest, data)          # a reader never sees half a file
    return data.decode("utf-8")


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/anatomy``, else ``~/.cache/anatomy``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "anatomy"


def load_text(path: str | os.PathLike | None = None,
              cache_dir: str | os.PathLike | None = None, url: str | None = None) -> str:
    """The Tiny Shakespeare text, verified by SHA-256 (see the module docstring for the order),
    or the reader's own text.

    ``path`` to a file named ``tinyshakespeare.txt`` (or a folder holding one) must pass the
    check; ``path`` to a file of any other name is your own text, read as UTF-8 and not
    checked (an ``UncheckedTextWarning`` names it, with its length and number of distinct
    characters); an empty or one-character file is an error. ``url`` defaults to
    ``DATA_URL``; tests point it at a local ``file://`` copy. A cached copy that fails the
    check is deleted (so the next call downloads afresh) and the error says so; a wrong
    explicit or ``ANATOMY_DATA`` file is reported and left alone. Check failures raise
    ``DataError`` (a ``ValueError``).
    """
    if path is not None:
        found = _resolve(path, "path")
        return _read_verified(found) if found.name == FILENAME else _read_own(found)
    env = os.environ.get(ENV_VAR)
    if env:
        return _read_verified(_resolve(env, f"{ENV_VAR}={env}"))
    cached = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    cached = cached / FILENAME
    if cached.is_file():
        try:
            return _read_verified(cached)
        except ValueError as err:
            cached.unlink()
            raise DataError(f"{err}. The bad cached copy was deleted; call again to download "
                            f"a fresh one.") from None
    return _download(url or DATA_URL, cached)


def split(ids, frac: float = 0.9):
    """First ``frac`` of the ids for training, the rest for validation (no shuffling: the
    validation text is a later stretch of the play, never seen in training).

    Shapes: ids [N] -> train [floor(frac N)], val [N - floor(frac N)]
    """
    if not 0.0 < frac < 1.0:
        raise ValueError(f"split: frac must lie strictly between 0 and 1, got {frac}")
    n = int(frac * len(ids))
    return ids[:n], ids[n:]


class CharTokenizer:
    """One id per distinct character, in sorted order (so the same text gives the same ids).

    ``CharTokenizer(text)`` learns the vocabulary from ``text``; ``tok.vocab`` is that
    vocabulary as one string, and ``CharTokenizer(tok.vocab)`` rebuilds the same tokenizer.

    Shapes: encode str[n] -> ids [n]; decode ids [n] -> str[n]
    """

    def __init__(self, text: str):
        if not isinstance(text, str) or not text:
            raise ValueError("CharTokenizer: expected a non-empty string to learn the "
                             f"vocabulary from, got {type(text).__name__} {text!r:.40}")
        self.vocab = "".join(sorted(set(text)))
        self._id = {ch: i for i, ch in enumerate(self.vocab)}

    @property
    def vocab_size(self) -> int:
        """V, the number of distinct characters."""
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """Ids of every character of ``text``."""
        try:
            return [self._id[ch] for ch in text]
        except KeyError:
            pos = next(i for i, ch in enumerate(text) if ch not in self._id)
            raise ValueError(f"encode: character {text[pos]!r} at position {pos} is not in the "
                             f"vocabulary of {self.vocab_size} characters") from None

    def decode(self, ids: Sequence[int]) -> str:
        """The text spelled by ``ids`` (a list, a NumPy array or a 1-D torch tensor)."""
        if hasattr(ids, "tolist"):          # an array or a tensor, without importing torch
            ids = ids.tolist()
        out = []
        for pos, i in enumerate(ids):
            if not 0 <= int(i) < self.vocab_size:
                raise ValueError(f"decode: id {int(i)} at position {pos} is outside [0, V) = "
                                 f"[0, {self.vocab_size})")
            out.append(self.vocab[int(i)])
        return "".join(out)

    def __repr__(self) -> str:
        return f"CharTokenizer(V={self.vocab_size})"
