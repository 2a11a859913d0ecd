"""Input checks shared by every module, so a mistake always reads the same way.

A wrong argument raises ``ValueError`` (``TypeError`` when the dtype is wrong) with a message
that names the argument, the shape it should have in the book's letters (with numbers when
they are known) and what arrived::

    q: expected shape [..., T, d_k], got (4,)
    W_qkv: expected shape [d, 3d] = (8, 24), got (8, 12)
    ids: expected integers in [0, V) = [0, 65), got max 70

Shape specs are written the way the book writes shapes: ``"[..., T, d]"``. A letter that
appears twice must have the same size both times, a prefix multiplies (``3d``), and a leading
``...`` stands for any number of batch or head axes.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache

import numpy as np

_DIM = re.compile(r"^(\d*)([A-Za-z_][A-Za-z0-9_]*)$")


@lru_cache(maxsize=256)  # the same few specs are parsed on every call of every function
def _parse(spec: str) -> tuple[bool, tuple[tuple[int, str | None], ...]]:
    """Split "[..., T, 3d]" into (has_ellipsis, [(1, "T"), (3, "d")]); a literal is (n, None)."""
    body = spec.strip()
    if not (body.startswith("[") and body.endswith("]")):
        raise ValueError(f"shape spec must look like '[..., T, d]', got {spec!r}")
    tokens = [t.strip() for t in body[1:-1].split(",") if t.strip()]
    ellipsis = bool(tokens) and tokens[0] == "..."
    dims = []
    for token in tokens[1:] if ellipsis else tokens:
        if token.isdigit():
            dims.append((int(token), None))
            continue
        match = _DIM.match(token)
        if match is None:
            raise ValueError(f"bad dimension {token!r} in shape spec {spec!r}")
        dims.append((int(match.group(1) or 1), match.group(2)))
    return ellipsis, tuple(dims)


def resolve(spec: str, **sizes: int) -> tuple[int, ...]:
    """The concrete shape of a spec without "...": resolve("[d, 3d]", d=8) == (8, 24)."""
    ellipsis, dims = _parse(spec)
    if ellipsis:
        raise ValueError(f"cannot resolve {spec!r}: '...' has no fixed size")
    return tuple(n if letter is None else n * sizes[letter] for n, letter in dims)


def shape_error(name: str, spec: str, got: Iterable[int], *,
                sizes: Mapping[str, int] | None = None, note: str = "") -> ValueError:
    """The one message format for a wrong shape; ``sizes`` fills in the numbers it knows."""
    sizes = dict(sizes or {})
    ellipsis, dims = _parse(spec)
    letters = [letter for _, letter in dims if letter is not None]
    concrete = ""
    if letters and all(letter in sizes for letter in letters):
        numbers = [str(n if letter is None else n * sizes[letter]) for n, letter in dims]
        if ellipsis:
            concrete = " = (" + ", ".join(["...", *numbers]) + ")"
        else:
            concrete = " = (" + ", ".join(numbers) + (",)" if len(numbers) == 1 else ")")
    extra = f" {note}" if note else ""
    return ValueError(f"{name}: expected shape {spec}{concrete}{extra}, got {tuple(got)}")


def check_shape(x: np.ndarray, name: str, spec: str, **sizes: int) -> dict[str, int]:
    """Check ``x.shape`` against ``spec``; return the size bound to every letter.

    ``sizes`` pins letters already known from other arguments, e.g. ``d_k=4``.

    Shapes: x must match spec, e.g. "[..., T, d_k]" accepts (T, d_k) or (B, h, T, d_k)
    """
    shape = np.shape(x)
    ellipsis, dims = _parse(spec)
    bound = dict(sizes)
    rank_ok = len(shape) >= len(dims) if ellipsis else len(shape) == len(dims)
    if not rank_ok:
        raise shape_error(name, spec, shape, sizes=bound)
    tail = shape[len(shape) - len(dims):]
    # Bind each letter at its first sight, then compare every axis, so that the message for
    # [d, 3d] = (8, 12) can already say "= (8, 24)".
    for (mult, letter), size in zip(dims, tail, strict=True):
        if letter is not None and letter not in bound and size % mult == 0:
            bound[letter] = size // mult
    for (mult, letter), size in zip(dims, tail, strict=True):
        want = mult if letter is None else mult * bound.get(letter, -1)
        if size != want:
            raise shape_error(name, spec, shape, sizes=bound)
    return {letter: bound[letter] for _, letter in dims if letter is not None}


def check_broadcastable(x: np.ndarray, name: str, target: tuple[int, ...], *,
                        spec: str = "[..., T_q, T_k]") -> None:
    """``x`` must broadcast to ``target`` without enlarging it (a mask or an additive bias).

    Shapes: x broadcastable to target [..., T_q, T_k]
    """
    target = tuple(target)
    try:
        fits = np.broadcast_shapes(np.shape(x), target) == target
    except ValueError:
        fits = False
    if not fits:
        T_q, T_k = target[-2:]
        raise ValueError(
            f"{name}: expected shape [T_q, T_k] = ({T_q}, {T_k}) (or broadcastable to "
            f"scores {spec} = {target}), got {np.shape(x)}")


def check_non_negative(x: object, name: str, spec: str, what: str) -> np.ndarray:
    """Measurements such as standard deviations or norms: a float array of shape ``spec``,
    finite and >= 0 everywhere."""
    x = np.asarray(x, dtype=float)
    check_shape(x, name, spec)
    if not np.all(np.isfinite(x)) or np.any(x < 0):
        raise ValueError(f"{name}: expected finite {what} >= 0")
    return x


def check_bool(mask: object, name: str) -> np.ndarray:
    """Masks are boolean with True = forbidden; a 0/1 float or an additive -inf mask is not."""
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise TypeError(f"{name}: expected a boolean array (True = forbidden), "
                        f"got dtype {mask.dtype}")
    return mask


def check_mask(mask: object, target: tuple[int, ...], *, name: str = "mask") -> np.ndarray:
    """A boolean mask that broadcasts to the scores [..., T_q, T_k] it will cover."""
    mask = check_bool(mask, name)
    check_broadcastable(mask, name, target)
    return mask


def check_leading(x: np.ndarray, name: str, spec: str, ref_lead: tuple[int, ...],
                  ref_name: str) -> None:
    """The axes that ``spec``'s leading "..." stands for in ``x`` must broadcast with
    ``ref_lead``, the leading axes of the argument ``ref_name``.

    Shapes: x [..., core axes of spec], ref_lead [...] (e.g. x_q.shape[:-2])
    """
    ref_lead = tuple(ref_lead)
    try:
        np.broadcast_shapes(_lead(np.shape(x), spec), ref_lead)
    except ValueError:
        raise shape_error(name, spec, np.shape(x), note=f"with leading axes broadcastable to "
                          f"{ref_name}'s {ref_lead}") from None


def check_projection(W: np.ndarray, b: np.ndarray | None, names: tuple[str, str], spec: str,
                     **sizes: int) -> dict[str, int]:
    """A weight [in, out] and its optional bias [out], e.g. spec "[d, 3d]" checks b as [3d]."""
    dims = check_shape(W, names[0], spec, **sizes)
    if b is not None:
        out_spec = "[" + spec.strip("[]").split(",")[-1].strip() + "]"
        check_shape(b, names[1], out_spec, **dims)
    return dims


def check_positive_int(value: object, name: str) -> int:
    """A count such as h, T or d: a true integer (not a bool, not 2.0) and at least 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return int(value)


