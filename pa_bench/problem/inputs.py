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
    Q/K/V captured from a real model: ``q`` [Hq, Nq, D] and either float
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
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pa_bench.errors import ConfigError
from pa_bench.fmt import first_line
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import Shape

_DATA_CODE = {"normal": 1, "realistic": 2, "npz": 3}
_QUANT_CHUNK_ROWS = 4096   # rows per pass: the float32 temporary stays in the CPU's cache
#: Threads that quantise and page (NumPy releases the GIL in its loops and random fills).
_THREADS = max(1, min(8, os.cpu_count() or 1))


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
    Rows are independent: blocks of rows go to threads, each working in small chunks through
    one float32 temporary, so the work is cache-sized and the result the same bytes.
    """
    x = np.asarray(x)
    if x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"quantize_per_token needs a non-empty last axis, got shape {x.shape}")
    d = x.shape[-1]
    flat = x.reshape(-1, d)
    out = np.empty(flat.shape, dtype=np.int8)
    scale = np.empty(flat.shape[0], dtype=np.float32)
    n = flat.shape[0]
    blocks = min(_THREADS, -(-n // _QUANT_CHUNK_ROWS))
    bounds = [n * b // blocks for b in range(blocks + 1)] if blocks else [0, 0]

    def block(b: int) -> None:
        lo, hi = bounds[b], bounds[b + 1]
        tmp = np.empty((min(_QUANT_CHUNK_ROWS, hi - lo), d), dtype=np.float32)
        for start in range(lo, hi, _QUANT_CHUNK_ROWS):
            rows = flat[start:min(start + _QUANT_CHUNK_ROWS, hi)]
            if rows.dtype != np.float32:
                rows = rows.astype(np.float32)
            t = tmp[:len(rows)]
            np.abs(rows, out=t)
            s = np.max(t, axis=1)
            s /= np.float32(127)
            s[s == 0] = 1
            np.divide(rows, s[:, None], out=t)
            np.rint(t, out=t)
            np.clip(t, -127, 127, out=t)
            out[start:start + len(rows)] = t
            scale[start:start + len(rows)] = s

    _in_threads(block, range(len(bounds) - 1))
    return out.reshape(x.shape), scale.reshape(x.shape[:-1])


def _in_threads(fn, items) -> list:
    """``[fn(i) for i in items]``, on threads when there are several."""
    items = list(items)
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(min(_THREADS, len(items))) as pool:
        return list(pool.map(fn, items))


# --------------------------------------------------------------------------- paging


@dataclass
class _Pools:
    """A page pool before the logical K/V are scattered into it: the table and the filler."""

    table: np.ndarray      # int32 [needed]
    k_pool: np.ndarray     # int8 [n_pages, Hkv, page, D], random where a kernel must not read
    v_pool: np.ndarray
    k_scale_pool: np.ndarray  # float32 [n_pages, Hkv, page], NaN where a kernel must not read
    v_scale_pool: np.ndarray


def _empty_pools(hkv: int, nk: int, d: int, page: int, rng: np.random.Generator) -> _Pools:
    """The table and the filler of a pool of ``2*needed + 1`` pages (the only use of ``rng``)."""
    needed = -(-nk // page)
    n_pages = 2 * needed + 1
    table = rng.permutation(n_pages)[:needed].astype(np.int32)
    shape = (n_pages, hkv, page)
    garbage = [rng.integers(-128, 128, size=shape + (d,), dtype=np.int8) for _ in range(2)]
    nan = [np.full(shape, np.nan, dtype=np.float32) for _ in range(2)]
    return _Pools(table, garbage[0], garbage[1], nan[0], nan[1])


def _scatter(pool: np.ndarray, x: np.ndarray, table: np.ndarray) -> None:
    """Logical ``x`` [Hkv, Nk, ...] into the pool pages that ``table`` names."""
    hkv, nk = x.shape[:2]
    page = pool.shape[2]
    full, tail = divmod(nk, page)
    if full:
        body = x[:, :full * page].reshape((hkv, full, page) + x.shape[2:])
        pool[table[:full]] = np.moveaxis(body, 1, 0)
    if tail:
        pool[table[full], :, :tail] = x[:, full * page:]


def _fill_pools(pools: _Pools, k_i8: np.ndarray, v_i8: np.ndarray, k_scale: np.ndarray,
                v_scale: np.ndarray) -> PagedKV:
    pairs = ((pools.k_pool, k_i8), (pools.v_pool, v_i8), (pools.k_scale_pool, k_scale),
             (pools.v_scale_pool, v_scale))
    _in_threads(lambda pair: _scatter(pair[0], pair[1], pools.table), pairs)
    return PagedKV(k_pool=pools.k_pool, v_pool=pools.v_pool, k_scale_pool=pools.k_scale_pool,
                   v_scale_pool=pools.v_scale_pool, page_table=pools.table)


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


# --------------------------------------------------------------------------- .npz captures

_INT8_FORM = ("k_i8", "v_i8", "k_scale", "v_scale")
_WANTS = ("'q' [Hq, Nq, D] and either float 'k', 'v' [Hkv, Nk, D] or int8 'k_i8', 'v_i8' "
          "with 'k_scale', 'v_scale' [Hkv, Nk]")
_SAVE_HINT = "write one with numpy.savez(path, q=..., k=..., v=...)"


@dataclass
class Capture:
    """The arrays of an ``.npz`` capture, checked against each other (not yet against a run)."""

    path: str
    q: np.ndarray  # float [Hq, Nq, D], dtype as stored
    k_float: np.ndarray | None  # float32 [Hkv, Nk, D]; None if only the int8 form is stored
    v_float: np.ndarray | None
    quant: tuple | None  # (k_i8, v_i8, k_scale, v_scale) as stored, scales float32; or None

    @property
    def heads_q(self) -> int:
        return int(self.q.shape[0])

    @property
    def heads_kv(self) -> int:
        return int(self._k.shape[0])

    @property
    def head_dim(self) -> int:
        return int(self.q.shape[2])

    @property
    def queries(self) -> int:
        return int(self.q.shape[1])

    @property
    def keys(self) -> int:
        return int(self._k.shape[1])

    @property
    def shape(self) -> Shape:
        ctx = self.keys - self.queries
        return Shape(context=ctx, queries=self.queries, label=f"{ctx}x{self.queries}")

    @property
    def _k(self) -> np.ndarray:
        return self.k_float if self.quant is None else self.quant[0]


def _open_npz(path: str) -> dict[str, np.ndarray]:
    """Every array of an .npz archive; anything else is a one-line ConfigError."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the data file ({exc.strerror or exc})") from None
    if not head:
        raise ConfigError(f"{path}: the data file is empty (0 bytes); expected an .npz archive "
                          f"holding {_WANTS}")
    if head == b"\x93NUMPY":
        raise ConfigError(f"{path}: is a single .npy array, not an .npz archive; {_SAVE_HINT}")
    if head[:4] not in (b"PK\x03\x04", b"PK\x05\x06"):
        raise ConfigError(f"{path}: is not an .npz archive (no zip header); {_SAVE_HINT}")
    arrays: dict[str, np.ndarray] = {}
    try:
        with np.load(path, allow_pickle=False) as npz:
            for name in npz.files:
                try:
                    arrays[name] = npz[name]
                except ValueError as exc:
                    if "pickle" in str(exc) or "object" in str(exc):
                        raise ConfigError(f"{path}: array {name!r} holds Python objects; only "
                                          "numeric arrays are read") from None
                    raise
    except ConfigError:
        raise
    except Exception as exc:  # a truncated or foreign zip: BadZipFile, EOFError, ValueError ...
        text = "" if "pickle" in str(exc) else f": {first_line(exc)}"
        raise ConfigError(f"{path}: is not a readable .npz archive ({type(exc).__name__}"
                          f"{text})") from None
    return arrays


