"""Seeded inputs for one problem: fp16 Q, int8 K/V with per-token scales, and the paged pool.

Data is reproducible: the generator is seeded by ``problem.seed`` and the problem's sizes
(context, queries, heads, head size, data kind), never by the layout or page size, so the
paged and contiguous layouts of a shape hold the same logical Q/K/V.

Data kinds
----------
``normal``
    q, k, v i.i.d. N(0, 1) (float32; q rounded to fp16). With the 1/sqrt(D) softmax scale the
    logits are ~N(0, 1): a flat, easy softmax.

``realistic``
    A generative model with the structure that real LLM keys and values have, so that the
    softmax is peaky as it is in real models. Per KV head g (query heads h of its group):

    * **outlier channels** - 4 channels c of K with magnitude a_c ~ U(10, 20): a per-channel
      bias of +-a_c and a spread of a_c/4 (the other channels: bias ~N(0, 0.5^2), spread 1).
      ``k[g, j, d] = bias[g, d] + spread[g, d] * z``, z ~ N(0, 1). The outliers make per-token
      int8 quantisation coarse for the ordinary channels, as it is for real keys.
    * **queries with a shared direction** - ``q[h, i] = 1.5 * (mu_h + z)``, where the head's
      mean ``mu_h`` is its group's direction ``mu_g`` (norm 0.5*sqrt(D)) plus 0.3*N(0, 1)
      per channel. Logits then have a spread of about 2 (in natural-log units).
    * **attention sink** - the first n_sink (1 to 4, seeded) keys are the bias plus
      ``lambda_g * unit(mu_g)`` (plus 0.1*N(0,1)), with lambda_g chosen so that their logit is
      T_g = ln(Nk) + 2 + U(-2, 2) above the ordinary keys' mean for a typical query: they take
      roughly 10 % to 90 % of the probability at any context length, like the BOS sink of
      real models.
    * **values** - N(0, 1) with 3 channels of 4x spread, a per-token log-normal magnitude
      (sigma 0.3) so V scales vary, and sink tokens with small values (x0.1).

``npz``
    Q/K/V captured from a real model (SPEC section 1): ``q`` [Hq, Nq, D] and either float
    ``k``, ``v`` [Hkv, Nk, D] (quantised here) or ``k_i8``, ``v_i8``, ``k_scale``, ``v_scale``
    (used as they are; float ``k``/``v`` in the same file are kept for the quantisation error).
    ``ctx = Nk - Nq`` must match the problem's shape.

Quantisation is symmetric per token and head: ``scale = absmax/127`` (fp32; an all-zero row gets
scale 1), ``x_i8 = clip(rint(x/scale), -127, 127)``. The paged pool has ``2*needed + 1`` pages
placed through a seeded random page table (shuffled, with unused pages between); unused pages
and the unused tail of the last page hold random int8 with NaN scales, so a kernel that reads
outside the table or past Nk produces NaN and fails parity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pa_bench.errors import ConfigError
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import Shape

_DATA_CODE = {"normal": 1, "realistic": 2, "npz": 3}
_QUANT_CHUNK_ROWS = 1 << 16


@dataclass
class PagedKV:
    """K/V in a shuffled page pool, read by the kernels through ``page_table``."""

    k_pool: np.ndarray  # int8 [n_pages, Hkv, page, D]
    v_pool: np.ndarray
    k_scale_pool: np.ndarray  # float32 [n_pages, Hkv, page]
    v_scale_pool: np.ndarray
    page_table: np.ndarray  # int32 [ceil(keys/page)]: logical page -> pool page

    @property
    def page(self) -> int:
        return self.k_pool.shape[2]

    def gather(self, keys: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The logical ``k_i8, v_i8, k_scale, v_scale`` ([Hkv, keys, D] / [Hkv, keys]) read back
        through the page table, the way a kernel reads them."""

        def logical(pool: np.ndarray) -> np.ndarray:
            pages = pool[self.page_table]  # [needed, Hkv, page, ...]
            pages = np.moveaxis(pages, 1, 0)  # [Hkv, needed, page, ...]
            flat = pages.reshape(pages.shape[0], -1, *pages.shape[3:])
            return flat[:, :keys]

        return (logical(self.k_pool), logical(self.v_pool),
                logical(self.k_scale_pool), logical(self.v_scale_pool))

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.k_pool, self.v_pool, self.k_scale_pool,
                                      self.v_scale_pool, self.page_table))


