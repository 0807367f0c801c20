"""v3's diagnostic builds, run as peers: the fp16 control ``v3-f16`` and the dq images ``v3-dq``.

Both are kernels/v3.cu at v3's own launch (``pa_bench.launch.choose("v3", problem)``: its CTA rows,
key segments with pa_combine after the kernel, and its consumer step), with another producer:

- ``v3-f16`` (``-DPA_KV_F16=1``, ``KernelBuild.kv_f16``), the control that says what int8 K/V costs
  v3: the same consumer warpgroups (wgmma, pingpong, the same tiles and order), and a producer that
  only copies each 64-key fp16 K and V tile into the swizzled stages (cp.async, no int8 staging, no
  conversion; where v3 takes 128-key steps, each pair of tiles' K and V into their own rings). It
  reads the fp16 K/V the torch peers read (``int8 * scale`` rounded to fp16, formed once per shape
  on the GPU), laid out as v3 reads the shape: the paged pool through the same page table, or
  contiguous. Its arithmetic is not the int8 numerics model: its error against FP64 is shown for
  information.
- ``v3-dq`` (``-DPA_V3_DQ=1``, ``KernelBuild.kv_images``): a first kernel, ``pa_v3_images``,
  converts every 64-key tile of every KV head into the exact fp16 stage v3's producer would store
  for it (K and V rows in their 128B-swizzled places, the premultiplied key and value scales), in
  global memory; then ``pa_v3`` runs with a producer that brings each tile's image with one bulk
  copy (the TMA unit) and does nothing else. The consumers are v3's, on the same bytes, so the
  output is v3's, bit for bit; what changes is where the conversion's shared-memory traffic
  happens (docs/PERF_NOTES.md: beside wgmma, the LSU's work adds to a step's time). The images take
  Hkv x ceil(Nk / 64) x 33,280 bytes at D = 128 (twice the int8 K/V), written and read back every
  call.

They run on sm_90 (the build is sm_90a), head_dim 64 or 128, with CuPy. Neither is registered by
default: each is a plug-in of its own, ``--plugin pa_bench.backends.v3_f16`` and ``--plugin
pa_bench.backends.v3_dq`` (or a config's ``plugins:``).
"""

from __future__ import annotations

import math

import numpy as np

from pa_bench import variants as registry
from pa_bench.backends import kernels as K
from pa_bench.launch import choose
from pa_bench.peers import CannotRun, Peer, register_peer

F16_NAME = "v3-f16"
DQ_NAME = "v3-dq"
HEAD_DIMS = (64, 128)      # what v3.cu builds
ARCH_CC = 90               # sm_90a only (wgmma, setmaxnreg)

_built: dict = {}          # KernelBuild -> its Compiled


def device_cc(name: str) -> tuple[str | None, int | None]:
    """(why there is no GPU to run on, None) or (None, the current GPU's compute capability); the
    reason names the peer ``name``."""
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


def refusal(problem, cc: int, name: str) -> str | None:
    """Why the peer ``name`` built from v3.cu cannot run ``problem`` on a GPU of compute
    capability ``cc``, or None."""
    if cc != ARCH_CC:
        return f"{name} needs sm_90a (wgmma, setmaxnreg), not sm_{cc}"
    if problem.head_dim not in HEAD_DIMS:
        return f"{name} has no head_dim {problem.head_dim} (it builds {' and '.join(map(str, HEAD_DIMS))})"
    group = problem.heads_q // problem.heads_kv
    if problem.heads_q % problem.heads_kv or group > 128:
        return f"{name} needs heads_kv to divide heads_q with at most 128 query heads per KV head"
    return None


def unavailable(problem, name: str) -> str | None:
    """Why the peer ``name`` cannot run ``problem`` here (no CuPy, no GPU, its refusal), or None."""
    why, cc = device_cc(name)
    return why or refusal(problem, cc, name)


