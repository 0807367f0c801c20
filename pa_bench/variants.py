"""Every variant pa-bench knows, once: its kind, its source, the archs it runs on, the tile
facts the numerics model needs, and its place in every table.

The config, the plan, the backends, the numerics model, the kernel table, the runner and the
report all read this registry; none of them lists variant names. Adding a CUDA kernel variant
is one entry here, its ``kernels/<name>.cu`` file and its launch geometry
(``pa_bench.backends.kernels.GEOMETRY``); a plug-in (``pa_bench.problem.plugins``) registers one without
editing pa-bench: an absolute ``source`` path and a ``geometry`` function, or a peer class
(``pa_bench.peers``). See docs/PLUGINS.md.

Table order is registry order. Records of variants that are not registered (an old run, a
user's entry that is gone) still load and are shown after the registered ones.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

CUDA_KERNEL = "cuda kernel"
TRITON_KERNEL = "triton kernel"
PEER = "peer"
KINDS = (CUDA_KERNEL, TRITON_KERNEL, PEER)

#: The variant every speed-up is measured against (``speedup_vs_v1``).
BASELINE = "v1"
#: Variants whose full outputs every other kernel is diffed against (``diff_vs_v1``, ``diff_vs_v2``).
DIFF_PARTNERS = ("v1", "v2")


# Key segments: on long contexts every kernel runs the online softmax separately on each block
# of SEGMENT_KEYS keys, from a fresh state, and merges the segments per row in fp32, so no MMA
# accumulator lives for more than SEGMENT_KEYS / 16 slices (mma.sync's fp32 accumulation drifts
# with the length of the chain). Segment z covers keys [z*S, min((z+1)*S, visible keys)). A
# launch (pa_bench.launch) may segment shorter chunks too; the numerics model runs the segments it is told.
SEGMENT_KEYS = 65536

#: Input roundings a kernel may declare (``Variant.input_rounding``): "q-int8-row" rounds Q to int8
#: with one fp32 scale per query row and head (pa_bench.numerics.rounding, docs/NUMERICS.md).
INPUT_ROUNDINGS = ("q-int8-row",)


def context_segment_keys(context: int) -> int:
    """Keys per segment that a chunk after ``context`` keys takes at the least (0: one segment):
    SEGMENT_KEYS on contexts longer than SEGMENT_KEYS. The numerics model's default where it is told none."""
    return SEGMENT_KEYS if int(context) > SEGMENT_KEYS else 0