def _first_index(mask: np.ndarray) -> list[int]:
    return [int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape)]


def _check_dims(path: str, name: str, arr: np.ndarray, layout: str) -> None:
    want = layout.count(",") + 1
    if arr.ndim != want:
        raise ConfigError(f"{path}: array {name!r} has {arr.ndim} dims {list(arr.shape)}; "
                          f"expected {want}: {layout}")


def _check_float(path: str, name: str, arr: np.ndarray) -> None:
    if arr.dtype.kind != "f":
        raise ConfigError(f"{path}: array {name!r} is {arr.dtype}; expected floating point "
                          "(float16, float32 or float64)")
    bad = ~np.isfinite(arr)
    if bad.any():
        at = _first_index(bad)
        kind = "NaN" if np.isnan(arr[tuple(at)]) else "Inf"
        raise ConfigError(f"{path}: array {name!r} has {int(bad.sum())} NaN/Inf value(s); the "
                          f"first is {kind} at index {at}")


def _check_kv(path: str, name: str, arr: np.ndarray, expected: tuple, like: str) -> None:
    """A K/V-shaped array: 3 dims, q's head dim, the same shape as ``like``."""
    _check_dims(path, name, arr, "[Hkv, Nk, D]")
    if arr.shape[2] != expected[2]:
        raise ConfigError(f"{path}: array {name!r} has head dim {arr.shape[2]} (last axis) but "
                          f"'q' has {expected[2]}")
    if arr.shape != expected:
        raise ConfigError(f"{path}: array {name!r} has shape {list(arr.shape)} but {like!r} has "
                          f"{list(expected)}; they must match")