def include_options(cp) -> tuple[str, ...]:
    """The CUDA headers (cuda_fp16.h) for NVRTC, where found."""
    import os

    try:
        root = cp.cuda.get_cuda_path()
    except Exception:
        root = None
    inc = os.path.join(root, "include") if root else None
    return (f"-I{inc}",) if inc and os.path.isdir(inc) else ()


def compiled(cp, build: K.KernelBuild, cc: int) -> dict:
    """``build``'s module, made once per process as the cuda backend builds v3 (NVRTC, nvcc to a
    cubin where NVRTC cannot): {"module", "kernel", "combine", "smem" (its dynamic shared memory,
    the kernel's limit raised to it), "compiler", and for an images build "image_bytes"}."""
    got = _built.get(build)
    if got is not None:
        return got
    arch = K.arch_options(build.variant, cc)
    try:
        mod = cp.RawModule(code=K.kernel_source(build.variant), options=build.options() + include_options(cp) + arch)
        fn = mod.get_function(build.function)
        compiler = "nvrtc"
    except Exception:
        import shutil

        if shutil.which("nvcc") is None:
            raise
        mod = cp.RawModule(path=str(K.nvcc_cubin(build, registry.get(build.variant).nvcc_arch(cc))))
        fn = mod.get_function(build.function)
        compiler = "nvcc"
    smem = probe_int(cp, mod, build.function + "_smem_bytes")
    fn.max_dynamic_shared_size_bytes = smem
    got = _built[build] = {"module": mod, "kernel": fn, "combine": mod.get_function("pa_combine"), "smem": smem,
                           "compiler": compiler}
    if build.kv_images:   # bytes of one tile's image
        got["image_bytes"] = probe_int(cp, mod, "pa_v3_image_bytes")
    return got


def probe_int(cp, mod, name: str) -> int:
    """What the module's one-thread kernel ``name`` writes to its int."""
    buf = cp.zeros(1, dtype=cp.int32)
    mod.get_function(name)((1,), (1,), (buf,))
    return int(buf.get()[0])


def build_for(problem, **producer) -> K.KernelBuild:
    """v3's build at its own launch on ``problem`` (its rows, and its consumer step: 128 keys where v3
    takes 128-key steps) with ``producer`` (kv_f16=True or kv_images=True), so that these builds run
    (or give the bits of) v3's consumer loop."""
    launch = choose("v3", problem)
    pb = problem
    return K.KernelBuild("v3", head_dim=pb.head_dim, paged=pb.layout == "paged", out_f16=pb.out_dtype == "float16",
                         cta_rows=launch.rows, step_keys=launch.step_keys, **producer)


def v3_geometry(problem, build: K.KernelBuild) -> K.LaunchGeometry:
    """The grid of v3's launch on ``problem`` (its segments, ``build``'s rows)."""
    pb = problem
    return K.launch_geometry("v3", pb.queries, pb.heads_q, pb.heads_kv, context=pb.context,
                             segment_keys=choose("v3", pb).segment_keys, cta_rows=build.cta_rows)


def out_buffer(cp, problem):
    pb = problem
    return cp.empty(pb.heads_q * pb.queries * pb.head_dim, dtype=cp.float16 if pb.out_dtype == "float16" else cp.float32)


class V3Build(Peer):
    """What the two builds share: the refusals, the output read back, the launch described."""

    backends = ("cuda",)

    @classmethod
    def unavailable(cls, problem) -> str | None:
        return unavailable(problem, cls.name)

    def _ready(self, inputs):
        """CuPy and the compute capability, or CannotRun with the reason."""
        why, cc = device_cc(self.name)
        why = why or refusal(inputs.problem, cc, self.name)
        if why:
            raise CannotRun(why)
        import cupy as cp

        return cp, cc

    def call(self):
        return self._launch       # enqueues on CuPy's current stream, the one pa-bench times

    def output(self) -> np.ndarray:
        pb = self.inputs.problem
        self.out.fill(np.nan)     # an element the call leaves unwritten stays NaN
        self._launch()
        self.cp.cuda.get_current_stream().synchronize()
        return self.out.astype(self.cp.float32).get().reshape(pb.heads_q, pb.queries, pb.head_dim)

    def describe(self) -> dict:
        geo = self.geo
        return {"variant": self.name, "shape": self.inputs.problem.shape.label, "build": list(self.build.defines()),
                "compiler": self.compiler, "grid": list(geo.grid), "block": geo.block,
                "segment_keys": geo.segment_keys, "segments": geo.segments}