@dataclass(frozen=True)
class Variant:
    """One registry entry. Kernels (``kind`` a kernel kind) are checked for parity and timed;
    peers are timed only (they have no numerics model)."""

    name: str
    kind: str
    summary: str                    # one line for the README table and `pa-bench kernels`
    source: str | None = None       # cuda: file under kernels/; triton: module; peer: None
    min_arch: int | None = None     # lowest compute capability (75 = sm_75); None: any
    max_arch: int | None = None     # highest compute capability; None: no limit
    arch_suffix: str = ""           # "a" for an arch-specific build (sm_90a)
    arch_needs: str = ""            # what min_arch/max_arch stand for ("cp.async", "wgmma")
    tile_keys: int | None = None    # keys per online-softmax tile (the numerics model)
    splits_keys: bool = False       # may split a chunk's keys in two halves (pa_bench.launch)
    threads: int | None = None      # threads per CTA (cuda kernels)
    cta: str = ""                   # what a CTA holds, for `pa-bench kernels` and meta.json
    warp_tiles: bool = False        # takes -DPA_TILES (m16 tiles per warp, launch.choose_tiles)
    turing_path: bool = True        # has the forced sm_75 path (--force-turing)
    bitwise_twin: str | None = None  # must be bitwise identical to this variant (same MMA path)
    fill_rows: int | tuple[int, ...] | None = None  # rows of one CTA (the query heads of a KV
                                    # group packed in), or the row counts a launch picks from
                                    # (launch.cta_rows; built with -DPA_CTA_ROWS); its keys may run
                                    # in segments to fill the GPU (launch.segment_keys; both by
                                    # pa_bench.launch.fill); None: never (v1, v2, v2t)
    tile_sharing: bool = False      # may convert each K/V tile once for all the row blocks of a KV
                                    # head and segment (v3: -DPA_V3_SHARE, launch.shares_tiles)
    pv_chain_keys: int | None = None  # keys one P.V accumulator sums before it is added (_rn) into O:
                                      # None = one MMA chain over the whole key range (every kernel
                                      # today; 64 would be a fresh accumulator per 64-key tile)
    max_slack: float | None = None  # the online softmax's lazy running maximum (the numerics model):
                                    # a row keeps its reference while its scaled scores stay within
                                    # 2^max_slack of it (v3: 8); None = the exact running maximum
    input_rounding: str | None = None  # an input rounded beyond the cache's format (INPUT_ROUNDINGS;
                                    # "q-int8-row": Q to int8 with one fp32 scale per row and head):
                                    # the numerics model follows it, and the row is also held to the
                                    # accuracy budget (docs/NUMERICS.md, "Input rounding"); None: none
    runner: Any = None              # what runs a peer (a class, or "module:Class") or a Python
                                    # kernel (its host module, "pa_bench.backends.triton_runner")
    geometry: Callable[..., Any] | None = None  # a CUDA kernel outside kernels/: its launch
                                    # geometry (pa_bench.backends.kernels.GEOMETRY's signature)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"variant {self.name!r}: kind must be one of {KINDS}, not {self.kind!r}")
        if self.is_kernel and self.tile_keys is None:
            raise ValueError(f"variant {self.name!r}: a kernel needs tile_keys for the numerics model")
        if self.max_slack is not None and not 0 <= self.max_slack <= 14:
            raise ValueError(f"variant {self.name!r}: max_slack must be in [0, 14] (p <= 2^max_slack is "
                             f"rounded to fp16), not {self.max_slack!r}")
        if self.input_rounding is not None and self.input_rounding not in INPUT_ROUNDINGS:
            raise ValueError(f"variant {self.name!r}: input_rounding must be one of {INPUT_ROUNDINGS} or None, "
                             f"not {self.input_rounding!r}")
        if self.kind == CUDA_KERNEL and not self.source:
            raise ValueError(f"variant {self.name!r}: a CUDA kernel needs its source file")
        if self.kind != CUDA_KERNEL and self.runner is None:
            raise ValueError(f"variant {self.name!r}: a {self.kind} needs a runner")

    def resolve_runner(self) -> Any:
        """The runner itself: ``"package.module:Name"`` imported, ``"package.module"`` a module."""
        if not isinstance(self.runner, str):
            return self.runner
        module, _, attr = self.runner.partition(":")
        mod = importlib.import_module(module)
        return getattr(mod, attr) if attr else mod

    @property
    def is_kernel(self) -> bool:
        return self.kind != PEER

    @property
    def is_peer(self) -> bool:
        return self.kind == PEER

    def arch_reason(self, cc: int) -> str | None:
        """Why this variant cannot run on compute capability ``cc`` (75, 90 ...), or None."""
        if self.min_arch is not None and cc < self.min_arch:
            top = f"sm_{self.min_arch}{self.arch_suffix}" + ("" if self.max_arch == self.min_arch else "+")
            needs = f" ({self.arch_needs})" if self.arch_needs else ""
            return f"{self.name} needs {top}{needs}, not sm_{cc}"
        if self.max_arch is not None and cc > self.max_arch:
            only = f"sm_{self.max_arch}{self.arch_suffix}"
            return f"{self.name} runs on {only} only, not sm_{cc}"
        return None

    def nvcc_arch(self, cc: int) -> str:
        """The ``-arch`` name of a build for ``cc``: ``sm_90``, or ``sm_90a`` where it needs it."""
        return f"sm_{cc}{self.arch_suffix}"


_REGISTRY: dict[str, Variant] = {}


def register(variant: Variant) -> Variant:
    """Add ``variant`` at the end of the table order (a name may be registered once)."""
    if variant.name in _REGISTRY:
        raise ValueError(f"variant {variant.name!r} is already registered")
    _REGISTRY[variant.name] = variant
    return variant


def unregister(name: str) -> None:
    """Remove a variant (tests, and a user's experiment that is done)."""
    _REGISTRY.pop(name, None)


