"""The triton variant's kernel (kernels/triton_pa.py) on the CPU, through Triton's interpreter
(TRITON_INTERPRET=1): paged and contiguous layouts, GQA (packed and odd groups), a ragged 113-row
chunk over 1023 keys, a first chunk with no context, fp16 output and key segments, each judged
against the FP64 reference by the parity rule with the numerics model of 64-key tiles. Every
structure switch (conversion, load path, transposed K, loop stages, warp specialisation) gives the
default configuration's bits on paged (16- and 64-key pages) and contiguous layouts, D 64 and 128,
ragged tails and GQA; tiles over several whole pages (``tile`` on pages smaller than a tile) give
the bits of a table entry per key; 128-key tiles meet the model of 128-key tiles; the PTX
conversion, which the interpreter cannot run, is replayed from its constants. Also: configuration
names, candidates and how a configuration is chosen (override, table, cache, default), and the
tile size the numerics model of a run follows (the cuda backend's ``tile_keys``: a configuration's ``block_n``), through
the runner on a numpy backend posing as the cuda backend.

Needs ``pip install 'pa-bench[triton]'`` (triton and torch); skipped with the reason otherwise.
Shapes are tiny: the interpreter runs every program op by op in NumPy.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pa_bench.backends import triton_runner
from pa_bench.backends.base import KernelOutput
from pa_bench.backends.cuda import CudaBackend
from pa_bench.backends.numpy import NumpyBackend
from pa_bench.numerics.metrics import error_metrics, judge_parity, parity_floor
from pa_bench.launch import Device
from pa_bench.numerics.model import model_attention
from pa_bench.numerics.reference import reference_attention
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape

_reason = triton_runner.unavailable_reason(need_gpu=False)
if _reason:
    pytest.skip(_reason, allow_module_level=True)

import torch  # noqa: E402

GUARD = 256
CANARY = -12345.0


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _problem(shape, layout="paged", hq=2, hkv=1, d=64, page=16, out="float32", data="normal"):
    return Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, layout=layout, page=page,
                   data=data, seed=3, out_dtype=out)


def _run(inputs, seg_keys=None, config=None):
    """The kernel's output [Hq, Nq, D] (float32) and whether the guards after it are intact."""
    pb = inputs.problem
    var = triton_runner.TritonVariant(inputs, device="cpu", config=config)
    if seg_keys is not None:   # a short segment, so that a tiny shape has several
        mod = var.mod
        var.launch = mod.plan_launch(
            queries=pb.queries, context=pb.context, heads_q=pb.heads_q, heads_kv=pb.heads_kv,
            head_dim=pb.head_dim, paged=pb.layout == "paged", page=pb.page,
            kv_stride=int(var.t["k"].shape[1]) if pb.layout != "paged" else 0,
            scale_stride=int(var.t["ks"].shape[-1]) if pb.layout != "paged" else 0, seg_keys=seg_keys,
            qk_scale_log2=inputs.qk_scale_log2, p_scale=inputs.p_scale, config=var.config)
        assert var.launch.constants["SEGMENTED"]
    n = pb.heads_q * pb.queries * pb.head_dim
    dtype = torch.float16 if pb.out_dtype == "float16" else torch.float32
    out = torch.full((n + GUARD,), CANARY, dtype=dtype)
    var.launcher(out)()
    body = out[:n].float().numpy().reshape(pb.heads_q, pb.queries, pb.head_dim)
    guards_ok = bool((out[n:] == CANARY).all())
    return body, guards_ok


def _check(inputs, out, guards_ok):
    pb = inputs.problem
    ref = reference_attention(inputs.q, inputs.k_i8, inputs.v_i8, pb.context, pb.softmax_scale,
                              k_scale=inputs.k_scale, v_scale=inputs.v_scale)
    model = model_attention(inputs, triton_runner.tile_keys())
    kern, mod = error_metrics(out, ref), error_metrics(model, ref)
    ok, why = judge_parity(kern["max_abs_err"], mod["max_abs_err"], parity_floor(ref), kern["nan_inf"], guards_ok)
    assert kern["nan_inf"] == 0 and guards_ok
    assert ok, f"triton {kern['max_abs_err']:.3e} vs model {mod['max_abs_err']:.3e}: {why}"
    return out, mod["max_abs_err"]