@dataclass
class Inputs:
    """Everything a backend needs for one problem (host arrays)."""

    problem: Problem
    q: np.ndarray  # float16 [Hq, Nq, D]
    k_i8: np.ndarray  # int8 [Hkv, Nk, D], logical order
    v_i8: np.ndarray
    k_scale: np.ndarray  # float32 [Hkv, Nk]
    v_scale: np.ndarray
    k_float: np.ndarray | None  # float32 [Hkv, Nk, D] before quantisation (None if loaded int8)
    v_float: np.ndarray | None
    paged: PagedKV | None  # present iff layout == "paged"
    p_scale: float  # power of two with max(v_scale) * p_scale in (0.5, 1]
    qk_scale_log2: float  # float32(softmax_scale * log2(e))

    @property
    def context(self) -> int:
        return self.k_i8.shape[1] - self.q.shape[1]


# --------------------------------------------------------------------------- quantisation


def quantize_per_token(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per token (last axis reduced): ``(x_i8 [..., D], scale [...] float32)``.

    ``scale = absmax/127`` in fp32 (an all-zero row gets scale 1) and
    ``x_i8 = clip(rint(x/scale), -127, 127)``, so ``|x - scale*x_i8| <= scale/2``.
    Works in row chunks so that the temporaries stay small for 64K-token caches.
    """
    x = np.asarray(x)
    if x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"quantize_per_token needs a non-empty last axis, got shape {x.shape}")
    d = x.shape[-1]
    flat = x.reshape(-1, d)
    out = np.empty(flat.shape, dtype=np.int8)
    scale = np.empty(flat.shape[0], dtype=np.float32)
    for start in range(0, flat.shape[0], _QUANT_CHUNK_ROWS):
        rows = np.asarray(flat[start:start + _QUANT_CHUNK_ROWS], dtype=np.float32)
        s = np.max(np.abs(rows), axis=1) / np.float32(127)
        s[s == 0] = 1
        q = rows / s[:, None]
        np.rint(q, out=q)
        np.clip(q, -127, 127, out=q)
        out[start:start + len(rows)] = q
        scale[start:start + len(rows)] = s
    return out.reshape(x.shape), scale.reshape(x.shape[:-1])


# --------------------------------------------------------------------------- paging


def make_paged(k_i8: np.ndarray, v_i8: np.ndarray, k_scale: np.ndarray, v_scale: np.ndarray,
               page: int, rng: np.random.Generator) -> PagedKV:
    """Scatter logical K/V into a pool of ``2*needed + 1`` pages through a random page table."""
    hkv, nk, d = k_i8.shape
    needed = -(-nk // page)
    n_pages = 2 * needed + 1
    table = rng.permutation(n_pages)[:needed].astype(np.int32)
    full, tail = divmod(nk, page)

    def pool_of(x: np.ndarray, garbage: bool) -> np.ndarray:
        shape = (n_pages, hkv, page) + x.shape[2:]
        if garbage:  # random int8 everywhere a kernel must not read
            pool = rng.integers(-128, 128, size=shape, dtype=np.int8)
        else:  # NaN scales there
            pool = np.full(shape, np.nan, dtype=np.float32)
        if full:
            body = x[:, :full * page].reshape((hkv, full, page) + x.shape[2:])
            pool[table[:full]] = np.moveaxis(body, 1, 0)
        if tail:
            pool[table[full], :, :tail] = x[:, full * page:]
        return pool

    return PagedKV(k_pool=pool_of(k_i8, True), v_pool=pool_of(v_i8, True),
                   k_scale_pool=pool_of(k_scale, False), v_scale_pool=pool_of(v_scale, False),
                   page_table=table)


# --------------------------------------------------------------------------- scales


def p_scale_for(v_scale: np.ndarray) -> float:
    """The power of two p with ``max(v_scale) * p`` in (0.5, 1]: keeps fp16 P in normal range."""
    vmax = float(np.max(v_scale)) if v_scale.size else 1.0
    if not math.isfinite(vmax) or vmax <= 0:
        raise ValueError(f"V scales must be finite and positive, max is {vmax}")
    mantissa, exponent = math.frexp(vmax)  # vmax = mantissa * 2**exponent, mantissa in [0.5, 1)
    if mantissa == 0.5:
        exponent -= 1  # vmax is a power of two: scale it to exactly 1
    return math.ldexp(1.0, -exponent)


def qk_scale_log2_for(softmax_scale: float) -> float:
    """float32(softmax_scale * log2(e)): the kernels' exp2-domain logit scale."""
    return float(np.float32(softmax_scale * math.log2(math.e)))


# --------------------------------------------------------------------------- generation


def _rng_streams(problem: Problem) -> tuple[np.random.Generator, np.random.Generator]:
    entropy = [problem.seed, problem.context, problem.queries, problem.heads_q,
               problem.heads_kv, problem.head_dim, _DATA_CODE[problem.data]]
    data_seq, page_seq = np.random.SeedSequence(entropy).spawn(2)
    return np.random.default_rng(data_seq), np.random.default_rng(page_seq)


def _normal_data(problem: Problem, rng: np.random.Generator):
    hq, hkv, d, nq, nk = (problem.heads_q, problem.heads_kv, problem.head_dim, problem.queries,
                          problem.keys)
    q = rng.standard_normal((hq, nq, d), dtype=np.float32)
    k = rng.standard_normal((hkv, nk, d), dtype=np.float32)
    v = rng.standard_normal((hkv, nk, d), dtype=np.float32)
    return q, k, v


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _realistic_data(problem: Problem, rng: np.random.Generator):
    hq, hkv, d, nq, nk = (problem.heads_q, problem.heads_kv, problem.head_dim, problem.queries,
                          problem.keys)
    group = hq // hkv
    f32 = np.float32

    # Keys: per-channel bias and spread, with 4 outlier channels per KV head.
    n_out = min(4, d)
    bias = (0.5 * rng.standard_normal((hkv, d))).astype(f32)
    spread = np.ones((hkv, d), dtype=f32)
    for g in range(hkv):
        chans = rng.choice(d, size=n_out, replace=False)
        mag = rng.uniform(10.0, 20.0, size=n_out)
        bias[g, chans] = mag * rng.choice([-1.0, 1.0], size=n_out)
        spread[g, chans] = mag / 4
    k = rng.standard_normal((hkv, nk, d), dtype=f32)
    k *= spread[:, None, :]
    k += bias[:, None, :]

    # Queries: a shared direction per group, a little per head, unit noise.
    mu_g = _unit(rng.standard_normal((hkv, d))) * (0.5 * math.sqrt(d))
    mu_h = np.repeat(mu_g, group, axis=0) + 0.3 * rng.standard_normal((hq, d))
    q = rng.standard_normal((hq, nq, d), dtype=f32)
    q += mu_h[:, None, :].astype(f32)
    q *= f32(1.5)

    # Attention sink: the first keys aligned with the group's mean query direction.
    n_sink = min(int(rng.integers(1, 5)), nk)
    # Logit above the ordinary keys' mean: ln(Nk) + 2 gives the sink about half of the mass
    # (the ordinary keys' logits spread ~2, so their sum is ~Nk * e^2); +-2 varies it per head.
    target = math.log(nk) + 2.0 + rng.uniform(-2.0, 2.0, size=hkv)
    scale = problem.softmax_scale
    mean_q = 1.5 * mu_h.reshape(hkv, group, d).mean(axis=1)  # [hkv, d]
    u = _unit(mu_g)
    lam = target / (scale * np.einsum("gd,gd->g", mean_q, u))
    sink = bias[:, None, :] + (lam[:, None] * u)[:, None, :] \
        + 0.1 * rng.standard_normal((hkv, n_sink, d))
    k[:, :n_sink, :] = sink.astype(f32)

    # Values: a few larger channels, per-token magnitude, small values on the sink.
    vspread = np.ones((hkv, d), dtype=f32)
    for g in range(hkv):
        vspread[g, rng.choice(d, size=min(3, d), replace=False)] = 4.0
    v = rng.standard_normal((hkv, nk, d), dtype=f32)
    v *= vspread[:, None, :]
    tok = np.exp(0.3 * rng.standard_normal((hkv, nk))).astype(f32)
    tok[:, :n_sink] *= f32(0.1)
    v *= tok[:, :, None]
    return q, k, v


def _need(arrays, name: str, path: str) -> np.ndarray:
    if name not in arrays:
        raise ConfigError(f"{path}: missing array {name!r}")
    return np.asarray(arrays[name])


def _check_shape(path: str, name: str, arr: np.ndarray, expected: tuple, what: str) -> None:
    if arr.shape != expected:
        raise ConfigError(f"{path}: array {name!r} has shape {list(arr.shape)}, expected {what} = "
                          f"{list(expected)} for this config")


def _check_float(path: str, name: str, arr: np.ndarray) -> None:
    if not np.issubdtype(arr.dtype, np.floating):
        raise ConfigError(f"{path}: array {name!r} must be floating point, got {arr.dtype}")
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f"{path}: array {name!r} has NaN or Inf values")