def get(name: str) -> Variant:
    """The registered variant called ``name`` (KeyError naming the known ones otherwise)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown variant {name!r} (choose from {', '.join(_REGISTRY)})") from None


def find(name: str) -> Variant | None:
    return _REGISTRY.get(name)


def names(kind: str | None = None) -> tuple[str, ...]:
    """Registered names in table order; only kernels (``kind="kernel"``), peers (``"peer"``), or
    one kind (``CUDA_KERNEL`` ...)."""
    def keep(v: Variant) -> bool:
        if kind is None:
            return True
        if kind == "kernel":
            return v.is_kernel
        return v.kind == kind
    return tuple(v.name for v in _REGISTRY.values() if keep(v))


def all_variants() -> tuple[Variant, ...]:
    """Every registered entry, in table order."""
    return tuple(_REGISTRY.values())


def cuda_kernels() -> tuple[Variant, ...]:
    return tuple(v for v in _REGISTRY.values() if v.kind == CUDA_KERNEL)


def is_kernel(name: str) -> bool:
    v = _REGISTRY.get(name)
    return v is not None and v.is_kernel


def is_peer(name: str) -> bool:
    v = _REGISTRY.get(name)
    return v is not None and v.is_peer


def order_key(name: str, seen: list[str] | tuple[str, ...] = ()) -> tuple[int, int]:
    """Sort key for table order: registered variants first, in registry order; others after,
    in the order ``seen`` lists them."""
    order = list(_REGISTRY)
    if name in _REGISTRY:
        return (order.index(name), 0)
    return (len(order), list(seen).index(name) if name in seen else len(seen))


def in_order(variant_names) -> list[str]:
    """``variant_names`` (duplicates dropped) in table order."""
    seen = list(dict.fromkeys(variant_names))
    return sorted(seen, key=lambda n: order_key(n, seen))


# --------------------------------------------------------------------------- the entries

register(Variant(
    "v1", CUDA_KERNEL, "one 4-warp CTA gathers a KV chunk into shared memory, __syncthreads(), computes",
    source="v1.cu", min_arch=75, arch_needs="mma.sync m16n8k8", tile_keys=64, threads=128,
    cta="128 threads: 4 warps x 16 rows of one query head"))
register(Variant(
    "v2", CUDA_KERNEL, "warp-private double-buffered cp.async pipeline, __syncwarp() only in the loop",
    source="v2.cu", min_arch=80, arch_needs="cp.async", tile_keys=16, splits_keys=True, threads=64,
    cta="64 threads: 2 warps x T m16 tiles (query heads of one KV group)", warp_tiles=True,
    turing_path=False))
register(Variant(
    "v2t", CUDA_KERNEL, "v2 with register staging instead of cp.async (the PR's change)",
    source="v2t.cu", min_arch=75, arch_needs="mma.sync m16n8k8", tile_keys=16, splits_keys=True,
    threads=64, cta="64 threads: 2 warps x T m16 tiles (query heads of one KV group)", warp_tiles=True,
    bitwise_twin="v2"))
register(Variant(
    "v3", CUDA_KERNEL, "Hopper: a producer warpgroup converts K/V to fp16 once per CTA (on long chunks once per KV "
    "head and segment, for all its CTAs), consumer warpgroups run wgmma",
    source="v3.cu", min_arch=90, max_arch=90, arch_suffix="a", arch_needs="wgmma, setmaxnreg", tile_keys=64,
    threads=512, cta="512 threads: a producer warpgroup + 3 consumer warpgroups x 64 rows (the query heads of "
    "one KV group packed into the rows; 384 threads and 2 warpgroups where those fill the GPU faster, "
    "by pa_bench.launch.fill's estimate); 214 KB of dynamic shared memory at D=128, 110 KB at D=64",
    turing_path=False, fill_rows=(128, 192), tile_sharing=True, max_slack=8.0))
register(Variant(
    "triton", TRITON_KERNEL, "the same problem in Triton: int8 K/V gathered and converted in the kernel, "
    "the query heads of a KV group packed into a program's rows",
    source="triton_pa.py", min_arch=80, arch_needs="Triton's supported GPUs", tile_keys=64,
    cta="a program: 128 (or 64) rows = the query heads of one KV group x their rows; Triton picks the "
    "warps' layout (wgmma on sm_90)", turing_path=False, runner="pa_bench.backends.triton_runner"))
register(Variant(
    "torch-sdpa", PEER, "PyTorch scaled_dot_product_attention as a user calls it (torch picks the kernel: "
    "the impl column names it) on fp16 K/V dequantised beforehand",
    runner="pa_bench.peers.torch_sdpa:SdpaDefault"))
register(Variant(
    "torch-sdpa-flash", PEER, "torch-sdpa pinned to its flash backend",
    runner="pa_bench.peers.torch_sdpa:SdpaFlash"))
register(Variant(
    "torch-sdpa-cudnn", PEER, "torch-sdpa pinned to its cuDNN backend",
    runner="pa_bench.peers.torch_sdpa:SdpaCudnn"))
register(Variant(
    "torch-sdpa+dequant", PEER, "torch-sdpa (torch's own choice of kernel) with the int8 -> fp16 "
    "dequantisation inside every call", runner="pa_bench.peers.torch_sdpa:SdpaDequant"))
register(Variant(
    "torch-flex", PEER, "PyTorch flex_attention, compiled, on fp16 K/V dequantised beforehand "
    "(bottom-right causal block mask, enable_gqa)", runner="pa_bench.peers.torch_flex:FlexPeer"))


__all__ = ["Variant", "register", "unregister", "get", "find", "names", "all_variants", "cuda_kernels", "is_kernel",
           "is_peer", "order_key", "in_order", "CUDA_KERNEL", "TRITON_KERNEL", "PEER", "BASELINE",
           "DIFF_PARTNERS", "INPUT_ROUNDINGS"]