def test_tile_keys_is_the_kernels_block_n():
    assert triton_runner.tile_keys() == triton_runner.kernel_module().BLOCK_N == 64
    from pa_bench import variants

    entry = variants.find("triton")
    if entry is not None:
        assert entry.tile_keys == triton_runner.tile_keys() and entry.is_kernel


@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_ragged_gqa_chunk(layout):
    """113 rows over 1023 keys of context, two query heads per KV head packed into a program;
    pages of 16 keys, so every 64-key tile gathers four shuffled pages."""
    inputs = make_inputs(_problem("1023x113", layout))
    out, _ = _check(inputs, *_run(inputs))
    model = model_attention(inputs, triton_runner.tile_keys())
    assert np.abs(out - model).max() < 1e-5   # the same arithmetic up to the order of fp32 sums


def test_first_chunk_odd_group_fp16_out():
    """No context (0x40), three query heads per KV head (a group that is no power of two, so a
    program leaves M slots empty), fp16 output."""
    inputs = make_inputs(_problem("0x40", "paged", hq=6, hkv=2, out="float16", data="realistic"))
    _check(inputs, *_run(inputs))


def test_empty_chunk_launches_nothing():
    inputs = make_inputs(_problem("100x1"))
    var = triton_runner.TritonVariant(inputs, device="cpu")
    assert var.launch.grid[1] == 1
    mod = var.mod
    zero = mod.plan_launch(queries=0, context=100, heads_q=2, heads_kv=1, head_dim=64, paged=True, page=16,
                           kv_stride=0, scale_stride=0, seg_keys=0, qk_scale_log2=1.0, p_scale=1.0,
                           config=mod.Config())
    assert zero.grid[1] == 0 and mod.launcher(zero, *[None] * 7)() is None


def test_key_segments_merge_to_the_same_answer():
    """Segments of 128 keys (the real rule uses 65,536) merged in order: the parity rule still
    holds, and the result differs from the unsegmented one by no more than the model's error
    (P is rounded to fp16 against each segment's own running max)."""
    inputs = make_inputs(_problem("300x50", "contiguous", hq=2, hkv=1))
    seg, model_err = _check(inputs, *_run(inputs, seg_keys=128))
    whole, _ = _run(inputs)
    assert 0 < np.abs(seg - whole).max() <= 2 * model_err


def test_heads_packed_and_default_config():
    mod = triton_runner.kernel_module()
    assert mod.heads_packed(4, 128) == 4 and mod.heads_packed(8, 64) == 4 and mod.heads_packed(3, 128) == 3
    assert mod.heads_packed(1, 128) == 1 and mod.heads_packed(16, 128) == 8
    # 64Kx512 with 32/8 heads on 132 SMs: 8 x 16 programs of 128 rows is under two per SM
    assert mod.default_config(128, 4, 512, 32, sm_count=132).block_m == 64
    assert mod.default_config(128, 4, 1024, 32, sm_count=132).block_m == 128
    with pytest.raises(ValueError, match="seg_keys"):
        mod.plan_launch(queries=8, context=0, heads_q=1, heads_kv=1, head_dim=64, paged=False, page=16,
                        kv_stride=8, scale_stride=8, seg_keys=100, qk_scale_log2=1.0, p_scale=1.0,
                        config=mod.Config())


# --------------------------------------------------------------------------- structure switches

# (shape, layout, hq, hkv, d, page): ragged tails (contexts and chunks off the tile and page sizes), GQA
SWITCH_CASES = {
    "paged64-d64-gqa": ("200x70", "paged", 4, 2, 64, 64),
    "paged16-d128": ("100x37", "paged", 2, 1, 128, 16),
    "paged128-d64-gqa": ("170x60", "paged", 6, 2, 64, 128),      # two tiles per page, a group of 3
    "contig-d128-gqa": ("130x50", "contiguous", 4, 1, 128, 64),
}
# every switch value the interpreter runs (the asm conversion is replayed below), at m64-w4-s3
SWITCHES = ["m64-w4-s3-bits-gather", "m64-w4-s3-cast-gather-kt", "m64-w4-s3-bits-gather-ls5-ws",
            "m64-w4-s3-bits-tile", "m64-w4-s3-cast-tile-kt", "m64-w4-s3-bits-tma", "m64-w4-s3-cast-tma-kt",
            "m64-w4-s5-bits-tile-ws", "m64-w4-s5-bits-tma-r168", "m64-w4-s3-bits-tile-dh", "m64-w4-s3-cast-gather-dh"]