def _float_kv(path: str, arrays: dict, d: int) -> tuple[np.ndarray, np.ndarray]:
    for name, other in (("k", "v"), ("v", "k")):
        if name not in arrays:
            raise ConfigError(f"{path}: has {other!r} but not {name!r}; the float form needs both")
    k = arrays["k"]
    _check_dims(path, "k", k, "[Hkv, Nk, D]")
    out = []
    for name in ("k", "v"):
        arr = arrays[name]
        _check_kv(path, name, arr, (k.shape[0], k.shape[1], d), "k")
        _check_float(path, name, arr)
        out.append(np.ascontiguousarray(arr, dtype=np.float32))
    return out[0], out[1]


def _int8_kv(path: str, arrays: dict, d: int) -> tuple:
    present = [n for n in _INT8_FORM if n in arrays]
    missing = [n for n in _INT8_FORM if n not in arrays]
    if missing:
        raise ConfigError(f"{path}: has {present} but not {missing}; the int8 form needs k_i8, "
                          "v_i8, k_scale and v_scale")
    k_i8 = arrays["k_i8"]
    _check_dims(path, "k_i8", k_i8, "[Hkv, Nk, D]")
    hkv, nk = k_i8.shape[:2]
    for name in ("k_i8", "v_i8"):
        arr = arrays[name]
        if arr.dtype != np.int8:
            raise ConfigError(f"{path}: array {name!r} is {arr.dtype}; expected int8")
        _check_kv(path, name, arr, (hkv, nk, d), "k_i8")
    scales = []
    for name in ("k_scale", "v_scale"):
        arr = arrays[name]
        if arr.shape != (hkv, nk):
            raise ConfigError(f"{path}: array {name!r} has shape {list(arr.shape)}; expected "
                              f"[Hkv, Nk] = {[hkv, nk]} (one scale per token of 'k_i8')")
        _check_float(path, name, arr)
        if np.any(arr <= 0):
            at = _first_index(arr <= 0)
            raise ConfigError(f"{path}: array {name!r} must be positive; it is "
                              f"{float(arr[tuple(at)]):g} at index {at}")
        scales.append(arr.astype(np.float32))
    return k_i8, arrays["v_i8"], scales[0], scales[1]


def read_capture(path: str | Path) -> Capture:
    """Load an ``.npz`` capture and check its arrays against each other: which array, which
    axis, which dtype, where a NaN is. Every problem is one line (ConfigError)."""
    path = str(path)
    arrays = _open_npz(path)
    if not arrays:
        raise ConfigError(f"{path}: holds no arrays; needs {_WANTS}")
    if "q" not in arrays:
        raise ConfigError(f"{path}: has no array 'q' (it has {sorted(arrays)}); needs {_WANTS}")
    q = arrays["q"]
    _check_dims(path, "q", q, "[Hq, Nq, D]")
    _check_float(path, "q", q)
    d = q.shape[2]
    k_float = v_float = quant = None
    if any(n in arrays for n in _INT8_FORM):
        quant = _int8_kv(path, arrays, d)
        if "k" in arrays and "v" in arrays:  # floats too: kept for the quantisation error
            k_float, v_float = _float_kv(path, arrays, d)
            if k_float.shape != quant[0].shape:
                raise ConfigError(f"{path}: array 'k' has shape {list(k_float.shape)} but 'k_i8' "
                                  f"has {list(quant[0].shape)}; they must match")
    elif "k" in arrays or "v" in arrays:
        k_float, v_float = _float_kv(path, arrays, d)
    else:
        raise ConfigError(f"{path}: has 'q' but no keys: needs float 'k', 'v' or int8 'k_i8', "
                          f"'v_i8', 'k_scale', 'v_scale'; it has {sorted(arrays)}")
    cap = Capture(path=path, q=q, k_float=k_float, v_float=v_float, quant=quant)
    kname = "k" if quant is None else "k_i8"
    if cap.heads_q % cap.heads_kv:
        raise ConfigError(f"{path}: 'q' has {cap.heads_q} heads, not a multiple of the "
                          f"{cap.heads_kv} KV heads of {kname!r} (axis 0)")
    if cap.keys < cap.queries:
        raise ConfigError(f"{path}: {kname!r} has {cap.keys} keys but 'q' has {cap.queries} "
                          "queries (Nk must be >= Nq)")
    return cap


