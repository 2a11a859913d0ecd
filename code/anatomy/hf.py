"""GPT-2 through the book's NumPy forward pass, one call away (chapter 8's last step).

:func:`gpt2_demo` downloads GPT-2 small with Hugging Face ``transformers`` (once; later
runs use its cache), converts its weights with :func:`anatomy.gpt_numpy.params_from_hf`,
generates a few tokens with the NumPy model, compares the NumPy next-token logits with
Hugging Face's on the same prompt, and measures GPT-2's loss on a stretch of Tiny
Shakespeare in bits per character beside the shipped character model's
(``anatomy.weights``) on the same characters. Bits per character make a character model
and a BPE model comparable: each one's total loss over the same characters, in bits,
divided by the number of characters.

Without the internet (or without ``transformers``) it prints one line saying so and
returns None. :func:`compare_with_hf` does the work on a model and tokenizer you pass, so it
also runs, offline, on a small randomly initialised ``GPT2LMHeadModel``.

torch and transformers are imported only when a function runs, never at import.

Shapes: prompt ids [T] -> logits [T, V]; text ids [N] -> windows of <= ctx -> bits per char
"""

from __future__ import annotations

import importlib.util
import os
import socket
from collections.abc import Callable, Mapping

import numpy as np

from .gpt_numpy import forward, generate, next_token_loss, params_from_hf
from .params import GPTConfig

HF_NAME = "gpt2"
HF_HOST = "huggingface.co"
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def _offline_by_setting() -> str | None:
    for var in _OFFLINE_VARS:
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{var} is set"
    return None


def _reachable(host: str, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to ``host``:443 opens (directly; a proxy is assumed to)."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY")):
        return True
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _skip_line(reason: str) -> str:
    return (f"GPT-2 demo skipped: it needs the internet once, to download GPT-2 from "
            f"{HF_HOST} with transformers ({reason}).")


def _cached(name: str) -> bool:
    """Whether Hugging Face's cache already holds ``name`` (looked up without importing it)."""
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache",
                                                  "huggingface"), "hub")
    return os.path.isdir(os.path.join(hub, "models--" + name.replace("/", "--")))


def load_gpt2(name: str = HF_NAME, echo: Callable[[str], None] = print):
    """``(model, tokenizer)`` for a Hugging Face GPT-2 (the cache first, else a download),
    the model in eval mode; or None after one line through ``echo`` saying why not
    (no ``transformers``, offline by setting, no route to huggingface.co, a failed download).

    Whether a download is possible is decided before ``transformers`` is imported (that
    import alone takes seconds), so the offline answer is quick.
    """
    if importlib.util.find_spec("transformers") is None:
        echo(_skip_line("transformers is not installed: pip install transformers"))
        return None
    cached = _cached(name)
    if not cached:
        reason = _offline_by_setting() or (None if _reachable(HF_HOST)
                                           else f"{HF_HOST} is not reachable")
        if reason:
            echo(_skip_line(reason))
            return None
    import transformers
    from transformers import AutoTokenizer, GPT2LMHeadModel

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()        # one line from us, not its retries
    try:
        try:
            return (GPT2LMHeadModel.from_pretrained(name, local_files_only=True).eval(),
                    AutoTokenizer.from_pretrained(name, local_files_only=True))
        except OSError:
            if cached and (_offline_by_setting() or not _reachable(HF_HOST)):
                echo(_skip_line("the cached copy is incomplete and there is no download"))
                return None
        try:
            return (GPT2LMHeadModel.from_pretrained(name).eval(),
                    AutoTokenizer.from_pretrained(name))
        except Exception as err:                      # any failure of the download itself
            echo(_skip_line(f"the download failed: {type(err).__name__}"))
            return None
    finally:
        transformers.logging.set_verbosity(verbosity)


def total_nats(params: Mapping[str, np.ndarray], ids: np.ndarray, cfg: GPTConfig,
               batch: int = 16) -> float:
    """The model's summed next-token loss (nats) over every id of a long sequence but the
    first, each predicted once.

    Windows of ctx ids start every ctx - 1 ids, so consecutive windows share one id: the
    last id of a window is the first (unpredicted) id of the next, and every id after the
    very first is predicted exactly once, with between 1 and ctx - 1 ids of context.

    Shapes: ids [N] (N >= 2) -> windows [n, <= ctx] -> scalar
    """
    ids = np.asarray(ids)
    if ids.ndim != 1 or len(ids) < 2:
        raise ValueError(f"ids: expected shape [N] with N >= 2, got {ids.shape}")
    step = cfg.ctx - 1
    starts = range(0, len(ids) - 1, max(step, 1))
    full = [ids[s:s + cfg.ctx] for s in starts if s + cfg.ctx <= len(ids)]
    tail = [ids[s:s + cfg.ctx] for s in starts if s + cfg.ctx > len(ids)]
    total = 0.0
    for i in range(0, len(full), batch):
        chunk = np.stack(full[i:i + batch])                        # [b, ctx]
        logits = forward(params, chunk, cfg)                       # [b, ctx, V]
        total += next_token_loss(logits, chunk) * chunk.shape[0] * (cfg.ctx - 1)
    for window in tail:            # at most one: a shorter last window reaching the end
        total += next_token_loss(forward(params, window, cfg), window) * (len(window) - 1)
    return total