def _reference(inputs):
    pb = inputs.problem
    return reference_attention(inputs.q, inputs.k_i8, inputs.v_i8, pb.context, pb.softmax_scale,
                               k_scale=inputs.k_scale, v_scale=inputs.v_scale)


@pytest.mark.parametrize("case", list(SWITCH_CASES))
def test_every_switch_gives_the_default_bits(case):
    shape, layout, hq, hkv, d, page = SWITCH_CASES[case]
    inputs = make_inputs(_problem(shape, layout, hq=hq, hkv=hkv, d=d, page=page))
    mod = triton_runner.kernel_module()
    base, ok = _run(inputs, config=mod.Config(64, 4, 3))
    _check(inputs, base, ok)
    ran = 0
    for name in SWITCHES:
        cfg = mod.Config.parse(name)
        why = cfg.unsupported(paged=layout == "paged", page=page)
        if why:   # 16-key pages: `tile` spans four pages of a 64-key tile, `tma` needs whole tiles
            assert page % 64 and cfg.loads == "tma" and "multiple of 64" in why
            continue
        out, guards = _run(inputs, config=cfg)
        assert guards and np.array_equal(out.view(np.uint32), base.view(np.uint32)), name
        ran += 1
    assert ran == (8 if page == 16 else len(SWITCHES))


def test_switches_with_key_segments():
    """Segments of 128 keys on 64-key pages: the tile and descriptor loads give the default's bits."""
    inputs = make_inputs(_problem("300x50", "paged", hq=2, hkv=1, page=64))
    mod = triton_runner.kernel_module()
    base, _ = _run(inputs, seg_keys=128, config=mod.Config(64, 4, 3))
    for name in ("m64-w4-s3-bits-tile", "m64-w4-s3-bits-tma-kt"):
        out, guards = _run(inputs, seg_keys=128, config=mod.Config.parse(name))
        assert guards and np.array_equal(out.view(np.uint32), base.view(np.uint32)), name


@pytest.mark.parametrize("layout,page,name", [("paged", 128, "m64-w4-s3-bits-tile-n128"),
                                              ("paged", 128, "m128-w8-s5-bits-tile-n128"),
                                              ("paged", 64, "m128-w8-s5-bits-tile-n128"),
                                              ("paged", 32, "m64-w4-s3-cast-tile-kt-n128"),
                                              ("paged", 16, "m64-w4-s3-cast-gather-n128"),
                                              ("contiguous", 64, "m64-w4-s3-bits-tma-n128"),
                                              ("contiguous", 64, "m128-w8-s4-bits-tma-n128")])
def test_128_key_tiles_meet_the_model_of_128_key_tiles(layout, page, name):
    """128-key tiles (at 64 rows x 4 warps and 128 rows x 8 warps; the PTX conversion replaced by
    the bit conversion; `tile` in one page of 128 keys, over two of 64 and four of 32): parity
    against FP64 with the model of 128-key tiles, whose error the kernel's is, and whose outputs
    it follows (not those of the 64-key model)."""
    inputs = make_inputs(_problem("300x45", layout, hq=2, hkv=1, page=page))
    mod = triton_runner.kernel_module()
    cfg = mod.Config.parse(name)
    assert cfg.block_n == 128 and not cfg.same_arithmetic
    out, guards = _run(inputs, config=cfg)
    assert _meets_the_128_key_model(inputs, out, guards) < 1e-5   # the same arithmetic up to fp32 sum order


def _meets_the_128_key_model(inputs, out, guards):
    """Parity with the model of 128-key tiles, at its error, nearer its outputs than the 64-key
    model's; returns the largest difference from its outputs."""
    ref = _reference(inputs)
    err = error_metrics(out, ref)["max_abs_err"]
    model128, model64 = model_attention(inputs, 128), model_attention(inputs, 64)
    err128 = error_metrics(model128, ref)["max_abs_err"]
    ok, why = judge_parity(err, err128, parity_floor(ref), 0, guards)
    assert ok, why
    assert abs(err / err128 - 1) < 1e-3                       # the kernel's error is the model's
    near = np.abs(out - model128).max()                       # the 128-key model's arithmetic ...
    assert np.abs(out - model64).max() > 4 * near             # ... not the 64-key one's
    return near


