"""The GPT of chapter 8 as a PyTorch ``nn.Module``, ready to train.

Same architecture and same parameter names as ``anatomy.gpt_numpy``: weights are stored
[in, out] and applied as ``x @ W``, so ``model.state_dict()`` has exactly the keys of
``anatomy.params.param_shapes(cfg)`` and moving weights between the two is a dictionary walk
(``from_numpy``, ``load_numpy_params``, ``to_numpy_params``).

Shapes: ids [B, T] -> logits [B, T, V]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from anatomy.blocks import LN_EPS  # GPT-2's LayerNorm epsilon, as in the NumPy model
from anatomy.masks import causal_mask
from anatomy.params import GPTConfig, check_params

ATTN_KINDS = ("sdpa", "explicit")


def explicit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                       dropout_p: float = 0.0, training: bool = False) -> torch.Tensor:
    """The book's attention, written out: scores, mask, softmax, weighted sum of values.

    Shapes: q, k, v [B, h, T, d_head] -> [B, h, T, d_head]
    """
    d_head = q.shape[-1]
    # [B, h, T, d_head] @ [B, h, d_head, T] -> [B, h, T, T]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    if causal:
        # Chapter 3's mask (True = forbidden: the future), moved to the scores' device.
        mask = torch.from_numpy(causal_mask(q.shape[-2])).to(q.device)     # [T, T]
        scores = scores.masked_fill(mask, float("-inf"))
    weights = F.softmax(scores, dim=-1)          # [B, h, T, T], each row sums to 1
    weights = F.dropout(weights, p=dropout_p, training=training)
    return weights @ v                           # [B,h,T,T] @ [B,h,T,d_head] -> [B,h,T,d_head]


def check_token_ids(ids: torch.Tensor, V: int, name: str = "ids") -> None:
    """Raise ``ValueError`` unless every id lies in [0, V).

    Reads the smallest and largest id, so on a GPU the host waits for the device: call it
    once on a whole token stream, not on every batch (see ``GPT.trusting_id_values``).

    Shapes: ids [...] (any shape, integer dtype)
    """
    if not ids.numel():
        return
    lo, hi = (int(v) for v in torch.aminmax(ids))
    if lo < 0 or hi >= V:
        bad, which = (lo, "min") if lo < 0 else (hi, "max")
        raise ValueError(f"{name}: expected integers in [0, V) = [0, {V}), got {which} {bad}")


class Block(nn.Module):
    """One pre-norm block: ``x = x + Attn(LN1(x))``, then ``x = x + MLP(LN2(x))`` (the
    second step left out, with its weights, when ``cfg.attn_only``).

    The parameters sit directly on the block (not in sub-modules) so their names are the
    shape table's: ``ln1_g``, ``W_qkv``, ``b_qkv``, ``W_o``, ..., ``b_2``.

    Shapes: x [B, T, d] -> [B, T, d]
    """

    def __init__(self, cfg: GPTConfig, dropout: float, attn: str, causal: bool):
        super().__init__()
        d, d_ff = cfg.d, cfg.d_ff
        self.h, self.dropout, self.attn, self.causal = cfg.h, dropout, attn, causal
        self.ln1_g = nn.Parameter(torch.ones(d))
        self.ln1_b = nn.Parameter(torch.zeros(d))
        self.W_qkv = nn.Parameter(torch.empty(d, 3 * d))
        self.b_qkv = nn.Parameter(torch.zeros(3 * d))
        self.W_o = nn.Parameter(torch.empty(d, d))
        self.b_o = nn.Parameter(torch.zeros(d))
        self.attn_only = cfg.attn_only           # no MLP, no ln2: x + Attn(LN1(x)) alone
        if self.attn_only:
            return
        self.ln2_g = nn.Parameter(torch.ones(d))
        self.ln2_b = nn.Parameter(torch.zeros(d))
        self.W_1 = nn.Parameter(torch.empty(d, d_ff))
        self.b_1 = nn.Parameter(torch.zeros(d_ff))
        self.W_2 = nn.Parameter(torch.empty(d_ff, d))
        self.b_2 = nn.Parameter(torch.zeros(d))

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """Causal multi-head self-attention with one fused Q/K/V projection.

        Shapes: x [B, T, d] -> [B, T, d]
        """
        B, T, d = x.shape
        h = self.h
        qkv = x @ self.W_qkv + self.b_qkv                      # [B, T, d] @ [d, 3d] -> [B, T, 3d]
        q, k, v = qkv.split(d, dim=-1)                          # 3 x [B, T, d]
        # Head i owns features i*d_head:(i+1)*d_head of q, k and v, as in anatomy.heads.
        q = q.view(B, T, h, d // h).transpose(1, 2)             # [B, T, d] -> [B, h, T, d_head]
        k = k.view(B, T, h, d // h).transpose(1, 2)             # [B, T, d] -> [B, h, T, d_head]
        v = v.view(B, T, h, d // h).transpose(1, 2)             # [B, T, d] -> [B, h, T, d_head]
        p = self.dropout if self.training else 0.0
        if self.attn == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p,
                                                 is_causal=self.causal)  # -> [B, h, T, d_head]
        else:
            out = explicit_attention(q, k, v, causal=self.causal, dropout_p=p,
                                     training=self.training)             # -> [B, h, T, d_head]
        out = out.transpose(1, 2).reshape(B, T, d)              # [B, h, T, d_head] -> [B, T, d]
        out = out @ self.W_o + self.b_o                         # [B, T, d] @ [d, d] -> [B, T, d]
        return F.dropout(out, p=self.dropout, training=self.training)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        """Per-token feed-forward: widen to d_ff, GELU (GPT-2's tanh form), narrow back.

        Shapes: x [B, T, d] -> [B, T, d]
        """
        hidden = x @ self.W_1 + self.b_1          # [B, T, d] @ [d, d_ff] -> [B, T, d_ff]
        hidden = F.gelu(hidden, approximate="tanh")
        out = hidden @ self.W_2 + self.b_2         # [B, T, d_ff] @ [d_ff, d] -> [B, T, d]
        return F.dropout(out, p=self.dropout, training=self.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1]
        x = x + self.attention(F.layer_norm(x, (d,), self.ln1_g, self.ln1_b, LN_EPS))
        if self.attn_only:
            return x
        return x + self.mlp(F.layer_norm(x, (d,), self.ln2_g, self.ln2_b, LN_EPS))


class GPT(nn.Module):
    """Token + position embeddings, L pre-norm blocks, a final LayerNorm and the head.

    Args:
        cfg: the model's shape (``anatomy.params.GPTConfig``).
        dropout: probability used on the embeddings, the attention weights and both
            residual branches while training (0 turns it off; eval mode always turns it off).
        attn: ``"sdpa"`` (PyTorch's fused ``scaled_dot_product_attention``) or
            ``"explicit"`` (the book's scores / softmax / weighted sum). Same results.
        causal: ``False`` removes the causal mask, so every position sees the whole window,
            including the very token it is asked to predict (chapter 9's experiment).

    ``forward(ids)`` returns logits; ``forward(ids, targets)`` returns ``(logits, loss)``
    with the mean cross-entropy over all B x T positions. Every call checks that ids is an
    integer tensor [B, T] with T <= ctx and values in [0, V); the value check waits for the
    device, so a training loop that has checked its data once turns it off for its steps
    with ``trusting_id_values()``.

    Shapes: ids [B, T] (T <= ctx), targets [B, T] -> logits [B, T, V], loss []
    """

    def __init__(self, cfg: GPTConfig, dropout: float = 0.0, attn: str = "sdpa",
                 causal: bool = True):
        super().__init__()
        if attn not in ATTN_KINDS:
            raise ValueError(f"attn: expected one of {ATTN_KINDS}, got {attn!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout: expected a probability in [0, 1), got {dropout}")
        self.cfg, self.dropout, self.attn, self.causal = cfg, dropout, attn, causal
        self.check_id_values = True      # see trusting_id_values
        self.tok_emb = nn.Parameter(torch.empty(cfg.V, cfg.d))
        self.pos_emb = nn.Parameter(torch.empty(cfg.ctx, cfg.d))
        self.blocks = nn.ModuleList(Block(cfg, dropout, attn, causal) for _ in range(cfg.L))
        self.lnf_g = nn.Parameter(torch.ones(cfg.d))
        self.lnf_b = nn.Parameter(torch.zeros(cfg.d))
        if not cfg.tied:
            self.head = nn.Parameter(torch.empty(cfg.V, cfg.d))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """GPT-2's initialisation: N(0, 0.02) for every matrix and embedding, and
        N(0, 0.02 / sqrt(2L)) for the two projections that write into the residual stream
        (W_o, W_2), so that the writes added with depth stay small (chapter 6 measures how
        the stream still grows). Biases 0, LN gains 1.
        """
        residual_std = 0.02 / math.sqrt(2 * self.cfg.L)
        for name, p in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf.endswith("_g"):
                p.fill_(1.0)
            elif p.ndim == 1:
                p.zero_()
            else:
                std = residual_std if leaf in ("W_o", "W_2") else 0.02
                p.normal_(0.0, std, generator=generator)

    def num_params(self) -> int:
        """Every learned number, counted once (a tied head adds nothing)."""
        return sum(p.numel() for p in self.parameters())

    @property
    def device(self) -> torch.device:
        """Where the weights live; ids fed to the model must be there too."""
        return self.tok_emb.device

    @contextmanager
    def trusting_id_values(self):
        """Within this block, ``forward`` checks the ids' type and shape but not their values.

        Reading the smallest and largest id as Python numbers makes the host wait for the GPU
        (a device sync) on every call. A training loop whose batches are windows of a token
        stream it has checked once with ``check_token_ids`` does not need the per-call check;
        ``anatomy.train`` runs its steps and evaluations inside this block. On leaving it the
        check is back on, so the model the loop hands back validates every call again.
        """
        before = self.check_id_values
        self.check_id_values = False
        try:
            yield self
        finally:
            self.check_id_values = before

    def _check_ids(self, ids: torch.Tensor, name: str = "ids") -> None:
        V, ctx = self.cfg.V, self.cfg.ctx
        if not isinstance(ids, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor of token ids [B, T], got "
                            f"{type(ids).__name__}")
        if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
            raise TypeError(f"{name}: expected integers in [0, V) = [0, {V}), got dtype "
                            f"{ids.dtype}")
        if ids.ndim != 2 or ids.shape[1] < 1:
            hint = " (for one sequence, pass ids[None])" if ids.ndim == 1 else ""
            raise ValueError(f"{name}: expected shape [B, T] with T >= 1, got "
                             f"{tuple(ids.shape)}{hint}")
        if ids.shape[1] > ctx:
            raise ValueError(f"{name}: T={ids.shape[1]} exceeds ctx={ctx}; crop the input to "
                             f"its last {ctx} tokens")
        # The value check reads data, so it syncs with the device and breaks torch.compile
        # graphs: skipped while compiling and inside trusting_id_values (ids checked upstream).
        if not torch.compiler.is_compiling() and self.check_id_values:
            check_token_ids(ids, V, name)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor | None = None):
        self._check_ids(ids)
        B, T = ids.shape
        x = F.embedding(ids, self.tok_emb) + self.pos_emb[:T]    # [B, T, d] + [T, d] -> [B, T, d]
        x = F.dropout(x, p=self.dropout, training=self.training)
        for block in self.blocks:
            x = block(x)                                          # [B, T, d] -> [B, T, d]
        x = F.layer_norm(x, (self.cfg.d,), self.lnf_g, self.lnf_b, LN_EPS)
        head = self.tok_emb if self.cfg.tied else self.head
        logits = x @ head.T                                       # [B, T, d] @ [d, V] -> [B, T, V]
        if targets is None:
            return logits
        if not isinstance(targets, torch.Tensor) or targets.shape != ids.shape:
            raise ValueError(f"targets: expected shape [B, T] = {tuple(ids.shape)} like ids, got "
                             f"{tuple(getattr(targets, 'shape', ()))}")
        loss = F.cross_entropy(logits.reshape(B * T, -1),   # [B, T, V] -> [B*T, V]
                               targets.reshape(B * T))      # [B, T] -> [B*T]
        return logits, loss


def load_numpy_params(model: GPT, params: Mapping[str, np.ndarray]) -> GPT:
    """Copy a NumPy weight dict (the shape table's names) into ``model``, in place.

    Every key must be present with its exact shape (``anatomy.params.check_params`` says
    which is wrong); values are cast to the model's dtype.

    Shapes: params[name] must equal param_shapes(cfg)[name]
    """
    model = unwrap(model)
    check_params(params, model.cfg)     # every name of the shape table, right shapes, no extras
    own = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in own.items():
            value = np.asarray(params[name])
            p.copy_(torch.from_numpy(np.ascontiguousarray(value)).to(p.dtype))
    return model


def from_numpy(params: Mapping[str, np.ndarray], cfg: GPTConfig,
               dtype: torch.dtype | None = None, **kwargs) -> GPT:
    """A ``GPT`` holding the NumPy weights ``params``; ``dtype`` defaults to theirs (so
    float64 NumPy weights give a float64 model, for exact comparisons). ``kwargs`` go to GPT.
    """
    if dtype is None:
        dtype = torch.from_numpy(np.asarray(params["tok_emb"])[:0]).dtype
    model = GPT(cfg, **kwargs).to(dtype)
    return load_numpy_params(model, params)


def unwrap(model: nn.Module) -> GPT:
    """The plain ``GPT`` inside a ``torch.compile`` and/or ``DistributedDataParallel``
    wrapper (whose parameter names carry ``_orig_mod.`` / ``module.`` prefixes)."""
    while not isinstance(model, GPT):
        inner = getattr(model, "_orig_mod", None) or getattr(model, "module", None)
        if inner is None:
            raise TypeError(f"expected a GPT (possibly compiled or wrapped in DDP), got "
                            f"{type(model).__name__}")
        model = inner
    return model


def to_numpy_params(model: nn.Module) -> dict[str, np.ndarray]:
    """The model's weights as the NumPy dict ``anatomy.gpt_numpy`` takes (copies, on CPU)."""
    model = unwrap(model)
    return {name: p.detach().cpu().numpy().copy() for name, p in model.named_parameters()}


def _kernel(device_type: str) -> dict:
    """AdamW's implementation: on CUDA the fused kernel, the whole update in one launch."""
    return {"fused": True} if device_type == "cuda" else {}


def configure_optimizer(model: GPT, lr: float, weight_decay: float = 0.1,
                        betas: tuple[float, float] = (0.9, 0.99),
                        device_type: str = "cpu") -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only.

    Decayed: every 2-D parameter, the embeddings included (as in nanoGPT: the tied token
    table is also the output head, a matrix like any other). Not decayed: biases and
    LayerNorm gains and shifts, whose job is to set a scale or an offset, not to store
    features. ``device_type="cuda"`` picks the fused kernel; the arithmetic is the same.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, **_kernel(device_type))
