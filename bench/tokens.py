"""Byte-level BPE: training and encoding speed against the references (run by hand).

Training: Tiny Shakespeare to V = 512 with the book's incremental trainer, the naive recount
(``learn_merges_naive``, the same merges) and Hugging Face ``tokenizers``' BPE trainer
(Rust, byte-level with GPT-2's pre-split; its merges may differ where ties are broken
otherwise). Encoding: all of Tiny Shakespeare with GPT-2's ranks, the book's encoder against
tiktoken built offline from the same ranks; a cold cache (a fresh tokenizer) and a warm one.
Then where the book's time goes: the pre-split, the counting and the merge loop.

    ANATOMY_DATA=../shared/data/tinyshakespeare.txt .venv/bin/python bench/tokens.py \\
        [--threads N] [--repeats R]

Each time is the best of R runs, taking turns, so that load from other processes slows
every contender alike. Needs tiktoken and tokenizers (both pinned in requirements.txt).
"""

from __future__ import annotations

import time

from _threads import parse_args  # bench/_threads.py, beside this script

ARGS = parse_args(__doc__.splitlines()[0], repeats=3)

import tiktoken  # noqa: E402
from tokenizers import Tokenizer as HFTokenizer  # noqa: E402
from tokenizers import decoders, models, pre_tokenizers, trainers  # noqa: E402

from anatomy.text import load_text  # noqa: E402
from anatomy.tokens import (  # noqa: E402
    ENDOFTEXT,
    GPT2_PATTERN,
    Tokenizer,
    _word_counts,
    gpt2_ranks,
    gpt2_tokenizer,
    learn_merges,
    learn_merges_naive,
    pre_split,
)

V = 512


def best(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def hf_train(text: str):
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=V, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer=trainer)
    return tok


def main() -> None:
    text = load_text()
    n_bytes = len(text.encode())
    print(f"Tiny Shakespeare: {n_bytes:,} bytes; best of {ARGS.repeats} runs, "
          f"{ARGS.threads} thread(s) for NumPy (unused here)")

    print(f"\nTraining to V = {V}")
    contenders = {"anatomy, incremental": lambda: learn_merges(text, V),
                  "anatomy, naive recount": lambda: learn_merges_naive(text, V),
                  "HF tokenizers (Rust)": lambda: hf_train(text)}
    results = {name: best(fn, ARGS.repeats if "naive" not in name else 1)
               for name, fn in contenders.items()}
    base = results["anatomy, incremental"][0]
    for name, (seconds, _) in results.items():
        print(f"  {name:<24} {seconds:8.2f} s   {seconds / base:6.2f}x the incremental")
    same = results["anatomy, incremental"][1] == results["anatomy, naive recount"][1]
    print(f"  incremental and naive learn the same merges: {same}")

    print("\nEncoding all of Tiny Shakespeare with GPT-2's ranks")
    gpt2 = gpt2_tokenizer()
    ref = tiktoken.Encoding("gpt2-offline", pat_str=GPT2_PATTERN, mergeable_ranks=gpt2_ranks(),
                            special_tokens={ENDOFTEXT: 50256})

    def cold():
        fresh = Tokenizer(gpt2.merges, [ENDOFTEXT], byte_ids=gpt2._byte_ids, name="gpt2")
        start = time.perf_counter()
        ids = fresh.encode_ordinary(text)
        return time.perf_counter() - start, ids

    cold_s = min(cold()[0] for _ in range(ARGS.repeats))
    warm_s, ids = best(lambda: gpt2.encode_ordinary(text), ARGS.repeats)
    tik_s, tik_ids = best(lambda: ref.encode_ordinary(text), ARGS.repeats)
    for name, seconds in (("tiktoken (Rust)", tik_s), ("anatomy, cold cache", cold_s),
                          ("anatomy, warm cache", warm_s)):
        print(f"  {name:<24} {seconds:8.3f} s   {n_bytes / seconds / 1e6:6.2f} MB/s   "
              f"{seconds / tik_s:6.1f}x tiktoken")
    print(f"  same ids: {ids == tik_ids} ({len(ids):,} tokens)")

    print("\nWhere the book's time goes")
    split_s, chunks = best(lambda: pre_split(text), ARGS.repeats)
    count_s, _ = best(lambda: _word_counts(text, GPT2_PATTERN), ARGS.repeats)
    print(f"  pre-split (regex):                {split_s:6.3f} s ({len(chunks):,} chunks, "
          f"{len(set(chunks)):,} distinct)")
    print(f"  pre-split + count chunks:         {count_s:6.3f} s")
    print(f"  training to V = {V}, merge loop:  {base - count_s:6.3f} s "
          f"({(base - count_s) / base:.0%} of training)")
    print(f"  cold encoding, BPE on distinct chunks: {cold_s - split_s:6.3f} s "
          f"({(cold_s - split_s) / cold_s:.0%} of it; the rest is the regex)")


if __name__ == "__main__":
    main()
