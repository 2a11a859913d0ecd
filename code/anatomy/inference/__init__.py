"""Running a trained model (the inference chapter), in NumPy, one module per idea:

- :mod:`.tiled`: the online softmax and attention in tiles (FlashAttention's forward pass);
- :mod:`.decoding`: temperature, top-k, top-p, min-p, a repetition penalty and beam search,
  with a KV cache, and measures of the text they write;
- :mod:`.speculative`: speculative decoding with a draft model, exact by construction;
- :mod:`.quantize`: int8 and int4 weight-only quantization.

The stable API::

    tiled_attention(q, k, v, block=64, causal=False)            # [..., T, d] like attention
    speculative_generate(target_params, target_cfg, draft_params, draft_cfg, ids, n_new,
                         k=4, temperature=0.0, seed=None)        # -> (ids, stats)
    quantize(params, bits=8, group=None); dequantize(qparams)
"""

from .decoding import (
    beam_search,
    decode,
    log_likelihood,
    repeated_ngrams,
    repetition_penalty,
    text_stats,
    truncate,
)
from .quantize import QTensor, absmax_int8, dequantize, nbytes, quantize
from .speculative import (
    accept_greedy,
    accept_or_resample,
    expected_tokens_per_call,
    output_distribution,
    residual,
    speculative_generate,
)
from .tiled import naive_attention, online_softmax_update, peak_bytes, tiled_attention

__all__ = [
    "QTensor", "absmax_int8", "accept_greedy", "accept_or_resample", "beam_search", "decode",
    "dequantize", "expected_tokens_per_call", "log_likelihood", "naive_attention", "nbytes",
    "online_softmax_update", "output_distribution", "peak_bytes", "quantize",
    "repeated_ngrams", "repetition_penalty", "residual", "speculative_generate", "text_stats",
    "tiled_attention", "truncate",
]