def npz_shape(path: str | Path) -> Shape:
    """The shape (ctx x Nq) that an ``.npz`` capture holds, from its ``q`` and ``k``/``k_i8``."""
    try:
        with np.load(path) as npz:
            q = npz["q"].shape if "q" in npz.files else None
            k = npz["k_i8" if "k_i8" in npz.files else "k"].shape if (
                "k_i8" in npz.files or "k" in npz.files) else None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read .npz ({exc})") from None
    if q is None or k is None or len(q) != 3 or len(k) != 3 or k[1] < q[1]:
        raise ConfigError(f"{path}: needs 'q' [Hq, Nq, D] and 'k' or 'k_i8' [Hkv, Nk, D], Nk >= Nq")
    return Shape(context=k[1] - q[1], queries=q[1], label=f"{k[1] - q[1]}x{q[1]}")


def _npz_data(problem: Problem):
    path = str(problem.data_file)
    try:
        npz = np.load(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read .npz ({exc})") from None
    with npz:
        files = set(npz.files)
        hq, hkv, d = problem.heads_q, problem.heads_kv, problem.head_dim
        q = _need(npz, "q", path)
        if q.ndim != 3 or q.shape[0] != hq or q.shape[2] != d:
            raise ConfigError(f"{path}: array 'q' has shape {list(q.shape)}, expected "
                              f"[Hq={hq}, Nq, D={d}]")
        _check_float(path, "q", q)
        nq = q.shape[1]
        int8_form = {"k_i8", "v_i8", "k_scale", "v_scale"}
        if int8_form & files:
            missing = sorted(int8_form - files)
            if missing:
                raise ConfigError(f"{path}: has {sorted(int8_form & files)} but not {missing}; the "
                                  "int8 form needs k_i8, v_i8, k_scale and v_scale")
            k_i8, v_i8 = _need(npz, "k_i8", path), _need(npz, "v_i8", path)
            if k_i8.ndim != 3:
                raise ConfigError(f"{path}: array 'k_i8' has shape {list(k_i8.shape)}, expected "
                                  f"[Hkv={hkv}, Nk, D={d}]")
            nk = k_i8.shape[1]
            for name, arr in (("k_i8", k_i8), ("v_i8", v_i8)):
                _check_shape(path, name, arr, (hkv, nk, d), "[Hkv, Nk, D]")
                if arr.dtype != np.int8:
                    raise ConfigError(f"{path}: array {name!r} must be int8, got {arr.dtype}")
            scales = {}
            for name in ("k_scale", "v_scale"):
                arr = _need(npz, name, path)
                _check_shape(path, name, arr, (hkv, nk), "[Hkv, Nk]")
                _check_float(path, name, arr)
                if np.any(arr <= 0):
                    raise ConfigError(f"{path}: array {name!r} must be positive")
                scales[name] = arr.astype(np.float32)
            k_float = v_float = None
            if {"k", "v"} <= files:  # floats too: keep them for the quantisation error
                k_float, v_float = _float_kv(npz, path, hkv, nk, d)
            quant = (k_i8, v_i8, scales["k_scale"], scales["v_scale"])
        elif {"k", "v"} <= files:
            k = _need(npz, "k", path)
            if k.ndim != 3:
                raise ConfigError(f"{path}: array 'k' has shape {list(k.shape)}, expected "
                                  f"[Hkv={hkv}, Nk, D={d}]")
            nk = k.shape[1]
            k_float, v_float = _float_kv(npz, path, hkv, nk, d)
            quant = None
        else:
            raise ConfigError(f"{path}: needs 'q' and either float 'k', 'v' or int8 'k_i8', "
                              f"'v_i8', 'k_scale', 'v_scale'; it has {sorted(files)}")
    if nk < nq:
        raise ConfigError(f"{path}: K has {nk} keys but q has {nq} queries (Nk must be >= Nq)")
    if (nk - nq, nq) != (problem.context, problem.queries):
        raise ConfigError(f"{path}: holds a {nk - nq}x{nq} chunk (Nk={nk}, Nq={nq}) but the shape "
                          f"is {problem.label} ({problem.context}x{problem.queries})")
    return q.astype(np.float32), k_float, v_float, quant


def _float_kv(npz, path: str, hkv: int, nk: int, d: int):
    out = []
    for name in ("k", "v"):
        arr = _need(npz, name, path)
        _check_shape(path, name, arr, (hkv, nk, d), "[Hkv, Nk, D]")
        _check_float(path, name, arr)
        out.append(np.ascontiguousarray(arr, dtype=np.float32))
    return out


def make_inputs(problem: Problem) -> Inputs:
    """Generate (or load) the problem's Q/K/V, quantise K/V, and page them if the layout is paged."""
    data_rng, page_rng = _rng_streams(problem)
    quant = None
    if problem.data == "npz":
        q, k_float, v_float, quant = _npz_data(problem)
    elif problem.data == "realistic":
        q, k_float, v_float = _realistic_data(problem, data_rng)
    else:
        q, k_float, v_float = _normal_data(problem, data_rng)
    if quant is None:
        k_i8, k_scale = quantize_per_token(k_float)
        v_i8, v_scale = quantize_per_token(v_float)
    else:
        k_i8, v_i8, k_scale, v_scale = quant
    q16 = q.astype(np.float16)
    if not np.all(np.isfinite(q16)):
        raise ConfigError(f"{problem.label}: q does not fit in fp16 (|q| > 65504)")
    paged = None
    if problem.layout == "paged":
        paged = make_paged(k_i8, v_i8, k_scale, v_scale, problem.page, page_rng)
    return Inputs(
        problem=problem, q=q16, k_i8=k_i8, v_i8=v_i8, k_scale=k_scale, v_scale=v_scale,
        k_float=k_float, v_float=v_float, paged=paged, p_scale=p_scale_for(v_scale),
        qk_scale_log2=qk_scale_log2_for(problem.softmax_scale),
    )


__all__ = ["Inputs", "PagedKV", "make_inputs", "quantize_per_token", "make_paged", "p_scale_for",
           "qk_scale_log2_for", "npz_shape"]