@pytest.mark.parametrize("page", [64, 32, 16])
def test_tiles_over_several_pages_give_the_bits_of_a_table_entry_per_key(page):
    """`tile` on pages smaller than a tile: 128-key tiles over two, four or eight whole pages and
    64-key tiles over one, two or four, with transposed K, at 128 rows x 8 warps, and in 128-key
    segments: bitwise the output of `gather` at the same tile size and launch (the 128-key one at
    parity with the model of 128-key tiles). 295 keys: the last 128-key tile reaches pages past
    the last key, which have no page-table entry (ceil(295 / page) of them)."""
    inputs = make_inputs(_problem("250x45", "paged", hq=4, hkv=2, page=page))
    entries = len(inputs.paged.page_table)
    assert entries == -(-295 // page) and entries * page < 3 * 128     # the third tile outruns the table
    mod = triton_runner.kernel_module()
    for block_n, tiles in ((128, ("m64-w4-s3-bits-tile-n128", "m64-w4-s3-cast-tile-kt-n128", "m128-w8-s5-bits-tile-n128")),
                           (64, ("m64-w4-s3-bits-tile", "m64-w4-s3-cast-tile-kt", "m128-w8-s5-bits-tile"))):
        wide = "-n128" if block_n == 128 else ""
        base, ok = _run(inputs, config=mod.Config.parse(f"m64-w4-s3-bits-gather{wide}"))
        if block_n == 128:
            _meets_the_128_key_model(inputs, base, ok)
        else:
            _check(inputs, base, ok)
        for name in tiles:
            cfg = mod.Config.parse(name)
            var = triton_runner.TritonVariant(inputs, device="cpu", config=cfg)
            assert var.launch.constants["TILE_PAGE"] == max(1, block_n // page) == cfg.tile_pages(paged=True, page=page)
            out, guards = _run(inputs, config=cfg)
            # rows per program may move the last bits: against gather at this launch
            want = base if cfg.block_m == 64 else _run(inputs, config=replace(cfg, loads="gather", k_trans=False))[0]
            assert guards and np.array_equal(out.view(np.uint32), want.view(np.uint32)), name
        seg_base, _ = _run(inputs, seg_keys=128, config=mod.Config.parse(f"m64-w4-s3-bits-gather{wide}"))
        seg, guards = _run(inputs, seg_keys=128, config=mod.Config.parse(tiles[0]))
        assert guards and np.array_equal(seg.view(np.uint32), seg_base.view(np.uint32))


def _asm_replay(words: np.ndarray) -> np.ndarray:
    """kernels/triton_pa.py's PTX conversion on 32-bit words of four int8, from its constants:
    xor, two byte permutes (prmt.b32 d, a, b, sel: byte k of d = byte sel[4k+3:4k] of {b, a}),
    two fp16x2 subtractions. Returns float16 [4 * len(words)], element 0 first."""
    mod = triton_runner.kernel_module()
    t = words.astype(np.uint64) ^ mod.ASM_SIGN
    pool = (np.uint64(mod.ASM_HIGH) << np.uint64(32)) | t                  # bytes 0-3: t, 4-7: 0x64...
    halves = []
    for sel in mod.ASM_SELECT:
        d = np.zeros_like(t)
        for k in range(4):
            src = (sel >> (4 * k)) & 0x7
            d |= ((pool >> np.uint64(8 * src)) & np.uint64(0xFF)) << np.uint64(8 * k)
        bits = d.astype(np.uint32).view(np.uint16).reshape(-1, 2)          # little endian: low half first
        bias = np.array([mod.ASM_BIAS & 0xFFFF, mod.ASM_BIAS >> 16], dtype=np.uint16).view(np.float16)
        halves.append(bits.view(np.float16) - bias)                        # exact: fp16 rounding never acts
    return np.concatenate(halves, axis=1).reshape(-1)


def test_asm_conversion_replayed_from_its_constants():
    """Every int8 value, four per word in every position, converts exactly; the PTX holds the
    constants the replay uses."""
    mod = triton_runner.kernel_module()
    values = np.arange(-128, 128, dtype=np.int8)
    words = np.concatenate([np.roll(values, k) for k in range(4)]).view(np.uint32)
    got = _asm_replay(words)
    want = np.concatenate([np.roll(values, k) for k in range(4)]).astype(np.float16)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    asm = str(mod.I8_TO_F16_ASM.value)
    for const in (mod.ASM_SIGN, mod.ASM_HIGH, mod.ASM_BIAS, *mod.ASM_SELECT):
        assert f"{const:#x}" in asm
    assert asm.count("prmt.b32") == 2 and asm.count("sub.rn.f16x2") == 2


def test_asm_conversion_is_not_run_by_the_interpreter():
    mod = triton_runner.kernel_module()
    assert "asm" not in mod.INTERPRETER_CONVERTS and set(mod.INTERPRETER_CONVERTS) < set(mod.CONVERTS)
    inputs = make_inputs(_problem("10x16"))
    with pytest.raises(Exception, match="inline_asm not supported"):   # wrapped in InterpreterError
        _run(inputs, config=mod.Config(64, 4, 3, convert="asm"))


# --------------------------------------------------------------------------- configurations


def test_config_names_round_trip_and_bad_ones_are_refused():
    mod = triton_runner.kernel_module()
    names = set()
    for d, paged, page, q in ((128, True, 64, 1024), (128, True, 64, 512), (64, False, 64, 300), (64, True, 16, 2000)):
        for cfg in mod.candidates(head_dim=d, paged=paged, page=page, queries=q, heads_q=32, heads_kv=8,
                                  sm_count=132, full=True):
            assert mod.Config.parse(cfg.name) == cfg
            names.add(cfg.name)
    assert len(names) > 30
    for bad in ("m64-w4", "m64-w4-s3-fast-gather", "m64-w4-s3-asm-tile-zz", "x64-w4-s3-asm-tile", "m64-w4-s3-asm-tile-n100",
                "m64-w4-s3-asm-tile-r8", "m64-w4-s3-asm-tile-r168-kt", "m64-w4-s3-asm-tma-dh", "m64-w4-s3-asm-tile-kt-dh",
                "m64-w4-s3-asm-tile-dh-n128"):
        with pytest.raises(ValueError, match="not a triton configuration name"):
            mod.Config.parse(bad)
    with pytest.raises(ValueError, match="convert"):
        mod.Config(convert="fast")
    with pytest.raises(ValueError, match="d_halves"):
        mod.Config(loads="tma", d_halves=True)
    assert mod.Config.parse("m64-w4-s3-asm-tile-n128-dh").d_halves
    assert "multiple of 64" in mod.Config(loads="tma").unsupported(paged=True, page=16)
    assert "multiple of 128" in mod.Config(loads="tma", block_n=128).unsupported(paged=True, page=64)
    assert mod.Config(loads="tma").unsupported(paged=False, page=16) is None
    # `tile`: pages that hold whole tiles, or that a tile spans whole, of at least MIN_TILE_PAGE keys
    assert mod.MIN_TILE_PAGE == 16
    for block_n, page, pages in ((64, 64, 1), (64, 256, 1), (64, 16, 4), (128, 64, 2), (128, 32, 4), (128, 16, 8)):
        cfg = mod.Config(loads="tile", block_n=block_n)
        assert cfg.unsupported(paged=True, page=page) is None and cfg.tile_pages(paged=True, page=page) == pages
    assert mod.Config(loads="gather").tile_pages(paged=True, page=16) == 0
    assert mod.Config(loads="tile").tile_pages(paged=False, page=16) == 0
    assert "at least 16 keys" in mod.Config(loads="tile", block_n=128).unsupported(paged=True, page=8)
    with pytest.raises(ValueError, match="multiple of 64 keys or a divisor of it of at least 16 keys, not 8"):
        mod.plan_launch(queries=8, context=0, heads_q=1, heads_kv=1, head_dim=64, paged=True, page=8,
                        kv_stride=0, scale_stride=0, seg_keys=0, qk_scale_log2=1.0, p_scale=1.0,
                        config=mod.Config(loads="tile"))


def test_candidates_cover_every_switch():
    mod = triton_runner.kernel_module()
    kw = dict(head_dim=128, paged=True, page=64, heads_q=32, heads_kv=8, sm_count=132)
    for q in (1024, 512, 256):
        full = mod.candidates(queries=q, full=True, **kw)
        small = mod.candidates(queries=q, **kw)
        default = mod.default_config(128, 4, q, 32, 132)
        assert full[0] == small[0] == default and len(set(full)) == len(full)
        assert set(small) <= set(full) and all(c.same_arithmetic for c in small) and 4 <= len(small) <= 8
        assert {c.convert for c in full} == set(mod.CONVERTS) and {c.loads for c in full} == set(mod.LOADS)
        assert any(c.k_trans for c in full) and any(c.loop_stages for c in full)
        assert not any(c.warp_specialize for c in full)   # Triton 3.6 cannot compile it on sm_90
        assert mod.Config.parse("m128-w8-s3-asm-tile-ws").warp_specialize   # still a switch
        assert any(c.maxnreg for c in small) and mod.Config.parse("m64-w4-s5-asm-tma-r168").maxnreg == 168
        wide = [c for c in full if not c.same_arithmetic]
        assert {c.block_n for c in wide} == {128} and {c.convert for c in wide} == {"asm"}
        # 128 rows x 8 warps at both pipeline depths; a 128-key tile spans two 64-key pages: `tile`
        # (two table entries per tile) like the 64-key tiles' `tile`, no descriptors
        assert {(c.num_stages, c.loads) for c in wide if (c.block_m, c.num_warps) == (128, 8)} == {(5, "tile"), (7, "tile")}
        assert {c.loads for c in wide} == {"tile"} and any(c.block_m == 64 for c in wide)
        assert {c.num_stages for c in small if c.loads != "gather"} >= {mod.deep_stages(True)[0]}
        # at D=128 the split key rows, 64-key tiles in the small set, both tile sizes in the full one
        assert any(c.d_halves for c in small) and {c.block_n for c in full if c.d_halves} == {64, 128}
        assert all(c.loads != "tma" and not c.k_trans for c in full if c.d_halves)
    descs = ["tma"] if mod.has_tensor_descriptors() else []
    for layout, want in ((dict(page=128), [(st, ld) for st in (5, 7) for ld in ["tile"] + descs]),
                         (dict(paged=False), [(st, ld) for st in (3, 4) for ld in ["gather"] + descs])):
        full = mod.candidates(queries=1024, full=True, **(kw | layout))
        wide = [(c.num_stages, c.loads) for c in full
                if (c.block_m, c.num_warps, c.block_n, c.d_halves) == (128, 8, 128, False)]
        assert wide == want and all(c.convert == "asm" for c in full if c.block_n == 128)
    for small in (16, 32):   # tiles over four or eight pages: a switch, no candidate
        assert {c.loads for c in mod.candidates(queries=1024, full=True, **(kw | {"page": small}))} == {"gather"}
    assert mod.deep_stages(True) == (5, 7) and mod.deep_stages(False) == (3, 4)


def _pb(shape="32Kx1024", layout="paged", page=64, d=128, out="float32"):
    return Problem(parse_shape(shape), heads_q=32, heads_kv=8, head_dim=d, layout=layout, page=page, out_dtype=out)


def test_problem_classes_and_cache_paths(tmp_path, monkeypatch):
    pc = triton_runner.problem_class
    assert pc(_pb()) == "d128-h32.8-paged64-q1024-k65536"
    assert pc(_pb("64Kx512")) == "d128-h32.8-paged64-q512-k131072"
    assert pc(_pb("0x1536")) == "d128-h32.8-paged64-q2048-k2048"
    assert pc(_pb("2.1Kx256")) == "d128-h32.8-paged64-q256-k4096"
    assert pc(_pb("100Kx64", "contiguous", d=64, out="float16")) == "d64-h32.8-contig-q64-k131072-f16-seg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = triton_runner.cache_path("NVIDIA H200 (rev 2)/x")
    assert path.parent == tmp_path / "pa-bench" / "triton" and path.name == "NVIDIA_H200_rev_2_x.json"
    triton_runner.write_cache("G", "k1", {"config": "m64-w4-s3-bits-tile"})
    triton_runner.write_cache("G", "k2", {"config": "m128-w8-s3-cast-gather"})
    assert triton_runner.read_cache("G") == {"k1": {"config": "m64-w4-s3-bits-tile"},
                                             "k2": {"config": "m128-w8-s3-cast-gather"}}
    key = triton_runner.cache_key("d128-x")
    import triton

    assert key.startswith("d128-x|") and triton.__version__ in key and triton_runner.source_hash() in key


def test_how_a_configuration_is_chosen(tmp_path, monkeypatch):
    """The override, the table, the cache, no tuning: the default; describe() says which."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(triton_runner.CONFIG_ENV, raising=False)
    inputs = make_inputs(_problem("100x20", "paged", hq=4, hkv=2, page=64))
    var = triton_runner.TritonVariant(inputs, device="cpu")
    assert var.config_source == "default" and var.config == var.default_config()   # no GPU: never tunes
    d = var.describe()
    assert d["config"] == var.config.name and d["config_source"] == "default" and d["block_n"] == 64

    monkeypatch.setenv(triton_runner.CONFIG_ENV, "m64-w4-s5-bits-tile")
    var = triton_runner.TritonVariant(inputs, device="cpu")
    assert (var.config.name, var.config_source) == ("m64-w4-s5-bits-tile", "env")
    monkeypatch.setenv(triton_runner.CONFIG_ENV, "m64-w4-s5-bits-turbo")
    with pytest.raises(ValueError, match=triton_runner.CONFIG_ENV):
        triton_runner.TritonVariant(inputs, device="cpu")
    monkeypatch.delenv(triton_runner.CONFIG_ENV)

    monkeypatch.setattr(triton_runner.TritonVariant, "gpu", property(lambda self: "Test GPU"))
    cls = triton_runner.problem_class(inputs.problem)
    monkeypatch.setattr(triton_runner, "TUNED", {"Test GPU": {cls: "m64-w4-s3-bits-tma"}})
    var = triton_runner.TritonVariant(inputs, device="cpu")
    assert (var.config.name, var.config_source) == ("m64-w4-s3-bits-tma", "table")
    assert var.describe()["problem_class"] == cls

    monkeypatch.setattr(triton_runner, "TUNED", {"Test GPU": {cls: "m64-w4-s3-bits-nonsense"}})
    triton_runner.write_cache("Test GPU", triton_runner.cache_key(cls), {"config": "m64-w4-s5-cast-tile"})
    var = triton_runner.TritonVariant(inputs, device="cpu")
    assert (var.config.name, var.config_source) == ("m64-w4-s5-cast-tile", "cache")

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty"))
    monkeypatch.setenv(triton_runner.TUNE_ENV, "0")
    var = triton_runner.TritonVariant(inputs, device="cpu")
    assert var.config_source == "default" and not triton_runner.tuning_enabled()
    assert triton_runner.meta()["tuning"]["enabled"] is False
    explicit = triton_runner.TritonVariant(inputs, device="cpu", config="m64-w4-s3-bits-gather")
    assert explicit.config_source == "argument" and explicit.config.convert == "bits"


def test_a_reordered_sum_may_move_an_fp16_output_by_one_step_and_no_more():
    from pa_bench.backends.triton_runner import reorder_tolerance

    # H200, 2.1Kx256 contiguous, fp16 output of magnitude 0.2043: two launch shapes differed by
    # 2^-15, one fp16 step of an output between 1/32 and 1/16
    scale, seen = 0.204345703125, 2.0 ** -15
    assert seen <= reorder_tolerance(scale, float16=True)
    assert not seen <= reorder_tolerance(scale, float16=False)        # fp32 outputs: 1e-4 of it
    step = 2.0 ** -13                                                  # one fp16 step in [1/8, 1/4)
    assert step <= reorder_tolerance(scale, float16=True) < 2 * step   # one step at the magnitude, not two
    assert reorder_tolerance(1.0, float16=False) == 1e-4


# --------------------------------------------------------------------------- the model a run uses


class _CudaOnCpu(NumpyBackend):
    """The numpy backend posing as the cuda backend: the triton variant runs in Triton's
    interpreter (its launch recorded as the cuda backend records it for meta.json), the other
    kernels are the model; the model key comes from the cuda backend's own ``launch``, and the
    tile size of every model built is kept."""

    name = "cuda"
    kernels_are_model, model_on_gpu = False, True
    facts = Device("Fake GPU", 132)
    launch = CudaBackend.launch

    def __init__(self):
        super().__init__()
        self._launches, self.models = {}, []

    def describe(self):
        return {"backend": "cuda", "gpu": "Fake GPU", "arch": "sm_90", "mma": "m16n8k16"}

    def unsupported_timing(self, variant, problem):
        return "not timed here"

    def compute(self, prepared, variant, rows, check_determinism=None):
        if variant != "triton":
            return super().compute(prepared, variant, rows, check_determinism)
        var = triton_runner.TritonVariant(prepared, device="cpu")
        self._launches[(variant, repr(prepared.problem))] = var.describe()
        out, guards = _run(prepared, config=var.config)
        sel = out if rows is None else out[:, np.asarray(rows), :]
        return KernelOutput(out=np.ascontiguousarray(sel), canary_ok=guards, deterministic=None)

    def model(self, inputs, tile_keys, rows=None, split_keys=0, pv_chain_keys=0, segment_keys=None,
              max_slack=None):
        self.models.append(tile_keys)
        return model_attention(inputs, tile_keys, rows, split_keys=split_keys, pv_chain_keys=pv_chain_keys,
                               segment_keys=segment_keys, max_slack=max_slack)


def test_a_run_judges_128_key_tiles_against_the_model_of_128_key_tiles(smoke_yaml, tmp_path, monkeypatch):
    """PA_BENCH_TRITON_CONFIG names a configuration with 128-key tiles (128 rows x 8 warps): the
    runner builds triton's model with 128-key tiles (v1's with its own 64), the launch records
    the configuration's block_n, and the row passes with the kernel's error at the 128-key model's."""
    from pa_bench import runner
    from pa_bench.problem.config import load_config
    from pa_bench.problem.plan import make_plan
    from pa_bench.store.results import open_run

    monkeypatch.setenv(triton_runner.CONFIG_ENV, "m128-w8-s5-bits-gather-n128")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    backend = _CudaOnCpu()
    config = make_plan(load_config(smoke_yaml), shapes="300x45", variants=["v1", "triton"]).config
    path = runner.run_parity(config, backend, results_root=tmp_path)
    recs = {r.variant: r for r in open_run(path).records()}
    (launch,) = backend._launches.values()
    assert (launch["config"], launch["config_source"], launch["block_n"]) == ("m128-w8-s5-bits-gather-n128", "env", 128)
    assert sorted(backend.models) == [64, 128]        # one model per tile size: v1's and triton's
    tri, v1 = recs["triton"], recs["v1"]
    assert tri.parity_pass is True and abs(tri.err_ratio - 1) < 1e-3, tri
    assert v1.err_ratio == 1.0 and tri.model_max_abs_err != v1.model_max_abs_err   # the two models differ


def test_the_cuda_backends_tile_keys_without_a_launch(tmp_path, monkeypatch):
    """Before the triton runner ran a shape the cuda backend says the tile size of the configuration
    it would use, asked without tuning: the override, the table, the cache, else the default's
    (a tune on first use keeps it); the other variants' come from the registry."""
    monkeypatch.delenv("TRITON_INTERPRET")                 # a GPU name counts (the interpreter has none)
    monkeypatch.delenv(triton_runner.CONFIG_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    backend = _CudaOnCpu()
    pb = _problem("300x45", "paged", hq=4, hkv=2, page=128)
    assert [backend.tile_keys(v, pb) for v in ("v1", "v2", "v2t", "v3")] == [64, 16, 16, 64]
    assert triton_runner.planned_config(pb, "Fake GPU", 132)[1] == "tune"
    assert backend.tile_keys("triton", pb) == 64
    cls = triton_runner.problem_class(pb)
    triton_runner.write_cache("Fake GPU", triton_runner.cache_key(cls), {"config": "m64-w4-s5-cast-tile-n128"})
    assert triton_runner.planned_config(pb, "Fake GPU", 132)[1] == "cache" and backend.tile_keys("triton", pb) == 128
    monkeypatch.setattr(triton_runner, "TUNED", {"Fake GPU": {cls: "m128-w8-s5-asm-tile"}})
    assert triton_runner.planned_config(pb, "Fake GPU", 132)[1] == "table" and backend.tile_keys("triton", pb) == 64
    monkeypatch.setenv(triton_runner.CONFIG_ENV, "m128-w8-s7-asm-tma-n128")
    assert backend.tile_keys("triton", pb) == 128
    backend._launches[("triton", repr(pb))] = {"variant": "triton", "block_n": 64}   # what the runner chose
    assert backend.tile_keys("triton", pb) == 64
    del backend._launches[("triton", repr(pb))]
    monkeypatch.setattr(triton_runner, "TUNED", {})
    monkeypatch.delenv(triton_runner.CONFIG_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty"))
    monkeypatch.setenv(triton_runner.TUNE_ENV, "0")
    assert triton_runner.planned_config(pb, "Fake GPU", 132)[1] == "default"
    assert backend.tile_keys("triton", pb) == 64


def test_the_gluon_loop_converts_with_the_same_ptx():
    """kernels/gluon_pa.py spells the conversion out again (a Gluon constexpr): it must stay the
    replayed one, constant for constant."""
    mod = triton_runner.kernel_module()
    if not mod.has_gluon():
        pytest.skip("this Triton has no Gluon")
    assert str(mod.gluon_module().I8_TO_F16_ASM.value) == str(mod.I8_TO_F16_ASM.value)
