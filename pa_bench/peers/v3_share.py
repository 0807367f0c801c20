"""``v3-share``: v3 with each K/V tile converted once for all the CTAs that read it: the same bits.

kernels/v3.cu built with ``-DPA_V3_SHARE=1`` (``KernelBuild.kv_shared``). v3's CTAs of one KV head
and key segment (its row blocks) read the same tiles, and each of v3's producers converts every
tile it reads. Here one CTA converts each tile (a ticket counter per KV head and segment) into the
exact fp16 stage image v3's producer would store (K and V rows in their 128B-swizzled places, the
premultiplied key and value scales), in global memory, and every CTA brings each tile's image into
its stage with one bulk copy (the TMA unit). Which CTA converts a tile: the next to take a ticket
of its KV head and segment, within a few tiles of its own position (kernels/v3.cu, PA_V3_SHARE). The consumers are v3's on the same bytes, so the
output is v3's, bit for bit; what changes is the shared-memory traffic of the conversion, paid once
per tile and KV range instead of once per CTA (docs/PERF_NOTES.md). One launch: the images and
flags live in a workspace the peer holds (Hkv x ceil(Nk / 64) x 33,280 bytes at D = 128, twice the
int8 K/V, beside the segment workspace); the flags and counters are stamped with a launch count, never cleared.

Checked on an H200: v3's bits on every one of 12 launches of six cases (tests/gpu/test_v3_share_gpu.py),
memcheck and synccheck clean; racecheck reports hazards, most likely the converters' unsynchronised
read of the issuer's progress count (a pacing hint by design), not yet ruled out as the only ones.
Not registered by default: ``--plugin pa_bench.peers.v3_share``. sm_90 only, head_dim 64 or 128, CuPy.
"""

from __future__ import annotations

import math

import numpy as np

from pa_bench import variants as registry
from pa_bench.peers import CannotRun, Peer, register_peer
from pa_bench.peers.v3_f16 import _device, _reason

NAME = "v3-share"

_built: dict = {}



def workspace_bytes(seg_floats: int, heads_kv: int, tiles: int, image_bytes: int, segments: int) -> int:
    """Bytes of the workspace (the kernel's share_base): the segment floats, up to 1,024 bytes of
    alignment, the images [Hkv][tiles], a u32 flag per image, up to 8 bytes of alignment, then a
    u64 ticket counter per KV head and segment."""
    return 4 * seg_floats + 1024 + heads_kv * tiles * (image_bytes + 4) + 8 + 8 * heads_kv * segments


def _build(cp, build, cc: int):
    """(pa_v3, pa_combine, dynamic shared memory, image bytes, compiler), once per build."""
    got = _built.get(build)
    if got is not None:
        return got
    from pa_bench.backends import kernels as K
    from pa_bench.peers.v3_f16 import _include_options

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
    got = _built[build] = (fn, mod.get_function("pa_combine"), smem, img_bytes, compiler)
    return got


class V3Share(Peer):
    name = NAME
    summary = ("v3 with each K/V tile converted once per KV range, by the CTA that takes its ticket, into an fp16 "
               "stage image the others bring in by one bulk copy; v3's consumers, v3's bits")
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
        rows = K.launch_rows("v3", pb)
        self.build = K.KernelBuild("v3", head_dim=pb.head_dim, paged=pb.layout == "paged",
                                   out_f16=pb.out_dtype == "float16", kv_shared=True, cta_rows=rows)
        fn, combine, smem, img_bytes, self.compiler = _build(cp, self.build, cc)
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
        seg = segment_keys(pb.context, "v3", pb.queries, pb.heads_q, pb.heads_kv)
        self.geo = geo = K.launch_geometry("v3", pb.queries, pb.heads_q, pb.heads_kv, context=pb.context,
                                           segment_keys=seg, cta_rows=rows)
        self.out = cp.empty(pb.heads_q * pb.queries * pb.head_dim,
                            dtype=cp.float16 if pb.out_dtype == "float16" else cp.float32)
        seg_floats = K.workspace_floats(geo, pb.queries, pb.heads_q, pb.head_dim)
        # zeroed once: flags and counters start below any launch's epoch (>= 1)
        self.work = cp.zeros(-(-workspace_bytes(seg_floats, pb.heads_kv, tiles, img_bytes, geo.segments) // 4), dtype=cp.float32)
        head = (q, k, v, ks, vs, table, self.out, np.int32(pb.queries), np.int32(pb.context), np.int32(pb.heads_q),
                np.int32(pb.heads_kv), np.int32(page_shift), np.float32(inputs.qk_scale_log2),
                np.float32(inputs.p_scale), np.float32(1.0 / inputs.p_scale), np.int32(ks.shape[-1]))
        tail = (np.int32(0), self.work, np.int32(geo.segment_keys))   # split_keys, part, seg_keys
        grid, block = geo.grid, (geo.block,)
        cgrid, cblock = K.combine_geometry(pb.queries, pb.heads_q)
        cargs = (self.work, self.out, np.int32(pb.queries), np.int32(pb.context), np.int32(pb.heads_q),
                 np.int32(geo.segments), np.int32(geo.segment_keys), np.float32(1.0 / inputs.p_scale))
        self._keep = (q, k, v, ks, vs, table)
        self.epoch = 0

        def launch():
            self.epoch += 1                  # Args::pair_heads: the launch's epoch (a published flag holds it)
            if self.epoch >= 2**31:
                raise CannotRun(f"{NAME}: 2^31 launches on one workspace")
            fn(grid, block, head + (np.int32(self.epoch),) + tail, shared_mem=smem)
            if geo.segment_keys:
                combine(cgrid, (cblock,), cargs)
        self._launch = launch

    def call(self):
        return self._launch

    def output(self) -> np.ndarray:
        pb = self.inputs.problem
        self.out.fill(np.nan)
        self._launch()
        self.cp.cuda.get_current_stream().synchronize()
        return self.out.astype(self.cp.float32).get().reshape(pb.heads_q, pb.queries, pb.head_dim)

    def impl(self) -> str:
        return f"v3.cu -DPA_V3_SHARE=1 ({self.compiler})"

    def describe(self) -> dict:
        geo = self.geo
        return {"variant": NAME, "shape": self.inputs.problem.shape.label, "build": list(self.build.defines()),
                "compiler": self.compiler, "grid": list(geo.grid), "block": geo.block,
                "segment_keys": geo.segment_keys, "segments": geo.segments,
                "workspace_bytes": int(self.work.nbytes)}


def register() -> None:
    if registry.find(NAME) is None:
        register_peer(V3Share)


register()

__all__ = ["V3Share", "NAME", "register", "workspace_bytes"]
