"""Where the CUDA kernels live and how they are compiled: sources, defines, options, hashes.

Both the CuPy backend (NVRTC, at run time) and ``kernel_info`` (nvcc, no GPU needed) take
their compile options from here, so the code that is checked is the code that runs.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pa_bench import resources
from pa_bench import variants as registry
from pa_bench.launch.policy import DEFAULT_TILES, SEGMENT_ALIGN, TILE_ROWS

KERNEL_DIR = resources.KERNEL_DIR      # the package's kernels/
KERNELS_ENV = "PA_BENCH_KERNELS"        # another tree's kernels/ (an A/B of kernel versions)


def kernel_dir() -> Path:
    """Where kernel sources are read from: ``PA_BENCH_KERNELS`` (read at each use), else
    KERNEL_DIR. Which sources a run built is in meta.json (``backend_meta.kernel_sources``)."""
    return Path(os.environ.get(KERNELS_ENV) or KERNEL_DIR)
HEADER = "pa_common.cuh"
ARCHS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")
# Common compile options (NVRTC and nvcc understand both spellings used here).
BASE_OPTIONS = ("-std=c++17",)


@dataclass(frozen=True)
class KernelBuild:
    """One compiled flavour of a variant: the compile-time parameters of pa_common.cuh."""

    variant: str
    head_dim: int = 128
    paged: bool = True
    out_f16: bool = False
    force_turing: bool = False
    tiles: int = DEFAULT_TILES      # warp_tiles variants only: m16 query tiles per warp
    kv_f16: bool = False            # v3 only: its fp16-K/V control (-DPA_KV_F16=1, the peer v3-f16)
    kv_images: bool = False         # v3 only: K/V tiles as fp16 stage images (-DPA_V3_DQ=1, the peer v3-dq)
    kv_shared: bool = False         # v3 only: each tile converted once for all row blocks (-DPA_V3_SHARE=1,
                                    # Launch.shares_tiles)
    cta_rows: int = 0               # a variant with fill_rows options: the launch's (-DPA_CTA_ROWS,
                                    # Launch.rows); 0: the kernel's default
    step_keys: int = 64             # v3 only: keys of a consumer step, 64 (one tile) or 128 (two, at 128
                                    # rows, with kv_shared, kv_images or kv_f16: -DPA_V3_STEP_KEYS=128)

    def __post_init__(self):
        producers = [name for name, on in (("kv_f16", self.kv_f16), ("kv_images", self.kv_images),
                                           ("kv_shared", self.kv_shared)) if on]
        if len(producers) > 1:   # kernels/v3.cu builds one producer (#error otherwise)
            raise ValueError(f"KernelBuild: {' and '.join(producers)} are two producers of v3; set one")
        pairs_producer = self.kv_shared or self.kv_images or self.kv_f16
        if self.step_keys not in (64, 128) or (self.step_keys == 128 and not (pairs_producer and self.cta_rows == 128)):
            raise ValueError(f"KernelBuild: step_keys {self.step_keys}: 64, or 128 at 128 rows on images (kv_shared "
                             "or kv_images) or in the fp16 control (kv_f16)")

    @property
    def function(self) -> str:
        return f"pa_{self.variant}"

    def defines(self) -> tuple[str, ...]:
        tiles = (f"-DPA_TILES={self.tiles}",) if registry.get(self.variant).warp_tiles else ()
        return (
            f"-DPA_HEAD_DIM={self.head_dim}",
            f"-DPA_PAGED={int(self.paged)}",
            f"-DPA_OUT_F16={int(self.out_f16)}",
            f"-DPA_FORCE_TURING={int(self.force_turing)}",
        ) + tiles + (("-DPA_KV_F16=1",) if self.kv_f16 else ()) + (("-DPA_V3_DQ=1",) if self.kv_images else ()) + \
            (("-DPA_V3_SHARE=1",) if self.kv_shared else ()) + \
            ((f"-DPA_CTA_ROWS={self.cta_rows}",) if self.cta_rows else ()) + \
            ((f"-DPA_V3_STEP_KEYS={self.step_keys}",) if self.step_keys != 64 else ())

    def options(self) -> tuple[str, ...]:
        own = kernel_path(self.variant).parent          # a plug-in kernel's own folder first
        dirs = (own, kernel_dir()) if own != kernel_dir() else (kernel_dir(),)
        return BASE_OPTIONS + self.defines() + tuple(f"-I{d}" for d in dirs)


def kernel_variants() -> tuple[str, ...]:
    """The CUDA kernel variants (pa_bench.variants), in table order."""
    return registry.names(registry.CUDA_KERNEL)


def arch_options(variant: str, cc: int) -> tuple[str, ...]:
    """NVRTC options naming an arch-specific target (v3: ``--gpu-architecture=sm_90a``, which
    NVRTC 13 takes over the plain ``-arch=sm_90`` CuPy adds); () for the portable kernels, which
    CuPy builds for the device's own arch."""
    entry = registry.get(variant)
    return (f"--gpu-architecture={entry.nvcc_arch(cc)}",) if entry.arch_suffix else ()