def compare_with_hf(model, tokenizer, prompt: str = "ROMEO:", n_new: int = 10,
                    text: str | None = None, char_model: str | None = "shakespeare-char",
                    ) -> dict:
    """Run a Hugging Face GPT-2 ``model`` through the NumPy forward pass and compare.

    ``tokenizer`` needs ``encode(str) -> list[int]`` and ``decode(list[int]) -> str``.
    Returns a dict: "cfg" (the converted GPTConfig), "max_abs_diff" (NumPy vs Hugging Face
    next-token logits after ``prompt``, all V of them), "same_argmax", "continuation" (the
    NumPy model's greedy ``n_new`` tokens, decoded), and, when ``text`` is given, "n_chars"
    and "bits_per_char": {"gpt2": ..., char_model: ...} over the characters of ``text``
    after its first token (the shipped character model is scored on the same characters;
    None leaves it out).

    Shapes: prompt ids [T] (T <= ctx) -> logits [V]; text ids [N] -> scalar per model
    """
    import torch

    params, cfg = params_from_hf(model.state_dict(), h=model.config.n_head)
    ids = np.asarray(tokenizer.encode(prompt), dtype=np.int64)
    if ids.ndim != 1 or not 1 <= len(ids) <= cfg.ctx:
        raise ValueError(f"prompt: expected 1 to ctx={cfg.ctx} tokens, got {len(ids)}")
    ours = forward(params, ids, cfg)[-1]                           # [T, V] -> [V]
    with torch.no_grad():
        theirs = model(torch.from_numpy(ids)[None]).logits[0, -1].float().numpy()   # [V]
    grown = generate(params, ids, cfg, n_new)                      # greedy: [T + n_new]
    out = {"cfg": cfg, "max_abs_diff": float(np.abs(ours - theirs).max()),
           "same_argmax": bool(ours.argmax() == theirs.argmax()),
           "continuation": tokenizer.decode(grown[len(ids):].tolist())}
    if text is not None:
        text_ids = np.asarray(tokenizer.encode(text), dtype=np.int64)
        if len(text_ids) < 2:
            raise ValueError(f"text: expected at least 2 tokens, got {len(text_ids)}")
        from .weights import bits, load

        first = max(len(tokenizer.decode(text_ids[:1].tolist())), 1)   # token 0's chars
        chars = len(text) - first                  # the characters GPT-2 predicts
        bpc = {"gpt2": bits(total_nats(params, text_ids, cfg) / chars)}
        if char_model is not None:
            p, c, tok = load(char_model)
            # Start one character before them, so it predicts exactly those characters.
            char_ids = np.asarray(tok.encode(text[first - 1:]))
            bpc[char_model] = bits(total_nats(p, char_ids, c) / chars)
        out.update(n_chars=len(text), bits_per_char=bpc)
    return out


def gpt2_demo(prompt: str = "ROMEO:", n_new: int = 10, n_chars: int = 2000,
              name: str = HF_NAME, echo: Callable[[str], None] = print) -> dict | None:
    """Download (once) and run GPT-2 through the NumPy model; print what it shows.

    Prints the greedy continuation of ``prompt``, the largest NumPy-vs-Hugging-Face logit
    difference, and bits per character of GPT-2 and of the shipped character model on the
    first ``n_chars`` characters of Tiny Shakespeare's validation split (text neither saw in
    training here, though GPT-2's web text may well hold Shakespeare). Returns
    :func:`compare_with_hf`'s dict, or None (after one printed line) when offline.
    """
    loaded = load_gpt2(name, echo)
    if loaded is None:
        return None
    from .text import load_text, split

    text = load_text()
    text = split(text)[1][:n_chars]                    # the validation split's first n_chars
    result = compare_with_hf(*loaded, prompt=prompt, n_new=n_new, text=text)
    bpc = result["bits_per_char"]
    echo(f"{prompt!r} -> {result['continuation']!r} (NumPy GPT-2, greedy)")
    echo(f"next-token logits, NumPy vs Hugging Face: max |difference| "
         f"{result['max_abs_diff']:.1e}; same top token: {result['same_argmax']}")
    echo(f"bits per character on {result['n_chars']:,} characters of Tiny Shakespeare: "
         + ", ".join(f"{k} {v:.3f}" for k, v in bpc.items()))
    return result
