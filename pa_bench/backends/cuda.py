"""Backend ``cuda``: the kernels of ``kernels/`` through CuPy's RawModule (NVRTC).

It uploads one shape's inputs once, compiles each variant flavour once per process (CuPy also
caches the binaries on disk), launches kernels into outputs framed by canary guard regions,
checks the guards and that every output element was written, launches twice to check
determinism, computes the FP64 reference on the GPU with CuPy, and times kernels and peers
through :mod:`pa_bench.measure.timing`.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
import time
from dataclasses import dataclass, field, fields, replace

import numpy as np

from pa_bench import fmt
from pa_bench import variants as registry
from pa_bench.backends import kernels as K
from pa_bench.backends.base import KernelOutput
from pa_bench.errors import BackendUnavailable, PaBenchError
from pa_bench.launch import NO_PINS, Device, Launch, Pins, choose
from pa_bench.measure import deadline
from pa_bench.peers import CannotRun
from pa_bench.problem.config import DEFAULT_MMA

GUARD_ELEMS = 4096                      # canary elements before and after every output
CANARY_F32 = np.uint32(0xFFC0DEAD)      # a NaN with a payload no kernel produces
CANARY_F16 = np.uint16(0xFDEA)
_PINNED = frozenset(f.name for f in fields(Pins))   # what a caller fixes of a launch: Pins, not attributes


def _cupy():
    try:
        import cupy
    except Exception as exc:  # pragma: no cover - exercised only without CuPy
        raise BackendUnavailable(f"the cuda backend needs CuPy: {exc}") from exc
    return cupy


@dataclass
class Prepared:
    """One shape's inputs on the GPU, and its output buffers."""

    inputs: object
    q: object
    k: object
    v: object
    ks: object
    vs: object
    table: object
    page_shift: int
    out_dtype: str
    out_a: object                          # [GUARD + Hq*Nq*D + GUARD] flat
    out_b: object                          # second buffer for the determinism check
    outputs: dict = field(default_factory=dict)   # variant -> full output (device, float32 view)
    runners: dict = field(default_factory=dict)   # variant -> its prepared peer or Python kernel
    part: object = None                    # key-segment workspace (float32, grown on demand)
    shared: dict = field(default_factory=dict)   # (build, segments) -> v3's shared-tile workspace and launch count


