"""``v3-dq``: v3 with its conversion in a pass of its own, before the kernel: the same bits.

kernels/v3.cu built with ``-DPA_V3_DQ=1`` (``KernelBuild.kv_images``). A first kernel,
``pa_v3_images``, converts every 64-key tile of every KV head into the exact fp16 stage v3's
producer would store for it (K and V rows in their 128B-swizzled places, the premultiplied key
and value scales), in global memory; then ``pa_v3`` runs with a producer that brings each tile's
image with one bulk copy (the TMA unit) and does nothing else. It takes v3's launch: its rows and,
where v3 takes 128-key consumer steps, those steps too (K and V of a pair of tiles brought apart:
kernels/v3_pairs.cuh), so its kernel alone times v3's consumer loop behind a copy-only producer.
The consumers are v3's, on the same bytes, so the output is v3's, bit for bit; what changes is
where the conversion's shared-memory traffic happens (docs/PERF_NOTES.md: beside wgmma, the LSU's
work adds to a step's time). The images take Hkv x ceil(Nk / 64) x 33,280 bytes at D = 128 (twice the int8 K/V), written
and read back every call.

Not registered by default: ``--plugin pa_bench.peers.v3_dq``. sm_90 only, head_dim 64 or 128, CuPy.
"""

from __future__ import annotations

import math

import numpy as np

from pa_bench import variants as registry
from pa_bench.peers import CannotRun, Peer, register_peer
from pa_bench.peers.v3_f16 import _device, _include_options, _reason

NAME = "v3-dq"

_built: dict = {}



def _build(cp, build, cc: int):
    """(pa_v3, pa_v3_images, pa_combine, dynamic shared memory, image bytes, compiler), once."""
    got = _built.get(build)
    if got is not None:
        return got
    from pa_bench.backends import kernels as K

    arch = K.arch_options(build.variant, cc)
    try:
        mod = cp.RawModule(code=K.kernel_source(build.variant), options=build.options() + _include_options(cp) + arch)
        fn = mod.get_function(build.function)
        compiler = "nvrtc"
    except Exception:
        import shutil

        if shutil.which("nvcc") is None:
            raise
        mod = cp.RawModule(path=str(K.nvcc_cubin(build, registry.get(build.variant).nvcc_arch(cc))))
        fn = mod.get_function(build.function)
        compiler = "nvcc"
    buf = cp.zeros(2, dtype=cp.int32)
    mod.get_function(build.function + "_smem_bytes")((1,), (1,), (buf[:1],))
    mod.get_function("pa_v3_image_bytes")((1,), (1,), (buf[1:],))
    smem, img_bytes = (int(x) for x in buf.get())
    fn.max_dynamic_shared_size_bytes = smem
    got = _built[build] = (fn, mod.get_function("pa_v3_images"), mod.get_function("pa_combine"), smem,
                           img_bytes, compiler)
    return got


def build_for(problem):
    """The build of v3 on images at v3's own launch on ``problem``: its rows, and its consumer step
    (64 keys, or 128 where v3 takes 128-key steps: model.step_keys), so that the bits are v3's."""
    from pa_bench.backends import kernels as K

    return K.launch_build("v3", problem, kv_images=True)


class V3DQ(Peer):
    name = NAME
    summary = ("v3 with the int8 -> fp16 conversion in a pass before the kernel: fp16 stage images in "
               "global memory, one bulk copy a tile; v3's consumers, v3's bits")
    backends = ("cuda",)

    @classmethod
    def unavailable(cls, problem) -> str | None:
        why, cc = _device(NAME)
        return why or _reason(problem, cc, NAME)

    def __init__(self, inputs, device: str = "cuda"):
        super().__init__(inputs, device)
        why, cc = _device(NAME)
        why = why or _reason(inputs.problem, cc, NAME)
        if why:
            raise CannotRun(why)
        import cupy as cp

        from pa_bench.backends import kernels as K
        from pa_bench.numerics.model import segment_keys

        self.cp = cp
        pb = inputs.problem
        self.build = build_for(pb)                    # v3's own rows and consumer step (segments: below)
        rows = self.build.cta_rows
        fn, images, combine, smem, img_bytes, self.compiler = _build(cp, self.build, cc)
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
            raise CannotRun(f"{NAME}: {k.size // pb.head_dim} K/V rows; the kernel indexes at most 2^32")
        q = cp.asarray(np.ascontiguousarray(inputs.q, dtype=np.float16))
        tiles = -(-pb.keys // 64)
        self.images = cp.empty(pb.heads_kv * tiles * img_bytes, dtype=cp.uint8)
        seg = segment_keys(pb.context, "v3", pb.queries, pb.heads_q, pb.heads_kv)
        self.geo = geo = K.launch_geometry("v3", pb.queries, pb.heads_q, pb.heads_kv, context=pb.context,
                                           segment_keys=seg, cta_rows=rows)
        self.out = cp.empty(pb.heads_q * pb.queries * pb.head_dim,
                            dtype=cp.float16 if pb.out_dtype == "float16" else cp.float32)
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

    def call(self):
        return self._launch

    def output(self) -> np.ndarray:
        pb = self.inputs.problem
        self.out.fill(np.nan)
        self._launch()
        self.cp.cuda.get_current_stream().synchronize()
        return self.out.astype(self.cp.float32).get().reshape(pb.heads_q, pb.queries, pb.head_dim)

    def impl(self) -> str:
        return f"v3.cu -DPA_V3_DQ=1 ({self.compiler})"

    def describe(self) -> dict:
        geo = self.geo
        return {"variant": NAME, "shape": self.inputs.problem.shape.label, "build": list(self.build.defines()),
                "compiler": self.compiler, "grid": list(geo.grid), "block": geo.block,
                "segment_keys": geo.segment_keys, "segments": geo.segments,
                "images_bytes": int(self.images.nbytes)}


def register() -> None:
    if registry.find(NAME) is None:
        register_peer(V3DQ)


register()

__all__ = ["V3DQ", "NAME", "register"]