def check_positive_number(value: object, name: str) -> float:
    """A scale such as a temperature, a RoPE base or an epsilon: a real number (not a bool,
    not an array), finite and above 0. Returned as a Python float."""
    if (isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating))
            or not (value > 0 and math.isfinite(value))):
        raise ValueError(f"{name}: expected a positive number, got {value!r}")
    return float(value)


def check_top_k(top_k: object, V: int) -> int | None:
    """Top-k sampling keeps k of the V tokens: an integer in [1, V], or None for all of them."""
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer))
                              or not 1 <= top_k <= V):
        raise ValueError(f"top_k: expected an integer in [1, V] = [1, {V}], got {top_k!r} "
                         "(None keeps every token)")
    return None if top_k is None else int(top_k)


def check_even(value: object, name: str, why: str = "features come in pairs") -> int:
    """A width whose features are used two at a time: a positive integer, and even."""
    value = check_positive_int(value, name)
    if value % 2:
        raise ValueError(f"{name}: expected an even width ({why}), got {name}={value}")
    return value


def check_pairs(x: np.ndarray, name: str, spec: str, why: str = "features turn in pairs"
                ) -> None:
    """The last axis of ``x``, the last letter of ``spec``, must be even (RoPE's pairs)."""
    if np.shape(x)[-1] % 2:
        letter = _parse(spec)[1][-1][1]
        raise shape_error(name, spec, np.shape(x), note=f"with {letter} even ({why})")