class V3F16(V3Build):
    name = F16_NAME
    summary = ("control: v3's consumer loop on fp16 K/V (the peers' values), its producer copying each "
               "tile into the swizzled stages by cp.async: no int8, no conversion")

    def __init__(self, inputs, device: str = "cuda"):
        super().__init__(inputs, device)
        cp, cc = self._ready(inputs)
        self.cp = cp
        pb = inputs.problem
        self.build = build_for(pb, kv_f16=True)
        got = compiled(cp, self.build, cc)
        fn, combine, smem, self.compiler = got["kernel"], got["combine"], got["smem"], got["compiler"]
        if pb.layout == "paged":
            pk = inputs.paged
            self.k, self.v = fp16_kv(cp, pk.k_pool, pk.v_pool, pk.k_scale_pool, pk.v_scale_pool)
            table = cp.asarray(pk.page_table, dtype=cp.int32)
            page_shift = int(math.log2(pb.page))
        else:
            self.k, self.v = fp16_kv(cp, inputs.k_i8, inputs.v_i8, inputs.k_scale, inputs.v_scale)
            table = cp.zeros(1, dtype=cp.int32)
            page_shift = 0
        if self.k.size // pb.head_dim >= 2**32:       # kv_row indexes rows with 32 bits
            raise CannotRun(f"{self.name}: {self.k.size // pb.head_dim} K/V rows; the kernel indexes at most 2^32")
        q = cp.asarray(np.ascontiguousarray(inputs.q, dtype=np.float16))
        self.geo = geo = v3_geometry(pb, self.build)
        self.out = out_buffer(cp, pb)
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

    def impl(self) -> str:
        return f"v3.cu -DPA_KV_F16=1 ({self.compiler})"

    def describe(self) -> dict:
        return {**super().describe(), "kv": "fp16 paged pool" if self.build.paged else "fp16 contiguous [Hkv, Nk, D]"}


