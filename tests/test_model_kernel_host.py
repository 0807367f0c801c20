"""The fused model kernel's source (kernels/pa_model.cu) on the CPU: compiled with g++ together
with tests/model_host_driver.cpp, which runs the kernel's own CTA program thread by thread between
its barriers, and plugged into model_attention as its engine. It must give the NumPy model's bits
(the GPU run of the same source is tests/gpu/test_model_gpu.py)."""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pa_bench.numerics import mma as mma_mod
from pa_bench.numerics import model_kernel as mk
from pa_bench.launch import split_point
from pa_bench.numerics.model import exp2_ftz, model_arrays, model_attention, round_fp16
from pa_bench.problem.inputs import make_inputs
from pa_bench.problem.plan import Problem
from pa_bench.problem.shapes import parse_shape

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "model_host_driver.cpp"
CXX = shutil.which("g++") or shutil.which("c++")


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if CXX is None:
        pytest.skip("no C++ compiler (g++ or c++) on PATH")
    so = tmp_path_factory.mktemp("pam") / "pam_host.so"
    cmd = [CXX, "-std=c++17", "-O2", "-ffp-contract=off", "-shared", "-fPIC", "-Wall",
           f"-I{mk.kernel_path().parent}", "-o", str(so), str(DRIVER)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lib = ctypes.CDLL(str(so))
    P, I, L = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    lib.pam_host_run.argtypes = [P] * 10 + [I] * 4 + [L] + [I] * 4 + [I, ctypes.c_float] + [I, I]
    lib.pam_host_run.restype = None
    lib.pam_host_smem_bytes.argtypes = [I, I]
    lib.pam_host_smem_bytes.restype = L
    for name in ("pam_host_exp2_ftz", "pam_host_round_fp16"):
        getattr(lib, name).argtypes = [P, P, L]
    lib.pam_host_block_fma.argtypes = [P, P, P, L, I, I]
    return lib


def _ptr(x: np.ndarray):
    assert x.flags.c_contiguous
    return ctypes.c_void_p(x.ctypes.data)


def host_engine(lib, calls: list | None = None):
    """model_attention's engine running pa_model.cu's program on the CPU, with the arguments
    model_kernel lays out for the GPU launch."""

    def parts(a, qf, limit, tile, ranges, mma, mma_k, pv_chain, slack=None):
        launch = mk.kernel_launch(a, qf, limit, tile, ranges, mma, mma_k, pv_chain, slack)
        args = [_ptr(x) if isinstance(x, np.ndarray) else float(x) if isinstance(x, np.floating) else int(x)
                for x in launch.args]
        assert launch.grid == (qf.shape[1], qf.shape[0], len(ranges))
        lib.pam_host_run(*args, launch.grid[2], launch.block[0])
        if calls is not None:
            calls.append(len(ranges))
        return launch.parts()

    return parts


def inputs_for(shape, data="realistic", hq=2, hkv=1, d=64, out_dtype="float32"):
    pb = Problem(parse_shape(shape), heads_q=hq, heads_kv=hkv, head_dim=d, page=16, data=data,
                 seed=5, out_dtype=out_dtype)
    return make_inputs(pb)


# (shape, heads q/kv, D, rows, tile, split, segment, pv_chain, max_slack): rows end inside tiles
# (the causal edge), splits at the half, segments of 64/128 keys (a row with no key in the last
# segment: 190x14, row 0), pv_chain 64 (v3) and 16/32, D 64 and 128, the lazy running maximum
# (v3's slack 8, and 0, where nearly every tile whose maximum rises moves the reference).
CASES = {
    "t16": ("100x13", 2, 1, 64, [0, 5, 12], 16, 0, 0, 0, None),
    "t64": ("100x13", 4, 2, 64, [0, 5, 12], 64, 0, 0, 0, None),
    "t64-d128": ("70x9", 2, 1, 128, [0, 3, 8], 64, 0, 0, 0, None),
    "split16": ("97x13", 2, 1, 64, [0, 6, 12], 16, "half", 0, 0, None),
    "split64": ("130x7", 2, 1, 64, [0, 6], 64, 64, 0, 0, None),
    "seg64": ("190x14", 2, 1, 64, [0, 1, 13], 16, 0, 64, 0, None),
    "seg128-t64": ("200x13", 2, 1, 64, [0, 7, 12], 64, 0, 128, 0, None),
    "chain64": ("150x13", 2, 1, 64, [0, 5, 12], 64, 0, 0, 64, None),
    "chain32-seg": ("150x13", 2, 1, 64, [0, 12], 64, 0, 64, 32, None),
    "chain16-d128": ("90x5", 2, 1, 128, [0, 4], 64, 0, 0, 16, None),
    "lazy8-t64": ("300x13", 4, 2, 64, [0, 5, 12], 64, 0, 0, 0, 8.0),
    "lazy8-seg-t128": ("250x9", 2, 1, 128, [0, 8], 128, 0, 128, 0, 8.0),
    "lazy0-t16": ("100x13", 2, 1, 64, [0, 5, 12], 16, 0, 0, 0, 0.0),
}
MMAS = [("emulated", 16), ("emulated", 8), ("rn", 16)]


@pytest.mark.parametrize("mma, mma_k", MMAS, ids=["emu16", "emu8", "rn"])
@pytest.mark.parametrize("case", list(CASES))
def test_host_kernel_gives_the_numpy_models_bits(lib, case, mma, mma_k):
    shape, hq, hkv, d, rows, tile, split, seg, chain, slack = CASES[case]
    data = ("normal", "realistic")[(list(CASES).index(case) + (mma_k == 8)) % 2]
    inp = inputs_for(shape, data=data, hq=hq, hkv=hkv, d=d)
    split = split_point(inp.problem.context) if split == "half" else split
    kw = dict(split_keys=split, segment_keys=seg, mma=mma, mma_k=mma_k, pv_chain_keys=chain, max_slack=slack)
    calls = []
    want = model_attention(inp, tile, np.array(rows), **kw)
    got = model_attention(inp, tile, np.array(rows), engine=host_engine(lib, calls), **kw)
    assert calls and np.isfinite(got).all()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", ["t64-d128", "lazy8-t64", "lazy8-seg-t128"])
def test_host_kernel_with_q_rounded_to_int8_gives_the_numpy_models_bits(lib, case):
    """Q rounded to int8 per row ("q-int8-row"): the kernel takes the rounded Q's exact float64
    value as it takes any Q, and gives the array-module steps' bits."""
    shape, hq, hkv, d, rows, tile, split, seg, chain, slack = CASES[case]
    inp = inputs_for(shape, hq=hq, hkv=hkv, d=d)
    kw = dict(split_keys=split, segment_keys=seg, mma="emulated", pv_chain_keys=64, max_slack=slack,
              input_rounding="q-int8-row")
    want = model_attention(inp, tile, np.array(rows), **kw)
    got = model_attention(inp, tile, np.array(rows), engine=host_engine(lib), **kw)
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(want, model_attention(inp, tile, np.array(rows), **{**kw, "input_rounding": None}))


@pytest.mark.parametrize("data", ["normal", "realistic"])
def test_host_kernel_on_every_row_with_fp16_output(lib, data):
    inp = inputs_for("80x21", data=data, hq=4, hkv=2, out_dtype="float16")
    for tile in (16, 64):
        want = model_attention(inp, tile, mma="emulated")
        got = model_attention(inp, tile, mma="emulated", engine=host_engine(lib))
        np.testing.assert_array_equal(got, want)


def test_pv_chain_is_another_arithmetic_close_to_the_plain_one():
    inp = inputs_for("300x9")
    plain = model_attention(inp, 64, mma="emulated")
    chain = model_attention(inp, 64, mma="emulated", pv_chain_keys=64)
    assert not np.array_equal(plain, chain)
    assert np.abs(plain - chain).max() < 1e-5 * np.abs(plain).max()
    with pytest.raises(ValueError, match="pv_chain_keys"):
        model_attention(inp, 64, pv_chain_keys=48)
    with pytest.raises(ValueError, match="pv_chain_keys"):
        model_attention(inp, 16, pv_chain_keys=32)


def test_kernel_engine_launches_as_cupy_would(lib, monkeypatch):
    """engine="kernel" end to end on the CPU: a stand-in "cupy" (NumPy under that name) whose
    compiled function is the host driver, called the way CuPy's RawKernel is called."""
    import sys
    import types

    fake = types.ModuleType("cupy")
    fake.__getattr__ = lambda name: getattr(np, name)
    fake.cuda = types.SimpleNamespace(Device=lambda: types.SimpleNamespace(id=0))
    seen = []

    def function(grid, block, args, shared_mem=0):
        gr, hkv, n_parts = grid
        assert block[0] % 32 == 0 and block[1:] == (1, 1) and len(args) == 21
        assert shared_mem == lib.pam_host_smem_bytes(int(args[12]), int(args[13]))
        seen.append(grid)
        lib.pam_host_run(*[_ptr(x) if isinstance(x, np.ndarray) else float(x) if isinstance(x, np.floating)
                           else int(x) for x in args], n_parts, block[0])

    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(mk, "_function", lambda device_id: function)
    inp = inputs_for("190x14", hq=4, hkv=2)
    rows = np.array([0, 6, 13])
    a = model_arrays(inp, fake)
    for tile, seg, slack in ((16, 64, None), (64, 0, None), (64, 64, 8.0)):
        got = model_attention(a, tile, rows, segment_keys=seg, mma="emulated", max_slack=slack, engine="kernel")
        np.testing.assert_array_equal(got, model_attention(inp, tile, rows, segment_keys=seg, mma="emulated",
                                                           max_slack=slack))
    assert seen == [(2 * 3, 2, 4), (2 * 3, 2, 1), (2 * 3, 2, 4)]


def test_kernel_engine_needs_cupy_arrays():
    with pytest.raises(ValueError, match="CuPy"):
        model_attention(inputs_for("40x3"), 16, engine="kernel")
    with pytest.raises(ValueError, match="engine"):
        model_attention(inputs_for("40x3"), 16, engine="torch")


def test_shared_memory_layout_agrees(lib):
    for d in (64, 128, 256):
        for tile in (16, 64, 128):
            assert lib.pam_host_smem_bytes(d, tile) == mk.smem_bytes(d, tile)
            assert mk.cta_threads(d, tile) % 32 == 0 and mk.cta_threads(d, tile) >= max(d, tile)


def _host(fn, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    fn(_ptr(x), _ptr(out), x.size)
    return out


def test_exp2_ftz_bit_for_bit(lib):
    rng = np.random.default_rng(0)
    x = np.concatenate([-rng.exponential(8.0, 200_000), -rng.uniform(0, 150, 100_000),
                        -rng.uniform(125.5, 126.5, 20_000), np.arange(-140, 1, 0.5)]).astype(np.float32)
    x = np.concatenate([x, np.float32([-np.inf, -0.0, 0.0, -126.0, -149.0, -200.0, -1e30])])
    np.testing.assert_array_equal(_host(lib.pam_host_exp2_ftz, x).view(np.uint32),
                                  exp2_ftz(x).view(np.uint32))


def test_round_fp16_bit_for_bit(lib):
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(0, 65504, 100_000), 2.0 ** rng.uniform(-30, 15, 200_000),
                        [0.0, 2.0**-14, 2.0**-24, 2.0**-25, 65504.0, 1.0]]).astype(np.float32)
    got = _host(lib.pam_host_round_fp16, x)
    np.testing.assert_array_equal(got.view(np.uint32), round_fp16(x).view(np.uint32))
    np.testing.assert_array_equal(got, x.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("k", [16, 8])
def test_block_fma_bit_for_bit(lib, k):
    rng = np.random.default_rng(k)
    n = 50_000
    p16 = (rng.random((n, k)) ** 4 * rng.choice([1.0, 2.0**-8, 2.0**-20], (n, 1))).astype(np.float16)
    v = rng.integers(-127, 128, (n, k)).astype(np.float64)
    prods = np.ascontiguousarray(p16.astype(np.float64) * v)
    prods[:100] = 0.0                                    # all-zero products, c kept
    c = (rng.standard_normal(n) * rng.choice([1.0, 1e-3, 1e3], n)).astype(np.float32)
    c[50:150] = 0.0
    want = mma_mod.block_fma(c, prods.copy(), axis=-1)
    out = np.empty(n, dtype=np.float32)
    lib.pam_host_block_fma(_ptr(c), _ptr(prods), _ptr(out), n, k, mma_mod.EXTRA_BITS)
    np.testing.assert_array_equal(out, want)
    assert np.array_equal(out[:50], c[:50])


def test_the_kernel_file_explains_itself_and_shares_the_models_constants():
    src = mk.kernel_path().read_text()
    lines = src.splitlines()
    head = " ".join(ln for ln in lines[:next(i for i, ln in enumerate(lines) if not ln.startswith("//"))])
    for word in ("tiling", "phases", "barriers"):
        assert word in head.lower()
    from pa_bench.numerics import model as model_mod

    for c in model_mod._EXP2_COEF:
        assert c.hex() in src
    assert math.log(2.0).hex() in src
    assert "fma(" not in src.replace("block_fma(", "").replace("block_fma<", "")


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_nvcc_builds_the_model_kernel_without_fma(arch, tmp_path):
    """nvcc compiles pa_model.cu with the options NVRTC gets (model_kernel.OPTIONS): no spills,
    no stack, and no fused multiply-add in its PTX (every op is an explicit .rn)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc (the CUDA compiler) is not on PATH")
    cmd = [nvcc, "-cubin", f"-arch={arch}", "-Xptxas", "-v", "--keep", f"--keep-dir={tmp_path}",
           *mk.OPTIONS, "-o", str(tmp_path / "k.cubin"), str(mk.kernel_path())]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stderr + proc.stdout
    assert "Compiling entry function 'pa_model'" in log
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in log
    ptx = "".join(p.read_text() for p in tmp_path.glob("*.ptx"))
    assert ".entry pa_model" in ptx and "mul.rn.f64" in ptx
    assert "fma." not in ptx and "mad.f" not in ptx and "mad.rn" not in ptx