def check_type(value: object, name: str, kind: type, example: str) -> object:
    """A config of the right class, e.g. a GPTConfig where a LlamaConfig would not fit."""
    if not isinstance(value, kind):
        raise TypeError(f"{name}: expected a {kind.__name__} (e.g. {example}), got "
                        f"{type(value).__name__}")
    return value


def check_divisible(name: str, d: int, h: int) -> None:
    """Heads split the width evenly, so d must be a multiple of h."""
    if d % h:
        raise ValueError(f"{name}: d={d} is not divisible by h={h} heads")


def check_rope_heads(name: str, d: int, h: int) -> None:
    """RoPE turns each head's features in pairs, so the head width d / h must be even."""
    if (d // h) % 2:
        raise ValueError(f"{name}: RoPE turns features in pairs, so d_head = d / h must be "
                         f"even, got d_head={d // h} (d={d}, h={h})")


def check_groups(name: str, h: int, h_kv: int) -> None:
    """Grouped-query attention: the h query heads split into h_kv groups of equal size."""
    if h % h_kv:
        raise ValueError(f"{name}: h={h} query heads do not split into groups for "
                         f"h_kv={h_kv} key/value heads (h must be a multiple of h_kv)")


def check_ids(ids: object, V: int, ctx: int | None = None, *, name: str = "ids") -> np.ndarray:
    """Token ids: integers in [0, V), shape [T] or [B, T], with 1 <= T (<= ctx if given).

    Shapes: ids [T] or [B, T]
    """
    ids = np.asarray(ids)
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"{name}: expected integers in [0, V) = [0, {V}), "
                        f"got dtype {ids.dtype}")
    if ids.ndim not in (1, 2):
        raise ValueError(f"{name}: expected shape [T] or [B, T], got {ids.shape}")
    T = ids.shape[-1]
    if T < 1 or ids.size == 0:
        raise ValueError(f"{name}: expected shape [T] or [B, T] with T >= 1, got {ids.shape}")
    if ids.min() < 0:
        raise ValueError(f"{name}: expected integers in [0, V) = [0, {V}), got min {ids.min()}")
    if ids.max() >= V:
        raise ValueError(f"{name}: expected integers in [0, V) = [0, {V}), got max {ids.max()}")
    if ctx is not None and T > ctx:
        raise ValueError(f"{name}: T={T} exceeds ctx={ctx}")
    return ids


def check_keys(given: Iterable[str], name: str, required: Iterable[str],
               optional: Iterable[str] = ()) -> None:
    """A weight dict must hold every required key and nothing unexpected (a typo is loud)."""
    given, required = set(given), list(required)
    expected = [*required, *optional]
    listed = ", ".join(expected[:14]) + (f", ... ({len(expected)} in all)"
                                         if len(expected) > 14 else "")
    missing = [k for k in required if k not in given]
    if missing:
        raise ValueError(f"{name}: missing key {missing[0]!r} (expected keys: {listed})")
    unknown = sorted(given - set(expected))
    if unknown:
        raise ValueError(f"{name}: unknown key {unknown[0]!r} (expected keys: {listed})")


# ---- one decorator: check the arguments against the docstring's Shapes line ---------------

_ENTRY = re.compile(r"(?P<names>[A-Za-z_]\w*(?:\s*(?:,|and)\s*[A-Za-z_]\w*)*)\s+"
                    r"(?P<bcast>broadcastable to\s+)?"
                    r"(?P<specs>\[[^\]]*\](?:\s+or\s+\[[^\]]*\])*)")