class V3DQ(V3Build):
    name = DQ_NAME
    summary = ("v3 with the int8 -> fp16 conversion in a pass before the kernel: fp16 stage images in "
               "global memory, one bulk copy a tile; v3's consumers, v3's bits")

    def __init__(self, inputs, device: str = "cuda"):
        super().__init__(inputs, device)
        cp, cc = self._ready(inputs)
        self.cp = cp
        pb = inputs.problem
        self.build = build_for(pb, kv_images=True)
        got = compiled(cp, self.build, cc)
        fn, combine, smem, self.compiler = got["kernel"], got["combine"], got["smem"], got["compiler"]
        images = got["module"].get_function("pa_v3_images")
        img_bytes = got["image_bytes"]
        if pb.layout == "paged":
            pk = inputs.paged
            k, v = cp.asarray(pk.k_pool), cp.asarray(pk.v_pool)
            ks, vs = cp.asarray(pk.k_scale_pool, dtype=cp.float32), cp.asarray(pk.v_scale_pool, dtype=cp.float32)
            table = cp.asarray(pk.page_table, dtype=cp.int32)
            page_shift = int(math.log2(pb.page))
        else:   # as the cuda backend prepares them (scale rows padded to 4 keys)
            k, v = cp.asarray(np.ascontiguousarray(inputs.k_i8)), cp.asarray(np.ascontiguousarray(inputs.v_i8))
            stride = (pb.keys + 3) // 4 * 4
            ks = cp.zeros((pb.heads_kv, stride), dtype=cp.float32)
            vs = cp.zeros((pb.heads_kv, stride), dtype=cp.float32)
            ks[:, : pb.keys] = cp.asarray(inputs.k_scale, dtype=cp.float32)
            vs[:, : pb.keys] = cp.asarray(inputs.v_scale, dtype=cp.float32)
            table = cp.zeros(1, dtype=cp.int32)
            page_shift = 0
        if k.size // pb.head_dim >= 2**32:
            raise CannotRun(f"{self.name}: {k.size // pb.head_dim} K/V rows; the kernel indexes at most 2^32")
        q = cp.asarray(np.ascontiguousarray(inputs.q, dtype=np.float16))
        tiles = -(-pb.keys // 64)
        self.images = cp.empty(pb.heads_kv * tiles * img_bytes, dtype=cp.uint8)
        self.geo = geo = v3_geometry(pb, self.build)
        self.out = out_buffer(cp, pb)
        part = cp.empty(max(K.workspace_floats(geo, pb.queries, pb.heads_q, pb.head_dim), 2), dtype=cp.float32)
        scalars = (np.int32(pb.queries), np.int32(pb.context), np.int32(pb.heads_q), np.int32(pb.heads_kv),
                   np.int32(page_shift), np.float32(inputs.qk_scale_log2), np.float32(inputs.p_scale),
                   np.float32(1.0 / inputs.p_scale), np.int32(ks.shape[-1]), np.int32(0), np.int32(0))
        iargs = (q, k, v, ks, vs, table, self.images) + scalars + (part, np.int32(0))
        args = (q, self.images, v, ks, vs, table, self.out) + scalars + (part, np.int32(geo.segment_keys))
        igrid, grid, block = (tiles, pb.heads_kv), geo.grid, (geo.block,)
        cgrid, cblock = K.combine_geometry(pb.queries, pb.heads_q)
        cargs = (part, self.out, np.int32(pb.queries), np.int32(pb.context), np.int32(pb.heads_q),
                 np.int32(geo.segments), np.int32(geo.segment_keys), np.float32(1.0 / inputs.p_scale))
        self._keep = (q, k, v, ks, vs, table, part)

        def pass_():
            images(igrid, (128,), iargs)

        def kernel():
            fn(grid, block, args, shared_mem=smem)
            if geo.segment_keys:
                combine(cgrid, (cblock,), cargs)

        def launch():
            pass_()
            kernel()
        self._launch = launch
        # the two halves apart, to time the pass and the kernel each alone
        self.parts = {"images": pass_, "kernel": kernel}

    def impl(self) -> str:
        return f"v3.cu -DPA_V3_DQ=1 ({self.compiler})"

    def describe(self) -> dict:
        return {**super().describe(), "images_bytes": int(self.images.nbytes)}


def fp16_kv(cp, k_i8, v_i8, k_scale, v_scale):
    """fp16(fp16(int8) * fp16(scale)) per element, as the torch peers form their K/V (the fp32
    product of two fp16 values is exact, so its rounding to fp16 gives the same bits)."""
    def f16(x8, sc):
        return cp.asarray(x8).astype(cp.float16) * cp.asarray(sc).astype(cp.float16)[..., None]

    return f16(k_i8, k_scale), f16(v_i8, v_scale)


def register(cls: type[V3Build]) -> None:
    """Register ``cls``'s variant (once: loading its plug-in again leaves it as it is)."""
    if registry.find(cls.name) is None:
        register_peer(cls)


__all__ = ["V3F16", "V3DQ", "V3Build", "F16_NAME", "DQ_NAME", "HEAD_DIMS", "ARCH_CC", "build_for", "register",
           "device_cc", "refusal", "unavailable", "compiled", "probe_int", "include_options", "fp16_kv", "v3_geometry"]