def check_capture(cap: Capture, *, heads_q: int, heads_kv: int, head_dim: int,
                  shapes=()) -> None:
    """The run's settings must be the capture's: heads, head dim, and every shape."""
    if cap.head_dim != head_dim:
        raise ConfigError(f"{cap.path}: holds head dim {cap.head_dim} but the run asks for "
                          f"{head_dim} (--head-dim or head_dim in the config)")
    if (cap.heads_q, cap.heads_kv) != (heads_q, heads_kv):
        raise ConfigError(f"{cap.path}: holds {cap.heads_q}/{cap.heads_kv} heads (q/kv) but the "
                          f"run asks for {heads_q}/{heads_kv} (--heads or heads_q/heads_kv in "
                          "the config)")
    for s in shapes:
        if (s.context, s.queries) != (cap.keys - cap.queries, cap.queries):
            raise ConfigError(f"{cap.path}: holds a {cap.keys - cap.queries}x{cap.queries} chunk "
                              f"(Nk={cap.keys}, Nq={cap.queries}) but the run asks for shape "
                              f"{s.label} ({s.context}x{s.queries}) (--shapes or the config)")


def check_config_data(config) -> Capture | None:
    """Validate a config's ``.npz`` data file against its heads, head dim and shapes, before
    any work starts (None when the config generates its data)."""
    if config.data != "npz":
        return None
    cap = read_capture(config.data_file)
    check_capture(cap, heads_q=config.heads_q, heads_kv=config.heads_kv,
                  head_dim=config.head_dim, shapes=config.shapes)
    return cap


def capture_overrides(config, path: str | Path, *, shapes: str | None, heads_given: bool,
                      head_dim_given: bool) -> tuple[dict, str, str | None]:
    """``--data FILE.npz``: the overrides that run ``config`` on the capture, the shapes to run,
    and a notice (None where the config already asks for what the capture holds).

    What the command line did not give (shapes, heads, head dim) comes from the capture. Where
    that replaces the config's own, the run is named after the data file (``cap.npz`` -> run
    ``cap``), not after a config whose shapes it does not run, and the notice says so."""
    cap = read_capture(path)
    overrides: dict = {"data": "npz", "data_file": str(path)}
    replaced = []
    if shapes is None:
        shapes = cap.shape.spec
        if [(s.context, s.queries) for s in config.shapes] != [(cap.shape.context, cap.queries)]:
            replaced.append("shapes")
    if not heads_given:
        overrides.update(heads_q=cap.heads_q, heads_kv=cap.heads_kv)
        if (config.heads_q, config.heads_kv) != (cap.heads_q, cap.heads_kv):
            replaced.append("heads")
    if not head_dim_given:
        overrides["head_dim"] = cap.head_dim
        if config.head_dim != cap.head_dim:
            replaced.append("head_dim")
    if not replaced:
        return overrides, shapes, None
    name = Path(path).stem
    overrides.update(name=name, description=f"{config.name}'s settings on the chunk captured in "
                     f"{Path(path).name} ({cap.shape.spec}, heads {cap.heads_q}/{cap.heads_kv}, "
                     f"head_dim {cap.head_dim})")
    note = (f"note: {Path(path).name} holds {cap.shape.spec} with heads {cap.heads_q}/{cap.heads_kv}, "
            f"head_dim {cap.head_dim}: the run takes the capture's {', '.join(replaced)} instead "
            f"of {config.name}'s and is named {name!r} (give --shapes/--heads/--head-dim to say "
            "what to run)")
    return overrides, shapes, note


def _npz_data(problem: Problem):
    cap = read_capture(problem.data_file)
    check_capture(cap, heads_q=problem.heads_q, heads_kv=problem.heads_kv,
                  head_dim=problem.head_dim, shapes=[problem.shape])
    return cap.q.astype(np.float32), cap.k_float, cap.v_float, cap.quant


def make_inputs(problem: Problem) -> Inputs:
    """Generate (or load) the problem's Q/K/V, quantise K/V, and page them if the layout is paged.

    The page pool's own random stream (table and filler) is drawn on a thread while Q/K/V are
    drawn: the two streams are independent, so the bytes are those of doing one after the other.
    """
    data_rng, page_rng = _rng_streams(problem)
    with ThreadPoolExecutor(1) as pool_thread:
        pools = None
        if problem.layout == "paged":
            pools = pool_thread.submit(_empty_pools, problem.heads_kv, problem.keys,
                                       problem.head_dim, problem.page, page_rng)
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
        if pools is not None:
            paged = _fill_pools(pools.result(), k_i8, v_i8, k_scale, v_scale)
    return Inputs(
        problem=problem, q=q16, k_i8=k_i8, v_i8=v_i8, k_scale=k_scale, v_scale=v_scale,
        k_float=k_float, v_float=v_float, paged=paged, p_scale=p_scale_for(v_scale),
        qk_scale_log2=qk_scale_log2_for(problem.softmax_scale),
    )


__all__ = ["Inputs", "PagedKV", "make_inputs", "quantize_per_token", "p_scale_for",
           "qk_scale_log2_for", "Capture", "read_capture", "check_capture",
           "check_config_data"]
