"""``v3-f16``: v3's own kernel on fp16 K/V, the control that says what int8 K/V costs v3.

kernels/v3.cu built with ``-DPA_KV_F16=1`` (``KernelBuild.kv_f16``): the same consumer warpgroups
(wgmma, pingpong, the same tiles and order), and a producer that only copies each 64-key fp16 K
and V tile into the swizzled stages (cp.async, no int8 staging, no conversion; the kernel's
opening comment). It reads the fp16 K/V the torch peers read (``int8 * scale`` rounded to fp16,
formed once per shape on the GPU), laid out as v3 reads the shape: the paged pool through the
same page table, or contiguous. Its arithmetic is therefore not the int8 numerics model: it is a
peer, its error against FP64 shown for information.

It launches as v3 does: the same grid, and the same key segments (v3's rule,
``pa_bench.numerics.model.segment_keys``: long contexts, and chunks with too few CTAs to fill the
GPU) with pa_combine after the kernel, and the same consumer step: where v3 takes 128-key steps
(``model.step_keys``: kernels/v3_pairs.cuh) the producer copies each pair of tiles' K and V into
their own rings (the kernel's comment above that producer). It runs on sm_90 (the build is sm_90a), head_dim 64 or 128,
with CuPy.

Not registered by default (nothing of it has been measured): load it as a plug-in,
``--plugin pa_bench.peers.v3_f16`` or a config's ``plugins: [pa_bench.peers.v3_f16]``.
"""

from __future__ import annotations

import math

import numpy as np

from pa_bench import variants as registry
from pa_bench.peers import CannotRun, Peer, register_peer

NAME = "v3-f16"
HEAD_DIMS = (64, 128)      # what v3.cu builds
ARCH_CC = 90               # sm_90a only (wgmma, setmaxnreg)

_built: dict = {}          # KernelBuild -> (kernel, pa_combine, dynamic shared memory, compiler)


def _device(name: str = NAME) -> tuple[str | None, int | None]:
    """(why there is no GPU to run on, None) or (None, the current GPU's compute capability); the
    reason names the peer ``name`` (this control, or another peer built from v3.cu)."""
    try:
        import cupy as cp
    except Exception:
        return f"{name} needs CuPy (pip install 'pa-bench[cuda13]')", None
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            return f"{name}: CuPy sees no NVIDIA GPU", None
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    except Exception as exc:
        return f"{name}: CuPy sees no NVIDIA GPU ({type(exc).__name__})", None
    return None, int(props["major"]) * 10 + int(props["minor"])


def _reason(problem, cc: int, name: str = NAME) -> str | None:
    """Why a peer built from v3.cu (``name``: this control by default) cannot run ``problem`` on a
    GPU of compute capability ``cc``, or None."""
    if cc != ARCH_CC:
        return f"{name} needs sm_90a (wgmma, setmaxnreg), not sm_{cc}"
    if problem.head_dim not in HEAD_DIMS:
        return f"{name} has no head_dim {problem.head_dim} (it builds {' and '.join(map(str, HEAD_DIMS))})"
    group = problem.heads_q // problem.heads_kv
    if problem.heads_q % problem.heads_kv or group > 128:
        return f"{name} needs heads_kv to divide heads_q with at most 128 query heads per KV head"
    return None


def _include_options(cp) -> tuple[str, ...]:
    """The CUDA headers (cuda_fp16.h) for NVRTC, where found."""
    import os

    try:
        root = cp.cuda.get_cuda_path()
    except Exception:
        root = None
    inc = os.path.join(root, "include") if root else None
    return (f"-I{inc}",) if inc and os.path.isdir(inc) else ()


def _build(cp, build, cc: int):
    """(kernel, pa_combine, dynamic shared memory, compiler) of ``build``, made once per process:
    NVRTC as the cuda backend builds v3, nvcc to a cubin where NVRTC cannot."""
    got = _built.get(build)
    if got is not None:
        return got
    from pa_bench.backends import kernels as K

    arch = K.arch_options(build.variant, cc)
    try:
        mod = cp.RawModule(code=K.kernel_source(build.variant),
                           options=build.options() + _include_options(cp) + arch)
        fn = mod.get_function(build.function)
        compiler = "nvrtc"
    except Exception:
        import shutil

        if shutil.which("nvcc") is None:
            raise
        mod = cp.RawModule(path=str(K.nvcc_cubin(build, registry.get(build.variant).nvcc_arch(cc))))
        fn = mod.get_function(build.function)
        compiler = "nvcc"
    probe = mod.get_function(build.function + "_smem_bytes")
    buf = cp.zeros(1, dtype=cp.int32)
    probe((1,), (1,), (buf,))
    smem = int(buf.get()[0])
    fn.max_dynamic_shared_size_bytes = smem
    got = _built[build] = (fn, mod.get_function("pa_combine"), smem, compiler)
    return got


def _fp16_kv(cp, k_i8, v_i8, k_scale, v_scale):
    """fp16(fp16(int8) * fp16(scale)) per element, as the torch peers form their K/V (the fp32
    product of two fp16 values is exact, so its rounding to fp16 gives the same bits)."""
    def f16(x8, sc):
        return cp.asarray(x8).astype(cp.float16) * cp.asarray(sc).astype(cp.float16)[..., None]

    return f16(k_i8, k_scale), f16(v_i8, v_scale)