def _shape_entries(doc: str, params: Iterable[str]) -> list[tuple[str, tuple[str, ...], bool]]:
    """The argument specs of a docstring's "Shapes:" block, up to its first "->".

    "q, k [..., T, d_k], mask broadcastable to [..., T_q, T_k]" gives
    [("q", ("[..., T, d_k]",), False), ("k", ...), ("mask", ("[..., T_q, T_k]",), True)];
    names that are not parameters of the function are ignored.
    """
    _, found, rest = doc.partition("Shapes:")
    if not found:
        return []
    inputs = " ".join(rest.split("->", 1)[0].split())
    params = set(params)
    entries = []
    for match in _ENTRY.finditer(inputs):
        specs = tuple(re.findall(r"\[[^\]]*\]", match.group("specs")))
        for name in re.split(r"\s*(?:,|and)\s*", match.group("names")):
            if name in params:
                try:
                    for spec in specs:
                        _parse(spec)
                except ValueError:
                    continue             # a spec in words ("[d/2]"): documented, not checked
                entries.append((name, specs, bool(match.group("bcast"))))
    return entries


def validated(fn=None, *, floats: Iterable[str] = (), where=None):
    """Check a function's array arguments against the ``Shapes:`` line of its docstring.

    Every argument named there is turned into an array (``floats``: integer arrays become
    float64) and checked with :func:`check_shape`; a letter must have the same size in every
    argument, arguments whose spec starts with ``...`` must have leading axes that broadcast
    together, and "x broadcastable to [..., T_q, T_k]" must broadcast to that shape.
    ``where(args)`` may add checks that a shape cannot say (a dtype, d % h); it receives the
    bound arguments (a dict, arrays already converted) and the sizes of the letters.

    The checks live here, not in the function's body, so the body reads like the math and
    the docs and the checks cannot drift apart. An argument passed as None is not checked.
    """
    def decorate(func):
        sig = inspect.signature(func)
        entries = _shape_entries(func.__doc__ or "", sig.parameters)
        as_float = frozenset(floats)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            values = bound.arguments
            sizes: dict[str, int] = {}
            leading: list[tuple[str, str, np.ndarray]] = []
            later = []
            for name, specs, broadcast in entries:
                if values.get(name) is None:
                    continue
                arr = np.asarray(values[name])
                if name in as_float and not np.issubdtype(arr.dtype, np.floating):
                    arr = arr.astype(np.float64)
                values[name] = arr
                if broadcast:
                    later.append((name, specs[0], arr))
                    continue
                spec = _first_fit(arr, name, specs, sizes)
                if _parse(spec)[0]:
                    leading.append((name, spec, arr))
            if leading:          # every "[..., ...]" argument's leading axes fit the first's
                first_name, first_spec, first = leading[0]
                for name, spec, arr in leading[1:]:
                    check_leading(arr, name, spec, _lead(first.shape, first_spec), first_name)
            for name, spec, arr in later:
                _check_broadcast(arr, name, spec, sizes, leading)
            if where is not None:
                where(values, sizes)
            return func(*bound.args, **bound.kwargs)

        return wrapper

    return decorate(fn) if fn is not None else decorate


def _first_fit(arr: np.ndarray, name: str, specs: tuple[str, ...],
               sizes: dict[str, int]) -> str:
    """Check ``arr`` against the first spec that fits; bind its letters into ``sizes``."""
    first_error = None
    for spec in specs:
        try:
            sizes.update(check_shape(arr, name, spec, **sizes))
            return spec
        except ValueError as error:
            first_error = first_error or error
    if len(specs) > 1:
        raise ValueError(f"{name}: expected shape {' or '.join(specs)}, got {arr.shape}")
    raise first_error


def _check_broadcast(arr: np.ndarray, name: str, spec: str, sizes: dict[str, int],
                     leading: list[tuple[str, str, np.ndarray]]) -> None:
    ellipsis, dims = _parse(spec)
    if any(letter is not None and letter not in sizes for _, letter in dims):
        return                                   # the target is not known from the others
    core = tuple(n if letter is None else n * sizes[letter] for n, letter in dims)
    lead = np.broadcast_shapes(*(_lead(a.shape, s) for _, s, a in leading)) \
        if ellipsis and leading else ()
    check_broadcastable(arr, name, lead + core, spec=spec)


def _lead(shape: tuple[int, ...], spec: str) -> tuple[int, ...]:
    """The axes that a spec's leading "..." stands for."""
    return tuple(shape[:len(shape) - len(_parse(spec)[1])])