def nvcc_cubin(build: "KernelBuild", arch: str) -> Path:
    """``build`` compiled by nvcc for ``arch`` (e.g. sm_90a) into a cubin under the temp directory,
    named by a hash of the source and options (reused when present): the fallback for an
    arch-specific kernel where NVRTC cannot build it."""
    import subprocess
    import tempfile

    src = kernel_source(build.variant)
    opts = (*build.options(), f"-gencode=arch=compute_{arch.removeprefix('sm_')},code={arch}", "-O3")
    key = hashlib.sha256("\0".join((src, *opts)).encode()).hexdigest()[:20]
    out_dir = Path(tempfile.gettempdir()) / "pa-bench-cubins"
    out_dir.mkdir(parents=True, exist_ok=True)
    cubin = out_dir / f"{build.function}-{key}.cubin"
    if not cubin.exists():
        tmp = out_dir / f"{build.function}-{key}.{os.getpid()}"
        (tmp.with_suffix(".cu")).write_text(src)
        proc = subprocess.run(["nvcc", "-cubin", *opts, "-o", str(tmp), str(tmp.with_suffix(".cu"))],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed: {proc.stderr.strip()[:400]}")
        tmp.replace(cubin)
    return cubin


def kernel_path(variant: str) -> Path:
    """The variant's source: under kernels/, or where a plug-in's absolute ``source`` says."""
    entry = registry.find(variant)
    if entry is None or entry.kind != registry.CUDA_KERNEL:
        raise ValueError(f"unknown CUDA kernel variant {variant!r}")
    return Path(entry.source) if Path(entry.source).is_absolute() else kernel_dir() / entry.source


_LOCAL_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[ \t]*$', re.MULTILINE)


def kernel_source(variant: str) -> str:
    """The variant's source with every ``#include "..."`` of kernels/ (or of a plug-in kernel's own
    folder) inlined, each file once: NVRTC gets one translation unit, and CuPy's compile cache,
    which hashes the source string but not the files it includes, is keyed by every line of
    kernel code (kernel_cache_dir)."""
    seen: set[str] = set()
    path = kernel_path(variant)

    def inline(match: re.Match) -> str:
        name = match.group(1)
        if name in seen:
            return f"// ---- {name} (inlined above)"
        seen.add(name)
        found = path.parent / name if (path.parent / name).is_file() else kernel_dir() / name
        body = _LOCAL_INCLUDE.sub(inline, found.read_text())
        return f"// ---- {name} (inlined)\n{body}\n// ---- end {name}"

    return _LOCAL_INCLUDE.sub(inline, path.read_text())


def kernel_cache_dir() -> Path | None:
    """Where CuPy keeps compiled kernels across runs (``$CUPY_CACHE_DIR``, default
    ``~/.cupy/kernel_cache``), keyed by a hash of the source, the options, the arch and the
    NVRTC version; None with ``CUPY_CACHE_IN_MEMORY=1`` (no disk cache). Deleting the
    directory forces every kernel to be compiled again."""
    if os.environ.get("CUPY_CACHE_IN_MEMORY", "0").strip().lower() in ("1", "true", "yes", "on"):
        return None
    return Path(os.environ.get("CUPY_CACHE_DIR") or Path.home() / ".cupy" / "kernel_cache")


def cache_entries(cache_dir: Path | None) -> set[str]:
    """The compiled binaries in ``cache_dir`` now (empty when there is none)."""
    try:
        return {p.name for p in cache_dir.iterdir() if p.suffix == ".cubin"} if cache_dir else set()
    except OSError:
        return set()


def cache_outcome(cache_dir: Path | None, before: set[str]) -> str:
    """``hit`` when a compile left the cache as it was, ``miss`` when it added a binary;
    ``off`` without a disk cache."""
    if cache_dir is None:
        return "off"
    return "miss" if cache_entries(cache_dir) - before else "hit"


def source_hashes() -> dict[str, str]:
    """sha256 (first 16 hex digits) of each kernel file and each header under kernels/ (the shared
    one and a variant's own, e.g. v3_pairs.cuh)."""
    out = {h.name: hashlib.sha256(h.read_bytes()).hexdigest()[:16] for h in sorted(kernel_dir().glob("*.cuh"))}
    for v in registry.cuda_kernels():
        out[v.source] = hashlib.sha256(kernel_path(v.name).read_bytes()).hexdigest()[:16]
    return out


@dataclass(frozen=True)
class LaunchGeometry:
    """Grid, block and the tile pairing argument of one kernel launch. With key segments
    (``segment_keys`` > 0) grid.z = ``segments`` CTAs per (row block, head) position, each on one
    segment, and pa_combine merges them (``combine_geometry``); otherwise grid.z = 1."""

    grid: tuple[int, ...]
    block: int
    pair_heads: bool
    split_keys: int = 0
    segment_keys: int = 0
    segments: int = 1


#: pa_combine (pa_common.cuh): one warp per (query head, row), 4 warps per CTA.
COMBINE_ROWS_PER_CTA = 4


def kv_group_threads(rows: int) -> int:
    """Threads of a kv_group_rows CTA of ``rows`` rows: a producer warpgroup and a consumer
    warpgroup per 64 rows (v3: 384 at 128 rows, 512 at 192)."""
    return 128 * (1 + rows // 64)


def launch_geometry(variant: str, queries: int, heads_q: int, heads_kv: int, tiles: int = DEFAULT_TILES,
                    pair_heads: bool = True, split_keys: int = 0, context: int = 0,
                    segment_keys: int = 0, cta_rows: int = 0) -> LaunchGeometry:
    """How a variant's CTAs cover the chunk: its entry in GEOMETRY (see warp_tiles in pa_common.cuh),
    and with ``segment_keys`` (a Launch's, pa_bench.launch) a third grid dimension of
    ceil((context + queries) / segment_keys) key segments. ``cta_rows`` (a variant with fill_rows
    options, Launch.rows): the rows of its CTAs, kv_group_threads threads each."""
    geometry = GEOMETRY.get(variant) or registry.get(variant).geometry
    if geometry is None:
        raise ValueError(f"no launch geometry for variant {variant!r} (add it to kernels.GEOMETRY, or "
                         f"give its Variant a geometry)")
    if segment_keys < 0 or segment_keys % SEGMENT_ALIGN:
        raise ValueError(f"segment_keys must be a non-negative multiple of {SEGMENT_ALIGN}, not {segment_keys}")
    if segment_keys and split_keys:
        raise ValueError("split_keys and segment_keys exclude each other (split keys are off with segments)")
    threads = kv_group_threads(cta_rows) if cta_rows else registry.get(variant).threads
    geo = geometry(threads, queries, heads_q, heads_kv, tiles, pair_heads, split_keys)
    segments = -(-(context + queries) // segment_keys) if segment_keys else 1
    return LaunchGeometry(tuple(geo.grid) + (segments,), geo.block, geo.pair_heads, geo.split_keys,
                          segment_keys, segments)


def combine_geometry(queries: int, heads_q: int) -> tuple[tuple[int], int]:
    """pa_combine's (grid, block): one warp per row of every query head."""
    return (-(-(queries * heads_q) // COMBINE_ROWS_PER_CTA),), 32 * COMBINE_ROWS_PER_CTA


def workspace_floats(geo: LaunchGeometry, queries: int, heads_q: int, head_dim: int) -> int:
    """fp32 elements of the segment workspace (Args::part): [n_seg][Hq][Nq][D] O, then
    [n_seg][Hq][Nq] (m, l) pairs; 0 without segments."""
    if not geo.segment_keys:
        return 0
    return geo.segments * heads_q * queries * (head_dim + 2)


def share_workspace_bytes(seg_floats: int, heads_kv: int, tiles: int, image_bytes: int, segments: int) -> int:
    """Bytes of v3's shared-tile workspace (kernels/v3.cu, share_base): the segment floats, up to
    1,024 bytes of alignment, the images [Hkv][tiles], a u32 flag per image, up to 8 bytes of
    alignment, then a u64 ticket counter per KV head and segment."""
    return 4 * seg_floats + 1024 + heads_kv * tiles * (image_bytes + 4) + 8 + 8 * heads_kv * segments


def _rows_per_cta(threads: int, queries: int, heads_q: int, heads_kv: int, tiles: int, pair_heads: bool,
                  split_keys: int) -> LaunchGeometry:
    """v1: a CTA's warps hold 16 consecutive rows each of one query head; grid (row blocks, heads)."""
    if split_keys:
        raise ValueError("this variant does not split keys")
    return LaunchGeometry((-(-queries // (threads // 32 * TILE_ROWS)), heads_q), threads, False)


def _warp_tiles(threads: int, queries: int, heads_q: int, heads_kv: int, tiles: int, pair_heads: bool,
                split_keys: int) -> LaunchGeometry:
    """v2/v2t: a CTA of 2 warps; a warp holds ``tiles`` m16 tiles, as two query heads of one KV group
    at the same 16 rows when the group has an even number of heads (``pair_heads``), else as 32 rows
    of one head. With ``split_keys`` (Launch.split_keys) a CTA holds one warp task
    whose keys its two warps split."""
    if tiles not in (1, 2):
        raise ValueError(f"tiles must be 1 or 2, not {tiles}")
    pair = tiles == 2 and pair_heads and (heads_q // heads_kv) % 2 == 0
    rows = TILE_ROWS * (1 if pair else tiles)           # rows of one row block
    warps = heads_q // 2 if pair else heads_q           # warp tasks per row block
    if split_keys < 0 or split_keys % TILE_ROWS:
        raise ValueError(f"split_keys must be a non-negative multiple of {TILE_ROWS}, not {split_keys}")
    tasks_per_cta = 1 if split_keys else threads // 32
    return LaunchGeometry((-(-queries // rows), -(-warps // tasks_per_cta)), threads, pair, split_keys)


def _kv_group_rows(threads: int, queries: int, heads_q: int, heads_kv: int, tiles: int, pair_heads: bool,
                   split_keys: int) -> LaunchGeometry:
    """v3: a CTA holds one KV head and 64 rows per consumer warpgroup (``threads // 128 - 1`` of
    them), the query heads of the KV group packed into the rows (row R: position R // G of head
    R % G, G = heads_q // heads_kv); grid (heads_kv, row blocks), row blocks longest-first."""
    if split_keys:
        raise ValueError("this variant does not split keys")
    rows = 64 * (threads // 128 - 1)
    group = heads_q // heads_kv
    if group > rows:
        raise ValueError(f"{heads_q}/{heads_kv} heads: a KV group of {group} query heads does not fit in {rows} rows")
    return LaunchGeometry((heads_kv, -(-queries // (rows // group))), threads, False)


#: Each CUDA kernel variant's launch geometry: (threads, queries, heads_q, heads_kv, tiles,
#: pair_heads, split_keys) -> LaunchGeometry. A new kernel adds its line here; a plug-in's kernel
#: gives its Variant a ``geometry`` instead (these functions are public for it to reuse).
GEOMETRY: dict[str, Callable[..., LaunchGeometry]] = {
    "v1": _rows_per_cta,
    "v2": _warp_tiles,
    "v2t": _warp_tiles,
    "v3": _kv_group_rows,
}


def mma_shape(arch_cc: int, force_turing: bool) -> str:
    """The MMA instruction a build uses on a GPU of compute capability ``arch_cc`` (75, 90...)."""
    return "m16n8k8" if (arch_cc < 80 or force_turing) else "m16n8k16"


def build_unsupported(variant: str, arch_cc: int, force_turing: bool, head_dim: int) -> str | None:
    """Why ``variant`` cannot be built for this arch/setting, or None."""
    if head_dim not in (64, 128):
        return f"head_dim {head_dim} is not supported by the kernels (64 or 128)"
    entry = registry.get(variant)
    why = entry.arch_reason(arch_cc)
    if why:
        return why
    if force_turing and not entry.turing_path:
        with_path = ", ".join(v.name for v in registry.cuda_kernels() if v.turing_path)
        return f"{variant} has no Turing path; the forced Turing path runs {with_path}"
    return None


# The geometries under public names, for a plug-in kernel's Variant(geometry=...).
rows_per_cta = _rows_per_cta
warp_tiles = _warp_tiles
kv_group_rows = _kv_group_rows