def build_for(problem):
    """The control's build on ``problem``: v3's launch (its rows, and its consumer step: 128 keys
    where v3 takes 128-key steps, model.step_keys), with fp16 K/V and a copy-only producer."""
    from pa_bench.backends import kernels as K

    return K.launch_build("v3", problem, kv_f16=True)


class V3F16(Peer):
    name = NAME
    summary = ("control: v3's consumer loop on fp16 K/V (the peers' values), its producer copying each "
               "tile into the swizzled stages by cp.async: no int8, no conversion")
    backends = ("cuda",)

    @classmethod
    def unavailable(cls, problem) -> str | None:
        why, cc = _device()
        return why or _reason(problem, cc)

    def __init__(self, inputs, device: str = "cuda"):
        super().__init__(inputs, device)
        why, cc = _device()
        why = why or _reason(inputs.problem, cc)
        if why:
            raise CannotRun(why)
        import cupy as cp

        from pa_bench.backends import kernels as K
        from pa_bench.numerics.model import segment_keys

        self.cp = cp
        pb = inputs.problem
        self.build = build_for(pb)                    # v3's own rows and consumer step (segments: below)
        rows = self.build.cta_rows
        fn, combine, smem, self.compiler = _build(cp, self.build, cc)
        if pb.layout == "paged":
            pk = inputs.paged
            self.k, self.v = _fp16_kv(cp, pk.k_pool, pk.v_pool, pk.k_scale_pool, pk.v_scale_pool)
            table = cp.asarray(pk.page_table, dtype=cp.int32)
            page_shift = int(math.log2(pb.page))
        else:
            self.k, self.v = _fp16_kv(cp, inputs.k_i8, inputs.v_i8, inputs.k_scale, inputs.v_scale)
            table = cp.zeros(1, dtype=cp.int32)
            page_shift = 0
        if self.k.size // pb.head_dim >= 2**32:       # kv_row indexes rows with 32 bits
            raise CannotRun(f"{NAME}: {self.k.size // pb.head_dim} K/V rows; the kernel indexes at most 2^32")
        q = cp.asarray(np.ascontiguousarray(inputs.q, dtype=np.float16))
        seg = segment_keys(pb.context, "v3", pb.queries, pb.heads_q, pb.heads_kv)   # v3's own rule
        self.geo = geo = K.launch_geometry("v3", pb.queries, pb.heads_q, pb.heads_kv, context=pb.context,
                                           segment_keys=seg, cta_rows=rows)
        self.out = cp.empty(pb.heads_q * pb.queries * pb.head_dim,
                            dtype=cp.float16 if pb.out_dtype == "float16" else cp.float32)
        part = cp.empty(max(K.workspace_floats(geo, pb.queries, pb.heads_q, pb.head_dim), 2), dtype=cp.float32)
        # v3's arguments; the scale pointers are not read (every K and V scale is 1.0, p_scale 1)
        args = (q, self.k, self.v, self.k, self.v, table, self.out,
                np.int32(pb.queries), np.int32(pb.context), np.int32(pb.heads_q), np.int32(pb.heads_kv),
                np.int32(page_shift), np.float32(inputs.qk_scale_log2), np.float32(1.0), np.float32(1.0),
                np.int32(0), np.int32(0), np.int32(0), part, np.int32(geo.segment_keys))
        grid, block = geo.grid, (geo.block,)
        if geo.segment_keys:
            cgrid, cblock = K.combine_geometry(pb.queries, pb.heads_q)
            cargs = (part, self.out, np.int32(pb.queries), np.int32(pb.context), np.int32(pb.heads_q),
                     np.int32(geo.segments), np.int32(geo.segment_keys), np.float32(1.0))

            def launch():
                fn(grid, block, args, shared_mem=smem)
                combine(cgrid, (cblock,), cargs)
        else:
            def launch():
                fn(grid, block, args, shared_mem=smem)
        self._launch = launch

    def call(self):
        return self._launch       # enqueues on CuPy's current stream, the one pa-bench times

    def output(self) -> np.ndarray:
        pb = self.inputs.problem
        self.out.fill(np.nan)     # an element the call leaves unwritten stays NaN
        self._launch()
        self.cp.cuda.get_current_stream().synchronize()
        return self.out.astype(self.cp.float32).get().reshape(pb.heads_q, pb.queries, pb.head_dim)

    def impl(self) -> str:
        return f"v3.cu -DPA_KV_F16=1 ({self.compiler})"

    def describe(self) -> dict:
        geo = self.geo
        return {"variant": NAME, "shape": self.inputs.problem.shape.label, "build": list(self.build.defines()),
                "compiler": self.compiler, "grid": list(geo.grid), "block": geo.block,
                "segment_keys": geo.segment_keys, "segments": geo.segments,
                "kv": "fp16 paged pool" if self.build.paged else "fp16 contiguous [Hkv, Nk, D]"}


def register() -> None:
    """Register ``v3-f16`` (once: loading the plug-in again leaves it as it is)."""
    if registry.find(NAME) is None:
        register_peer(V3F16)


register()

__all__ = ["V3F16", "NAME", "register"]