def process_age_s() -> float | None:
    """Seconds since this process started (Linux: /proc), None where unknown: the interpreter's
    start-up and imports before the backend, which no phase of the run covers."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            start_ticks = int(fh.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
        return round(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError):
        return None


class TorchImport:
    """``import torch`` on a daemon thread, started with the backend, so that the peers and the
    Triton kernel find it imported (its seconds: ``backend_meta.torch_import``). An import the
    run needs first simply waits on Python's import lock for the thread's."""

    def __init__(self) -> None:
        import threading

        self.started = time.perf_counter()
        self.seconds: float | None = None
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="pa-bench-torch-import", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            import torch  # noqa: F401
        except Exception as exc:   # the peer that needs it says why, on its row
            self.error = fmt.error_line(exc)
        self.seconds = round(time.perf_counter() - self.started, 3)

    def meta(self) -> dict:
        return {"seconds": self.seconds, "error": self.error}


def start_torch_import(config) -> TorchImport | None:
    """A :class:`TorchImport` where ``config`` holds a variant that runs through torch (a peer, a
    Triton kernel) and torch is not imported yet; ``PA_BENCH_TORCH_EARLY=0`` turns it off."""
    import sys

    if config is None or "torch" in sys.modules:
        return None
    if os.environ.get("PA_BENCH_TORCH_EARLY", "1").strip().lower() in ("0", "off", "no", "false"):
        return None
    kinds = set()
    for name in config.variants:
        try:
            kinds.add(registry.get(name).kind)
        except Exception:
            continue
    if not kinds & {registry.PEER, registry.TRITON_KERNEL}:
        return None
    return TorchImport()


class CudaBackend:
    """See docs/DESIGN.md, 'Backend interface'."""

    name = "cuda"
    kernels_are_model = False
    model_on_gpu = True          # the numerics model runs here, on the GPU (``model``)
    mma: str = DEFAULT_MMA    # the numerics model's P.V accumulation: the config's parity.mma

    def __setattr__(self, name: str, value) -> None:
        if name in _PINNED:   # a launch is pinned when the backend is made
            raise AttributeError(f"CudaBackend.{name}: pin it instead: CudaBackend(config, pins=Pins({name}=...)) "
                                 f"or backend.with_pins(Pins({name}=...)) (pa_bench.launch)")
        super().__setattr__(name, value)

    def __init__(self, config=None, force_turing: bool = False, pins: Pins = NO_PINS):
        init_started, process_age = time.perf_counter(), process_age_s()
        cp = _cupy()
        try:
            if cp.cuda.runtime.getDeviceCount() < 1:
                raise BackendUnavailable("CuPy sees no NVIDIA GPU")
        except BackendUnavailable:
            raise
        except Exception as exc:
            raise BackendUnavailable(f"CuPy sees no NVIDIA GPU ({exc})") from exc
        self.cp = cp
        self.config = config
        self.force_turing = bool(force_turing or (config is not None and config.force_turing))
        if config is not None:
            self.mma = config.parity.mma
        self.device = cp.cuda.Device()
        props = cp.cuda.runtime.getDeviceProperties(self.device.id)
        self.props = props
        self.cc = int(props["major"]) * 10 + int(props["minor"])
        name = props.get("name", "")
        self.facts = Device(name.decode(errors="replace").rstrip("\x00") if isinstance(name, bytes) else str(name),
                            int(props["multiProcessorCount"]))
        self.pins = pins               # what the caller fixes of every launch (pa_bench.launch.Pins)
        self._kernels: dict[K.KernelBuild, object] = {}
        self._smem: dict[K.KernelBuild, int] = {}      # dynamic shared memory per launch (v3)
        self.compilers: dict[K.KernelBuild, str] = {}  # "nvrtc", or "nvcc" (an arch-specific fallback)
        self.compiles: dict[K.KernelBuild, dict] = {}  # seconds and disk-cache hit/miss: meta.json
        self._combines: dict[K.KernelBuild, object] = {}   # pa_combine of each build's module
        self._launches: dict[tuple, dict] = {}   # (variant, problem) -> grid, tiles, split: meta.json
        self._image_bytes: dict[K.KernelBuild, int] = {}   # a shared-tile build's bytes per tile image
        self._timer = None
        self._model_inputs = None      # (inputs, their arrays on the GPU) of the model's last shape
        self.compile_pool = None       # pa_bench.backends.compile_ahead.CompilePool: builds side by side
        self.torch_import = start_torch_import(config)   # the peers' torch, imported on a thread
        # where a first run's time goes before its first phase: meta.json backend_meta.startup
        self.startup = {"process_seconds": process_age,
                        "backend_init_seconds": round(time.perf_counter() - init_started, 3)}

    # ------------------------------------------------------------------ description
    def describe(self) -> dict:
        """The GPU as the run records it: the device facts come from the one GPU-information path
        (pa_bench.present.envinfo.gpu_info, also meta.json's environment); the rest is this
        backend's (CuPy/NVRTC, MMA shape, the Turing switch, the model's accumulation)."""
        from pa_bench.present.envinfo import gpu_info

        info = gpu_info(self.device.id)
        return {
            "backend": "cuda",
            "gpu": info["gpu"],
            "arch": info["arch"],
            "sm_count": info["sm_count"],
            "l2_bytes": info["l2_bytes"],
            "memory_bytes": info["gpu_memory_bytes"],
            "max_smem_per_block_optin": int(self.props.get("sharedMemPerBlockOptin", 0)),
            "driver_version": info["cuda_driver"],
            "runtime_version": info["cuda_runtime"],
            "cupy_version": self.cp.__version__,
            "nvrtc_version": ".".join(map(str, self.cp.cuda.nvrtc.getVersion())),
            "mma": K.mma_shape(self.cc, self.force_turing),
            "force_turing": self.force_turing,
            **_device_identity(self.device.id),
            "model_mma": self.mma,
            "model_engine": _model_engine(),
        }

    def meta(self) -> dict:
        return {
            "kernel_sources": K.source_hashes(),
            "compile_options": list(K.BASE_OPTIONS) + ["-D... per build (see builds)", "--gpu-architecture=<device>"],
            "builds": [
                {"variant": b.variant, "options": list(b.defines()), "mma": K.mma_shape(self.cc, b.force_turing),
                 "tiles": self._tiles(b.variant, b.tiles), "compiler": self.compilers.get(b),
                 **self.compiles.get(b, {})}
                for b in self._kernels
            ],
            "kernel_cache": str(K.kernel_cache_dir() or "off (CUPY_CACHE_IN_MEMORY)"),
            "startup": self.startup,
            **({"compile_pool": self.compile_pool.meta()} if self.compile_pool is not None else {}),
            **({"torch_import": self.torch_import.meta()} if self.torch_import is not None else {}),
            "launches": list(self._launches.values()),
            **{v.name: v.resolve_runner().meta() for v in registry.all_variants()
               if v.kind == registry.TRITON_KERNEL},
            "cta": {v.name: v.cta for v in registry.cuda_kernels()},
            "cta_notes": ("T m16 tiles per warp: per shape, the tiles column of the builds "
                          "(pa_bench.launch.choose_tiles); with T = 2 the tiles are two query heads of "
                          "one KV group at the same 16 rows when the group has an even number of heads, else 32 "
                          "rows of one head. With split keys (per shape: the launches, "
                          "pa_bench.launch.split_keys) both warps of a CTA hold the same tiles, warp 0 "
                          "keys [0, split), warp 1 the rest, merged at the end. With key segments (per shape: "
                          "the launches' segment_keys and segments, pa_bench.launch.segment_keys) "
                          "grid.z = segments: the CTAs of grid.z = z see keys [z*S, (z+1)*S) only, and a "
                          "second launch, pa_combine, merges each row's segments in order"),
        }

    # ------------------------------------------------------------------ support
    @staticmethod
    def _tiles(variant: str, tiles: int) -> int:
        return tiles if registry.get(variant).warp_tiles else 1

    def _kernel_reason(self, variant: str, problem) -> str | None:
        return K.build_unsupported(variant, self.cc, self.force_turing, problem.head_dim)

    def unsupported(self, variant: str, problem) -> str | None:
        """Why ``variant`` cannot run ``problem`` here (one line), or None: by its kind, a CUDA
        kernel's arch and build, a Python kernel's or a peer's own answer, then GPU memory."""
        entry = registry.find(variant)
        if entry is None:
            return f"unknown variant {variant!r}"
        if entry.kind == registry.CUDA_KERNEL:
            return self._kernel_reason(variant, problem) or self._fit_reason(problem)
        try:
            runner = entry.resolve_runner()
            if entry.kind == registry.TRITON_KERNEL:
                return runner.unsupported(self.cc, problem.head_dim) or self._fit_reason(problem)
            if "cuda" not in tuple(getattr(runner, "backends", ("cuda",))):
                return f"{variant} runs on the {', '.join(runner.backends)} backend only"
            return runner.unavailable(problem) or self._fit_reason(problem, peer=True)
        except Exception as exc:  # a plug-in's own check failed: the row says why, the run goes on
            return f"{variant} cannot say whether it runs here: {fmt.error_line(exc)}"

    # parity and timing need the same things of a variant here
    unsupported_parity = unsupported
    unsupported_timing = unsupported

    def _fit_reason(self, problem, peer: bool = False) -> str | None:
        need = estimate_bytes(problem, peer=peer)
        free, _total = self.cp.cuda.runtime.memGetInfo()
        pool = self.cp.get_default_memory_pool()
        free += pool.free_bytes()
        if need > 0.9 * free:
            return f"needs about {need / 2**30:.1f} GiB of GPU memory, {free / 2**30:.1f} GiB free"
        return None

    # ------------------------------------------------------------------ inputs
    def prepare(self, inputs) -> Prepared:
        cp = self.cp
        pb = inputs.problem
        reason = self._fit_reason(pb)
        if reason:
            raise PaBenchError(f"shape {pb.shape.label} will not fit: {reason}")
        if pb.layout == "paged":
            pk = inputs.paged
            k, v = cp.asarray(pk.k_pool), cp.asarray(pk.v_pool)
            ks, vs = cp.asarray(pk.k_scale_pool, dtype=cp.float32), cp.asarray(pk.v_scale_pool, dtype=cp.float32)
            table = cp.asarray(pk.page_table, dtype=cp.int32)
            page_shift = int(math.log2(pb.page))
        else:
            k, v = cp.asarray(np.ascontiguousarray(inputs.k_i8)), cp.asarray(np.ascontiguousarray(inputs.v_i8))
            # scale rows padded to a multiple of 4 keys: 16-byte aligned 4-key chunks
            stride = (pb.keys + 3) // 4 * 4
            ks = cp.zeros((pb.heads_kv, stride), dtype=cp.float32)
            vs = cp.zeros((pb.heads_kv, stride), dtype=cp.float32)
            ks[:, : pb.keys] = cp.asarray(inputs.k_scale, dtype=cp.float32)
            vs[:, : pb.keys] = cp.asarray(inputs.v_scale, dtype=cp.float32)
            table = cp.zeros(1, dtype=cp.int32)
            page_shift = 0
        if k.size // pb.head_dim >= 2**32:  # the kernels index K/V rows with 32 bits (kv_row)
            raise PaBenchError(f"shape {pb.shape.label}: {k.size // pb.head_dim} K/V rows; the kernels "
                               f"index at most 2^32")
        q = cp.asarray(np.ascontiguousarray(inputs.q, dtype=np.float16))
        n_out = pb.heads_q * pb.queries * pb.head_dim + 2 * GUARD_ELEMS
        odt = cp.float16 if pb.out_dtype == "float16" else cp.float32
        return Prepared(inputs, q, k, v, ks, vs, table, page_shift, pb.out_dtype,
                        cp.empty(n_out, dtype=odt), cp.empty(n_out, dtype=odt))

    def compile_builds(self, problems, variants: list[str]) -> None:
        """Every kernel build of the run compiled side by side in a process pool
        (pa_bench.backends.compile_ahead.start_pool); ``kernel()`` waits for a build's worker."""
        from pa_bench.backends import compile_ahead

        compile_ahead.start_pool(self, problems, variants)

    def close(self) -> None:
        """The compile pool's workers ended (they hold CUDA contexts)."""
        if self.compile_pool is not None:
            self.compile_pool.close()

    def release(self, prepared: Prepared) -> None:
        from pa_bench.peers import torch_util

        self._model_inputs = None
        prepared.outputs.clear()
        prepared.runners.clear()
        prepared.part = None
        prepared.shared.clear()
        torch_util.release()
        self.cp.get_default_memory_pool().free_all_blocks()

    # ------------------------------------------------------------------ kernels
    def launch(self, variant: str, problem) -> Launch:
        """The launch of ``variant`` on ``problem`` here: pa_bench.launch.choose on this GPU with this
        backend's pins (the numerics model follows it). A Triton kernel's runner picks its own
        configuration (it may tune): once it has run the shape, the tile is the block_n it launched."""
        chosen = choose(variant, problem, self.facts, self.pins)
        if registry.get(variant).kind == registry.TRITON_KERNEL:
            ran = self._launches.get((variant, repr(problem)), {}).get("block_n")
            if ran:
                return replace(chosen, tile_keys=int(ran))
        return chosen

    def with_pins(self, pins: Pins) -> "CudaBackend":
        """This backend launching with ``pins`` (pa_bench.launch.Pins) instead of its own: the same
        GPU, compiled kernels and records, another launch where the pins say."""
        other = copy.copy(self)
        other.pins = pins
        return other

    def build(self, variant: str, problem, launch: Launch | None = None) -> K.KernelBuild:
        """The build of ``variant`` that runs ``launch`` (None: ``self.launch``) on ``problem``."""
        launch = launch or self.launch(variant, problem)
        return K.KernelBuild(
            variant=variant,
            head_dim=problem.head_dim,
            paged=problem.layout == "paged",
            out_f16=problem.out_dtype == "float16",
            force_turing=self.force_turing,
            tiles=launch.tiles,
            cta_rows=launch.rows,
            kv_shared=launch.shares_tiles,
            step_keys=launch.step_keys,
        )

    def kernel(self, build: K.KernelBuild):
        fn = self._kernels.get(build)
        if fn is None:
            pooled = self.compile_pool.wait_for(build) if self.compile_pool is not None else None
            try:
                cache = K.kernel_cache_dir()
                before, started = K.cache_entries(cache), time.perf_counter()
                mod, fn = self._module(build)
                self.compiles[build] = {"compile_seconds": round(time.perf_counter() - started, 3),
                                        "cache": K.cache_outcome(cache, before)
                                        if self.compilers.get(build) == "nvrtc" else None}
                if pooled is not None:     # built by a pool worker first: its own seconds
                    self.compiles[build]["pool_seconds"] = pooled.get("seconds")
                self.adopt(build, mod, fn)
            except Exception as exc:
                raise PaBenchError(f"compiling {build.variant} failed: {fmt.error_line(exc)}") from exc
        return fn

    def adopt(self, build: K.KernelBuild, mod, fn) -> None:
        """Make ``fn`` of module ``mod`` the kernel that launches of ``build`` run: its dynamic shared
        memory, a shared-tile build's image bytes (which size its workspace), the kernel and the
        module's pa_combine. ``kernel()`` adopts what it compiles; a script that launches its own
        copy of a kernel (pa_bench.Session.module_launcher, experiments/v3_stamping.py) adopts that module instead."""
        smem = self._dynamic_smem(mod, fn, build)
        image_bytes = self._probe_int(mod, "pa_v3_image_bytes") if build.kv_shared else None
        combine = mod.get_function("pa_combine")
        self._smem[build] = smem
        if image_bytes is not None:
            self._image_bytes[build] = image_bytes
        self._kernels[build] = fn
        self._combines[build] = combine

    def combine_kernel(self, build: K.KernelBuild):
        """pa_combine of the build's module (pa_common.cuh): merges the key segments of a launch."""
        self.kernel(build)
        return self._combines[build]

    def _module(self, build: K.KernelBuild):
        """(module, kernel) of a build: NVRTC through CuPy; for an arch-specific variant (v3,
        sm_90a) with the arch named (K.arch_options), and should NVRTC fail there, nvcc to a cubin
        that RawModule loads (K.nvcc_cubin). ``self.compilers`` records which one built it."""
        arch = K.arch_options(build.variant, self.cc)
        try:
            mod = self.cp.RawModule(code=K.kernel_source(build.variant),
                                    options=build.options() + self._include_options() + arch)
            fn = mod.get_function(build.function)
            self.compilers[build] = "nvrtc"
        except Exception:
            if not arch:
                raise
            import shutil

            if shutil.which("nvcc") is None:
                raise
            mod = self.cp.RawModule(path=str(K.nvcc_cubin(build, registry.get(build.variant).nvcc_arch(self.cc))))
            fn = mod.get_function(build.function)
            self.compilers[build] = "nvcc"
        return mod, fn

    def _probe_int(self, mod, name: str) -> int:
        """What the module's one-thread kernel ``name`` writes to its int."""
        buf = self.cp.zeros(1, dtype=self.cp.int32)
        mod.get_function(name)((1,), (1,), (buf,))
        return int(buf.get()[0])

    def _dynamic_smem(self, mod, fn, build: K.KernelBuild) -> int:
        """The dynamic shared memory of a kernel whose module exports ``<function>_smem_bytes``
        (v3: over 48 KB), asked once and the kernel's limit raised to it; 0 for the others."""
        try:
            smem = self._probe_int(mod, build.function + "_smem_bytes")
        except self.cp.cuda.driver.CUDADriverError:   # no such kernel in the module
            return 0
        fn.max_dynamic_shared_size_bytes = smem
        return smem

    def tile_keys(self, variant: str, problem) -> int:
        """Keys per online-softmax tile of ``variant``'s launch on ``problem`` (Launch.tile_keys)."""
        return self.launch(variant, problem).tile_keys

    def split_keys(self, variant: str, problem) -> int:
        """Where ``variant``'s launch on ``problem`` splits the keys (Launch.split_keys; 0: no split)."""
        return self.launch(variant, problem).split_keys

    def segment_keys(self, variant: str, problem) -> int:
        """Keys per key segment of ``variant``'s launch on ``problem`` (Launch.segment_keys; 0: none)."""
        return self.launch(variant, problem).segment_keys

    def geometry(self, variant: str, problem, launch: Launch | None = None) -> K.LaunchGeometry:
        """Grid and block of ``launch`` (None: ``self.launch``) of ``variant`` on ``problem``."""
        launch = launch or self.launch(variant, problem)
        return K.launch_geometry(variant, problem.queries, problem.heads_q, problem.heads_kv, tiles=launch.tiles,
                                 pair_heads=launch.pair_heads, split_keys=launch.split_keys,
                                 context=problem.context, segment_keys=launch.segment_keys, cta_rows=launch.rows)

    def _include_options(self) -> tuple[str, ...]:
        """The CUDA headers (cuda_fp16.h, cuda_pipeline_primitives.h) for NVRTC, where found."""
        import os

        try:
            root = self.cp.cuda.get_cuda_path()
        except Exception:
            root = None
        inc = os.path.join(root, "include") if root else None
        return (f"-I{inc}",) if inc and os.path.isdir(inc) else ()

    def launcher(self, prep: Prepared, variant: str, out=None, launch: Launch | None = None):
        """A no-argument callable that launches kernel ``variant`` once (asynchronously) into
        ``out``: a CUDA kernel as ``launch`` says (None: ``self.launch``), with key segments
        pa_combine after it (two launches in one stream), or a Python kernel (its runner's
        launcher, which plans its own)."""
        if registry.get(variant).kind == registry.TRITON_KERNEL:
            return self._python_launcher(prep, variant, prep.out_a if out is None else out)
        inp = prep.inputs
        pb = inp.problem
        launch = launch or self.launch(variant, pb)
        build = self.build(variant, pb, launch)
        fn = self.kernel(build)
        smem = self._smem.get(build, 0)
        out = prep.out_a if out is None else out
        body = out[GUARD_ELEMS:]
        geo = self.geometry(variant, pb, launch)
        grid, block = geo.grid, (geo.block,)
        n_part = max(K.workspace_floats(geo, pb.queries, pb.heads_q, pb.head_dim), 2)
        if build.kv_shared:   # its own workspace: the segment floats, then the images, flags and counters
            shared = self._shared_workspace(prep, build, geo, n_part)
            part = shared["part"]
        else:
            if prep.part is None or prep.part.size < n_part:   # once per shape (the largest any variant needs)
                prep.part = self.cp.empty(n_part, dtype=self.cp.float32)
            part = prep.part
        cgrid, cblock = K.combine_geometry(pb.queries, pb.heads_q)
        self._launches[(variant, repr(pb))] = {
            "variant": variant, "shape": pb.shape.label, "grid": list(grid), "block": geo.block,
            "tiles": launch.tiles, "pair_heads": geo.pair_heads,
            "split_keys": geo.split_keys, "segment_keys": geo.segment_keys, "segments": geo.segments,
            "combine_grid": list(cgrid) if geo.segment_keys else None,
            **({"shares_tiles": True, "workspace_bytes": int(part.nbytes)} if build.kv_shared else {}),
            **({"step_keys": build.step_keys} if build.step_keys != 64 else {})}
        args = (
            prep.q, prep.k, prep.v, prep.ks, prep.vs, prep.table, body,
            np.int32(pb.queries), np.int32(pb.context), np.int32(pb.heads_q), np.int32(pb.heads_kv),
            np.int32(prep.page_shift), np.float32(inp.qk_scale_log2), np.float32(inp.p_scale),
            np.float32(1.0 / inp.p_scale), np.int32(prep.ks.shape[-1]), np.int32(geo.pair_heads),
            np.int32(geo.split_keys), part, np.int32(geo.segment_keys),
        )
        if build.kv_shared:   # Args::pair_heads carries the launch's epoch (kernels/v3.cu, PA_V3_SHARE)
            args = self._epoch_args(shared, args)
        combine = self.combine_kernel(build) if geo.segment_keys else None
        cargs = (part, body, np.int32(pb.queries), np.int32(pb.context), np.int32(pb.heads_q),
                 np.int32(geo.segments), np.int32(geo.segment_keys), np.float32(1.0 / inp.p_scale))

        def launch():
            fn(grid, block, args() if callable(args) else args, shared_mem=smem)
            if combine is not None:
                combine(cgrid, (cblock,), cargs)

        return launch

    def _shared_workspace(self, prep: Prepared, build: K.KernelBuild, geo: K.LaunchGeometry, seg_floats: int) -> dict:
        """The workspace of a shared-tile build on this shape and its launch count (kernels/v3.cu's
        share_base: the segment floats, then an image, a flag per tile and a ticket counter per KV
        head and segment), zeroed once: the flags and counters carry the launch's epoch and are
        never cleared. One per build and segment count: the images, flags and counters lie past the
        segment floats, so a launch with other segments reads another layout (a workspace sized for
        one segment overruns with three, and stale image bytes read as flags or tickets)."""
        layout = (build, geo.segments if geo.segment_keys else 0)
        got = prep.shared.get(layout)
        if got is None:
            pb = prep.inputs.problem
            nbytes = K.share_workspace_bytes(seg_floats, pb.heads_kv, -(-pb.keys // 64), self._image_bytes[build],
                                             geo.segments)
            got = prep.shared[layout] = {"part": self.cp.zeros(-(-nbytes // 4), dtype=self.cp.float32), "epoch": 0}
        return got

    @staticmethod
    def _epoch_args(state: dict, args: tuple):
        """The kernel's arguments with the next epoch (1, 2, ...) where Args::pair_heads goes."""
        head, tail = args[:16], args[17:]

        def next_args():
            state["epoch"] += 1
            if state["epoch"] >= 2**31:
                raise PaBenchError("v3: 2^31 launches on one shared-tile workspace")
            return head + (np.int32(state["epoch"]),) + tail
        return next_args

    def _python_launcher(self, prep: Prepared, variant: str, out):
        """A Python (Triton) kernel on this shape's buffers, viewed by torch without a copy,
        writing into ``out``'s body (its runner module, e.g. pa_bench.backends.triton_runner)."""
        runner = prep.runners.get(variant)
        if runner is None:
            arrays = {"q": prep.q, "k": prep.k, "v": prep.v, "ks": prep.ks, "vs": prep.vs, "table": prep.table}
            module = registry.get(variant).resolve_runner()
            runner = prep.runners[variant] = module.TritonVariant(
                prep.inputs, arrays=arrays, sm_count=int(self.props["multiProcessorCount"]))
            self._launches[(variant, repr(prep.inputs.problem))] = runner.describe()
        return runner.launcher(out[GUARD_ELEMS:])

    def _peer(self, prep: Prepared, variant: str):
        """The peer ``variant`` prepared on this shape (once); a shape it refuses is a PaBenchError
        with its reason."""
        peer = prep.runners.get(variant)
        if peer is None:
            cls = registry.get(variant).resolve_runner()
            try:
                peer = prep.runners[variant] = cls(prep.inputs, device="cuda")
            except CannotRun as exc:
                raise PaBenchError(str(exc)) from None
            except PaBenchError:
                raise
            except Exception as exc:
                raise PaBenchError(f"{variant} could not run: {fmt.error_line(exc)}") from exc
            self._launches[(variant, repr(prep.inputs.problem))] = {
                "variant": variant, "shape": prep.inputs.problem.shape.label, **(peer.describe() or {})}
        return peer

    def build_ahead(self, prep: Prepared, variant: str) -> None:
        """Build a Triton kernel or a peer on this shape as ``compute`` would, and call it once
        (pa_bench.backends.compile_ahead's child: it fills the on-disk compile caches for the run)."""
        if registry.get(variant).kind == registry.TRITON_KERNEL:
            self._python_launcher(prep, variant, prep.out_a)()
        else:
            self._peer(prep, variant).call()()
        self._wait(f"{variant} at {prep.inputs.problem.shape.label}", prep.inputs.problem.flops,
                   variant=variant)

    def impl(self, prep: Prepared, variant: str) -> str | None:
        """What ran a peer on this shape (its ``impl()``, e.g. torch's choice), None for a kernel."""
        peer = prep.runners.get(variant) if registry.is_peer(variant) else None
        return None if peer is None else peer.impl()

    def _wait(self, what: str, flops: float, launches: int = 1, variant: str | None = None) -> None:
        """Wait for the GPU work enqueued so far, under the deadline for that work."""
        fixed = self.config.deadline if self.config is not None else None
        try:
            deadline.wait_stream(self.cp, deadline.deadline_for(flops, fixed, launches), what)
        except deadline.KernelHung as exc:
            raise exc.at(what, variant) from None

    def deadlines(self, variants, problem) -> dict:
        """Seconds one call of each variant may take (pa_bench.measure.deadline)."""
        fixed = self.config.deadline if self.config is not None else None
        return {v: deadline.deadline_for(problem.flops, fixed) for v in variants}

    def _fill_canary(self, buf) -> None:
        if buf.dtype == self.cp.float16:
            buf.view(self.cp.uint16).fill(CANARY_F16)
        else:
            buf.view(self.cp.uint32).fill(CANARY_F32)

    def _canary_checks(self, buf) -> tuple[bool, bool]:
        """(guards intact, every body element written)."""
        cp = self.cp
        bits = buf.view(cp.uint16 if buf.dtype == cp.float16 else cp.uint32)
        pat = CANARY_F16 if buf.dtype == cp.float16 else CANARY_F32
        guards = bool((bits[:GUARD_ELEMS] == pat).all()) and bool((bits[-GUARD_ELEMS:] == pat).all())
        written = not bool((bits[GUARD_ELEMS:-GUARD_ELEMS] == pat).any())
        return guards, written

    def compute(self, prep: Prepared, variant: str, rows=None, check_determinism: bool = True) -> KernelOutput:
        if registry.is_peer(variant):
            return self._compute_peer(prep, variant, rows, check_determinism)
        cp = self.cp
        pb = prep.inputs.problem
        outs = []
        for buf in (prep.out_a, prep.out_b) if check_determinism else (prep.out_a,):
            self._fill_canary(buf)
            self.launcher(prep, variant, buf)()
            self._wait(f"{variant} at {pb.shape.label}", pb.flops, variant=variant)
            outs.append(buf)
        guards, written = self._canary_checks(prep.out_a)
        deterministic = None
        if check_determinism:
            ga, wb = self._canary_checks(prep.out_b)
            guards, written = guards and ga, written and wb
            view = cp.uint16 if prep.out_a.dtype == cp.float16 else cp.uint32
            deterministic = bool(cp.array_equal(prep.out_a.view(view), prep.out_b.view(view)))
        body = prep.out_a[GUARD_ELEMS:-GUARD_ELEMS].reshape(pb.heads_q, pb.queries, pb.head_dim)
        full = body.astype(cp.float32)
        prep.outputs[variant] = full
        digest = hashlib.sha1(cp.asnumpy(body).tobytes()).hexdigest()
        sel = full if rows is None else full[:, cp.asarray(rows), :]
        return KernelOutput(out=cp.asnumpy(sel), canary_ok=guards and written, deterministic=deterministic,
                            full_hash=digest, diff_source=variant)

    def _compute_peer(self, prep: Prepared, variant: str, rows, check_determinism: bool) -> KernelOutput:
        """A peer's output (its own buffers: no canaries), twice for determinism; each call is
        awaited under its deadline before its output is read."""
        peer = self._peer(prep, variant)
        pb = prep.inputs.problem

        def fresh():
            peer.call()()
            self._wait(f"{variant} at {pb.shape.label}", pb.flops, variant=variant)
            return np.asarray(peer.output(), dtype=np.float32)

        out = fresh()
        deterministic = None
        if check_determinism:
            deterministic = bool(np.array_equal(out.view(np.uint32), fresh().view(np.uint32)))
        prep.outputs[variant] = self.cp.asarray(out)
        sel = out if rows is None else out[:, np.asarray(rows), :]
        return KernelOutput(out=np.ascontiguousarray(sel), canary_ok=True, deterministic=deterministic,
                            full_hash=hashlib.sha1(out.tobytes()).hexdigest(), diff_source=variant)

    def max_diff(self, prep: Prepared, a: str, b: str) -> float | None:
        """Max abs difference of two variants' full outputs (None if either is missing)."""
        if a not in prep.outputs or b not in prep.outputs:
            return None
        return float(self.cp.abs(prep.outputs[a] - prep.outputs[b]).max())

    # ------------------------------------------------------------------ reference
    def reference(self, inputs, rows=None, quantised: bool = True):
        from pa_bench.numerics.reference import reference_attention

        cp = self.cp
        pb = inputs.problem
        extra = {}
        if quantised:
            k, v = cp.asarray(inputs.k_i8), cp.asarray(inputs.v_i8)
            extra = {"k_scale": cp.asarray(inputs.k_scale), "v_scale": cp.asarray(inputs.v_scale)}
        else:
            if inputs.k_float is None:
                return None
            k, v = cp.asarray(inputs.k_float), cp.asarray(inputs.v_float)
        ref = reference_attention(cp.asarray(inputs.q), k, v, pb.context, pb.softmax_scale,
                                  rows=None if rows is None else np.asarray(rows), xp=cp, **extra)
        del k, v, extra
        # FP64 on GPUs whose float64 rate is a small fraction of their tensor cores': a wider margin
        self._wait(f"the FP64 reference at {pb.shape.label}", _rows_flops(pb, rows), launches=50)
        out = cp.asnumpy(ref)
        cp.get_default_memory_pool().free_all_blocks()
        return out

    def model(self, inputs, tile_keys: int, rows=None, split_keys: int = 0, pv_chain_keys: int = 0,
              segment_keys: int | None = None, max_slack: float | None = None,
              input_rounding: str | None = None) -> np.ndarray:
        """The numerics model on the GPU: pa_bench.numerics.model on CuPy arrays (the inputs'
        logical K/V uploaded once per shape), its key parts computed by the fused kernel
        kernels/pa_model.cu (engine "kernel"; PA_BENCH_MODEL_ENGINE=xp for CuPy's array steps),
        the same bits as on the CPU (tests/gpu). ``pv_chain_keys``: numerics.model.pv_chain_keys;
        ``segment_keys``: the launch's (Launch.segment_keys; None: the context's rule);
        ``max_slack``: numerics.model.max_slack; ``input_rounding``: numerics.model.input_rounding."""
        from pa_bench.numerics.model import model_arrays, model_attention

        cached = self._model_inputs
        if cached is None or cached[0] is not inputs:
            self._model_inputs = cached = (inputs, model_arrays(inputs, self.cp))
        mma_k = 8 if K.mma_shape(self.cc, self.force_turing) == "m16n8k8" else 16
        out = model_attention(cached[1], tile_keys, rows, split_keys=split_keys, mma_k=mma_k,
                              pv_chain_keys=pv_chain_keys, segment_keys=segment_keys, max_slack=max_slack,
                              engine=_model_engine(), mma=self.mma, input_rounding=input_rounding)
        pb = inputs.problem   # the model emulates each MMA in scalar code: a wider margin
        self._wait(f"the numerics model at {pb.shape.label}", _rows_flops(pb, rows), launches=20)
        return self.cp.asnumpy(out)

    # ------------------------------------------------------------------ timing
    def callables(self, prep: Prepared, variants) -> tuple[dict, dict]:
        """What the timing loop (and scripts/ncu_check.py) call: ({variant: one call's GPU work},
        {variant: why it cannot run})."""
        pb = prep.inputs.problem
        fns, reasons = {}, {}
        for var in variants:
            reason = self.unsupported_timing(var, pb)
            if reason:
                reasons[var] = reason
                continue
            try:
                if registry.is_peer(var):
                    fns[var] = self._peer(prep, var).call()   # prepares (compiles) outside the timing
                else:
                    fns[var] = self.launcher(prep, var)
            except PaBenchError as exc:
                reasons[var] = str(exc)
            except Exception as exc:  # a peer that cannot run this shape (torch raises RuntimeError)
                reasons[var] = f"{var} could not run: {fmt.error_line(exc)}"
        return fns, reasons

    def time(self, prep: Prepared, variants, settings) -> dict:
        """Every variant timed interleaved (pa_bench.measure.timing.time_interleaved) on
        ``settings.placements`` placements of the shape's inputs in GPU memory: the first is
        ``prep``, the others copies of it made here (as many as fit), each with its own peers;
        every round samples each variant on each placement, and the samples are merged per variant
        (``timing.merge_placements``). Where the inputs sit moves a short kernel's median by up to
        about half a per cent on the H200, so one placement's median is not the variant's."""
        from pa_bench.measure import timing
        from pa_bench.peers import torch_util

        if self.compile_pool is not None:   # its workers hold CUDA contexts: gone before a sample
            self.compile_pool.close()
        pb = prep.inputs.problem
        want = max(settings.placements, 1)
        preps = [prep]
        try:
            while len(preps) < want:
                try:
                    preps.append(self.prepare(prep.inputs))
                except (PaBenchError, self.cp.cuda.memory.OutOfMemoryError):
                    break               # as many placements as fit
            fns, results = {}, {}
            for i, p in enumerate(preps):
                with torch_util.placement(i):
                    got, reasons = self.callables(p, [v for v in variants if v not in results])
                if i == 0:
                    results.update(reasons)
                fns.update({timing.placed_name(v, i): fn for v, fn in got.items() if v not in results})
            if fns:
                limits = self.deadlines([timing.unplaced_name(n) for n in fns], pb)
                try:
                    timed = timing.time_interleaved(
                        fns, settings, timer=self.timer(), clock=timing.ClockReader(self.device.id),
                        deadlines={n: limits[timing.unplaced_name(n)] for n in fns})
                except deadline.KernelHung as exc:
                    name = timing.unplaced_name(exc.variant or "")
                    raise exc.at(f"{name} at {pb.shape.label}", name) from None
                placed = {timing.unplaced_name(n) for n in fns}
                results.update(timing.merge_placements(timed, [v for v in variants if v in placed], len(preps)))
        finally:
            for i, p in enumerate(preps[1:], start=1):
                p.runners.clear()
                p.outputs.clear()
                torch_util.release(i)
        return results

    def timer(self):
        """The GPU-time-only sampler (pa_bench.measure.timing.CupyTimer), made once."""
        if self._timer is None:
            from pa_bench.measure import timing

            flush = self.config.timing.l2_flush if self.config is not None else "read"
            self._timer = timing.CupyTimer(int(self.props["l2CacheSize"]), flush=flush)
        return self._timer


def _rows_flops(problem, rows) -> float:
    """The causal FLOP count of ``rows`` of ``problem`` (all rows: ``problem.flops``)."""
    if rows is None:
        return float(problem.flops)
    rows = np.asarray(rows, dtype=np.float64)
    return 4.0 * problem.head_dim * problem.heads_q * float(np.sum(problem.context + rows + 1))


def _model_engine() -> str:
    """Who computes the numerics model's key parts on the GPU (pa_bench.numerics.model.ENGINES):
    the fused kernel kernels/pa_model.cu, or "xp" (CuPy array steps; the same bits, launch-bound)
    where PA_BENCH_MODEL_ENGINE says so."""
    return os.environ.get("PA_BENCH_MODEL_ENGINE", "kernel")


def _device_identity(ordinal: int) -> dict:
    from pa_bench.measure.timing import device_identity

    return device_identity(ordinal)


def estimate_bytes(problem, peer: bool = False) -> int:
    """GPU memory a shape needs: inputs, two framed outputs, the FP64 reference's K/V."""
    hq, hkv, d, nq, nk = problem.heads_q, problem.heads_kv, problem.head_dim, problem.queries, problem.keys
    kv = 2 * hkv * nk * (d + 4)
    if problem.layout == "paged":
        kv = kv * 2 + 2 * hkv * problem.page * (d + 4)
    q = hq * nq * d * 2
    out = 2 * (hq * nq * d + 2 * GUARD_ELEMS) * 4 + hq * nq * d * 4 * 2
    ref = 2 * hkv * nk * d * 8 + 256 * nk * 8 * 4 + hq * nq * d * 8
    peer_bytes = (2 * hkv * nk * d * 2 + hq * nq * d * 2) * 2 if peer else 0
    from pa_bench.launch import shares_tiles
    from pa_bench.variants import context_segment_keys

    seg = context_segment_keys(problem.context)
    part = -(-nk // seg) * hq * nq * (d + 2) * 4 if seg else 0     # the key-segment workspace
    # v3's shared tiles: an fp16 image of every 64-key tile (K, V and both scales), twice the int8 K/V
    images = hkv * -(-nk // 64) * (64 * d * 4 + 516) if shares_tiles("v3", problem.context, nq, hq, hkv) else 0
    return kv + q + out + ref + peer_bytes + part + images
