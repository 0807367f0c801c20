"""The `triton` variant's host side: load kernels/triton_pa.py, give it torch tensors, launch it.

On the cuda backend the tensors are zero-copy torch views of the backend's CuPy buffers
(``torch.as_tensor`` through ``__cuda_array_interface__``), so the Triton kernel reads the very
bytes v1/v2/v2t read and writes into the same canary-framed outputs. The tests build the tensors
from the host arrays instead (on the CPU, for Triton's interpreter). The launch (grid, scalars,
configuration) is planned once per shape; the launcher callable only calls the kernel.

Which configuration (``triton_pa.Config``: launch parameters and the kernel's structure switches)
runs a shape, in this order:
  1. the ``config`` argument, or ``PA_BENCH_TRITON_CONFIG`` (a configuration name) for every shape;
  2. ``TUNED``, the committed table of what ``scripts/triton_tune.py`` measured, by GPU name and
     problem class (``problem_class``): a run never tunes a class the table has for its GPU;
  3. this GPU's tune cache (``cache_path``: ``$XDG_CACHE_HOME/pa-bench/triton/<gpu>.json``), keyed
     on the problem class, the Triton version and the kernel source's hash;
  4. a tune on first use (on a GPU, unless ``PA_BENCH_TRITON_TUNE=0``): the class's few candidates
     (``triton_pa.candidates``, all with the default's arithmetic) are compiled, run once and
     checked against the default configuration's output, timed with CUDA events outside any
     measurement, and the fastest is written to the cache;
  5. ``triton_pa.default_config``.
``planned_config`` walks 1-3 and 5 without tuning or a GPU; ``planned_tile_keys`` is the
``block_n`` of what it finds (a tune on first use keeps the default's): the keys per tile the
numerics model needs (the cuda backend's ``tile_keys``). ``describe()`` (meta.json's launches)
records the configuration, its ``block_n`` among its fields, and where it came from.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path

from pa_bench.backends.kernels import kernel_dir
from pa_bench.peers.torch_util import on_timed_stream

VARIANT = "triton"   # its name in pa_bench.variants
KERNEL_FILE = "triton_pa.py"
MIN_CC = 80          # Triton's NVIDIA support (and the kernel's fp16 tl.dot): sm_80+
HEAD_DIMS = (64, 128)

TUNE_ENV = "PA_BENCH_TRITON_TUNE"      # "0" (or off/no/false): never tune; the table, else the default
CONFIG_ENV = "PA_BENCH_TRITON_CONFIG"  # a configuration name used for every shape

#: What scripts/triton_tune.py measured: {GPU name: {problem class: configuration name}}. A run on
#: one of these GPUs uses the entry of its problem class and never tunes it.
#: ``scripts/triton_tune.py --apply RUN/triton_tune.json`` writes this table; its comments name the run.
TUNED: dict[str, dict[str, str]] = {
    'NVIDIA H200': {
        # scripts/triton_tune.py: results/reference/h200/20261202-033559-triton-tune-gl/triton_tune.json (the
        # PR shapes, with the Gluon loop), results/reference/h200/20261202-011153-triton-tune/triton_tune.json
        # (2.1Kx256), results/reference/h200/20261202-012118-triton-tune/triton_tune.json (the first chunk);
        # configs/sweep.yaml's classes: results/reference/h200/20261202-021533-triton-tune-sweep256/
        # triton_tune.json (x256), results/reference/h200/20261202-033638-triton-tune-gl-sweep2048/
        # triton_tune.json (x2048 without key segments, with the Gluon loop) and
        # results/reference/h200/20261202-021626-triton-tune-sweep2048/triton_tune.json (128Kx2048)
        'd128-h32.8-paged64-q1024-k65536': 'm128-w8-s2-asm-tile-gl',  # 32Kx1024: 1.633 ms, 2.16x the default
        'd128-h32.8-paged64-q2048-k131072': 'm128-w8-s2-asm-tile-gl',  # 64Kx2048: 6.472 ms, 2.15x the default
        'd128-h32.8-paged64-q2048-k131072-seg': 'm64-w4-s3-asm-tile-n128-dh',  # 128Kx2048: 13.37 ms, 2.05x the default
        'd128-h32.8-paged64-q2048-k16384': 'm128-w8-s2-asm-tile-gl',  # 8Kx2048: 0.9164 ms, 2.08x the default
        'd128-h32.8-paged64-q2048-k2048': 'm64-w4-s3-asm-tile-r168-dh',  # 1.5K: 0.0766 ms, 1.99x the default
        'd128-h32.8-paged64-q2048-k32768': 'm128-w8-s2-asm-tile-gl',  # 16Kx2048: 1.71 ms, 2.12x the default
        'd128-h32.8-paged64-q2048-k4096': 'm128-w8-s2-asm-tile-gl',  # 2Kx2048: 0.3262 ms, 2.02x the default
        'd128-h32.8-paged64-q2048-k65536': 'm128-w8-s2-asm-tile-gl',  # 32Kx2048: 3.293 ms, 2.14x the default
        'd128-h32.8-paged64-q2048-k8192': 'm128-w8-s2-asm-tile-gl',  # 4Kx2048: 0.5214 ms, 2.05x the default
        'd128-h32.8-paged64-q256-k131072': 'm64-w4-s5-asm-tile-n128-dh',  # 64Kx256: 1.164 ms, 2.31x the default
        'd128-h32.8-paged64-q256-k131072-seg': 'm64-w4-s5-asm-tile-n128-dh',  # 128Kx256: 2.501 ms, 2.14x the default
        'd128-h32.8-paged64-q256-k16384': 'm64-w4-s5-asm-tile-n128-dh',  # 8Kx256: 0.1571 ms, 2.30x the default
        'd128-h32.8-paged64-q256-k2048': 'm64-w4-s5-asm-tile-n128-dh',  # 1Kx256: 0.03149 ms, 2.00x the default
        'd128-h32.8-paged64-q256-k32768': 'm64-w4-s5-asm-tile-n128-dh',  # 16Kx256: 0.3014 ms, 2.32x the default
        'd128-h32.8-paged64-q256-k4096': 'm64-w4-s5-asm-tile-n128-dh',  # 2.1Kx256: 0.05149 ms, 2.14x the default
        'd128-h32.8-paged64-q256-k65536': 'm64-w4-s5-asm-tile-n128-dh',  # 32Kx256: 0.5883 ms, 2.31x the default
        'd128-h32.8-paged64-q256-k8192': 'm64-w4-s5-asm-tile-n128-dh',  # 4Kx256: 0.08541 ms, 2.24x the default
        'd128-h32.8-paged64-q512-k131072': 'm128-w8-s2-asm-tile-gl',  # 64Kx512: 1.612 ms, 2.04x the default
    },
}

_modules: dict[bool, object] = {}


def reorder_tolerance(scale: float, float16: bool) -> float:
    """How far two launches that sum a row's fp32 dots in another order may differ, for outputs of
    magnitude ``scale``: 1e-4 of it, and for an fp16 output at least one fp16 step at that
    magnitude (2^-10 of it), since two fp32 results a hair apart may round to neighbouring halves."""
    return max(1e-4 * scale, 2.0 ** -10 * scale) if float16 else 1e-4 * scale


def unavailable_reason(need_gpu: bool = True) -> str | None:
    """Why the triton variant cannot run here (one line), or None."""
    try:
        import torch
    except Exception:
        return "PyTorch is not installed (the triton variant needs triton and torch: pip install 'pa-bench[triton]')"
    try:
        import triton  # noqa: F401
    except Exception as exc:
        return f"Triton cannot be imported ({type(exc).__name__}); pip install 'pa-bench[triton]'"
    if need_gpu and not torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU (the triton variant launches through torch's CUDA context)"
    return None


def unsupported(cc: int, head_dim: int) -> str | None:
    """Why the triton variant cannot run on compute capability ``cc`` with ``head_dim``, or None."""
    reason = unavailable_reason()
    if reason:
        return reason
    if cc < MIN_CC:
        return f"triton needs sm_{MIN_CC}+ (Triton's supported GPUs), not sm_{cc}"
    if head_dim not in HEAD_DIMS:
        return f"head_dim {head_dim} is not supported by the triton kernel (64 or 128)"
    return None


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def kernel_module():
    """kernels/triton_pa.py as a module (Triton decides at import whether it interprets, so one
    module per TRITON_INTERPRET setting)."""
    key = interpreting()
    mod = _modules.get(key)
    if mod is None:
        name = f"pa_bench_triton_pa{'_interp' if key else ''}"
        spec = importlib.util.spec_from_file_location(name, kernel_dir() / KERNEL_FILE)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod          # Triton reads the kernel's source through its module
        spec.loader.exec_module(mod)
        _modules[key] = mod
    return mod


def tile_keys() -> int:
    """Keys per tile of the kernel's default configuration (its ``BLOCK_N``, read from the source
    without importing Triton); a configuration's ``block_n`` may differ (``planned_tile_keys``)."""
    for line in (kernel_dir() / KERNEL_FILE).read_text().splitlines():
        if line.startswith("BLOCK_N = "):
            return int(line.split("=")[1].split("#")[0])
    raise RuntimeError(f"{KERNEL_FILE} defines no BLOCK_N")


def source_hash() -> str:
    return hashlib.sha256((kernel_dir() / KERNEL_FILE).read_bytes()).hexdigest()[:16]


def meta() -> dict:
    """What meta.json records of the triton variant: versions, the kernel's source hash and how
    configurations are chosen (each shape's configuration and its source are in the backend's
    launches)."""
    out = {"source": f"kernels/{KERNEL_FILE}", "source_sha256": source_hash(), "block_n": tile_keys(),
           "tuning": {"enabled": tuning_enabled(), "config_override": os.environ.get(CONFIG_ENV) or None,
                      "cache_dir": str(cache_dir()), "table_gpus": sorted(TUNED)}}
    reason = unavailable_reason(need_gpu=False)
    if reason:
        return out | {"unavailable": reason}
    import torch
    import triton

    return out | {"triton": triton.__version__, "torch": torch.__version__}


# --------------------------------------------------------------------------- configuration choice


def tuning_enabled() -> bool:
    return os.environ.get(TUNE_ENV, "1").strip().lower() not in ("0", "off", "no", "false")


def _bucket(n: int, lo: int, hi: int) -> int:
    """The power of two at or above ``n``, within [lo, hi]."""
    b = lo
    while b < n and b < hi:
        b *= 2
    return b


def problem_class(problem) -> str:
    """The class a tuned configuration is chosen for: head size, heads, layout and page, the
    query count and key count as powers of two, and what else changes the binary (fp16 output,
    key segments). E.g. ``d128-h32.8-paged64-q1024-k65536``."""
    from pa_bench.variants import context_segment_keys

    pb = problem
    seg = context_segment_keys(pb.context)
    segmented = bool(seg) and pb.keys > seg
    parts = [f"d{pb.head_dim}", f"h{pb.heads_q}.{pb.heads_kv}",
             f"paged{pb.page}" if pb.layout == "paged" else "contig",
             f"q{_bucket(pb.queries, 64, 4096)}", f"k{_bucket(pb.keys, 1024, 131072)}"]
    if pb.out_dtype == "float16":
        parts.append("f16")
    if segmented:
        parts.append("seg")
    return "-".join(parts)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pa-bench" / "triton"


def cache_path(gpu: str) -> Path:
    return cache_dir() / (re.sub(r"[^A-Za-z0-9._-]+", "_", gpu).strip("_") + ".json")


def cache_key(cls: str) -> str:
    """The tune cache's key: what changes the binary or its speed besides the GPU (the file)."""
    import triton

    return f"{cls}|triton {triton.__version__}|{KERNEL_FILE} {source_hash()}"


def read_cache(gpu: str) -> dict:
    try:
        data = json.loads(cache_path(gpu).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_cache(gpu: str, key: str, entry: dict) -> None:
    """Add ``entry`` under ``key`` to the GPU's cache file (best effort: a read-only home loses it)."""
    path = cache_path(gpu)
    data = read_cache(gpu)
    data[key] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass


def _parsed(mod, name, paged: bool, page: int):
    """The configuration ``name`` names if it can run this layout, else None."""
    try:
        cfg = mod.Config.parse(str(name))
    except ValueError:
        return None
    return None if cfg.unsupported(paged=paged, page=page) else cfg


def same_output(a, b) -> tuple[bool, float]:
    """(bitwise equal, max abs difference) of two outputs (torch tensors of one shape)."""
    import torch

    if torch.equal(a.view(torch.int16) if a.dtype == torch.float16 else a.view(torch.int32),
                   b.view(torch.int16) if b.dtype == torch.float16 else b.view(torch.int32)):
        return True, 0.0
    return False, float((a.float() - b.float()).abs().max())


def _event_ms(fn, torch, reps: int = 5) -> float:
    """Median milliseconds of ``fn`` by CUDA events (a tune's ranking, not a measurement)."""
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def planned_config(problem, gpu: str | None, sm_count: int | None = None):
    """(configuration, where it comes from) for ``problem`` on the GPU named ``gpu`` (None: off the
    GPU or in the interpreter), in the module docstring's order, without tuning or a GPU: "env",
    "table", "cache", "default", or "tune" where a tune on first use would choose (the default
    configuration is returned then: every candidate of that tune keeps its arithmetic)."""
    mod = kernel_module()
    pb, paged = problem, problem.layout == "paged"
    override = os.environ.get(CONFIG_ENV)
    if override:
        try:
            cfg = mod.Config.parse(override)
        except ValueError as exc:
            raise ValueError(f"{CONFIG_ENV}: {exc}") from None
        reason = cfg.unsupported(paged=paged, page=pb.page)
        if reason:
            raise ValueError(f"{CONFIG_ENV}={override}: {reason}")
        return cfg, "env"
    default = mod.default_config(pb.head_dim, pb.heads_q // pb.heads_kv, pb.queries, pb.heads_q, sm_count)
    if gpu is None:
        return default, "default"
    cls = problem_class(pb)
    cfg = _parsed(mod, TUNED.get(gpu, {}).get(cls), paged, pb.page)
    if cfg is not None:
        return cfg, "table"
    entry = read_cache(gpu).get(cache_key(cls))
    cfg = _parsed(mod, entry.get("config") if isinstance(entry, dict) else None, paged, pb.page)
    if cfg is not None:
        return cfg, "cache"
    return default, ("tune" if tuning_enabled() else "default")


def planned_tile_keys(problem, gpu: str | None, sm_count: int | None = None) -> int:
    """Keys per online-softmax tile (the configuration's ``block_n``: the numerics model's
    tile_keys) of the configuration a run uses for ``problem`` on the GPU named ``gpu``
    (``planned_config``; what a tune on first use would choose has the default's)."""
    cfg, _source = planned_config(problem, None if interpreting() else gpu, sm_count)
    return cfg.block_n


# Triton launches on torch's current stream: pointed at the one pa-bench times, as the peers' calls


class TritonVariant:
    """One shape's tensors in torch and the planned launch of the triton kernel.

    ``arrays``: the cuda backend's device buffers (q, k, v, ks, vs, table as CuPy arrays; contiguous
    scales may have padded rows), viewed without a copy; None: copies of ``inputs``' host arrays on
    ``device`` (the CPU for the interpreter). ``config``: a ``triton_pa.Config`` (or its name); None
    chooses one as the module docstring says."""

    def __init__(self, inputs, arrays: dict | None = None, device: str = "cuda", sm_count: int | None = None,
                 config=None):
        import torch

        from pa_bench.variants import context_segment_keys

        self.torch = torch
        self.mod = kernel_module()
        pb = inputs.problem
        self.problem = pb
        self.inputs = inputs
        if arrays is None:
            arrays = _host_arrays(inputs)
        dev = torch.device(device)
        self.t = {name: torch.as_tensor(a, device=dev) for name, a in arrays.items()}
        self.seg_keys = context_segment_keys(pb.context)
        self.sm_count = sm_count
        self.tuning: dict | None = None           # what a tune on first use measured
        if isinstance(config, str):
            config = self.mod.Config.parse(config)
        if config is not None:
            self.config, self.config_source = config, "argument"
        else:
            self.config, self.config_source = self._choose()
        self.launch = self._plan(self.config)

    # ------------------------------------------------------------------ choosing the configuration
    @property
    def paged(self) -> bool:
        return self.problem.layout == "paged"

    @property
    def gpu(self) -> str | None:
        """The GPU's name (the table's and the cache's key); None off the GPU or in the interpreter."""
        dev = self.t["q"].device
        if dev.type != "cuda" or interpreting():
            return None
        return self.torch.cuda.get_device_name(dev)

    def problem_class(self) -> str:
        return problem_class(self.problem)

    def default_config(self):
        pb = self.problem
        return self.mod.default_config(pb.head_dim, pb.heads_q // pb.heads_kv, pb.queries, pb.heads_q,
                                       self.sm_count)

    def _choose(self):
        """(configuration, where it came from): ``planned_config``, and a tune where it says so."""
        cfg, source = planned_config(self.problem, self.gpu, self.sm_count)
        if source != "tune":
            return cfg, source
        cls = self.problem_class()
        cfg, self.tuning = self.tune()
        write_cache(self.gpu, cache_key(cls), {"config": cfg.name, "class": cls, "gpu": self.gpu, **self.tuning})
        return cfg, "tuned"

    def _plan(self, config):
        pb, inputs = self.problem, self.inputs
        return self.mod.plan_launch(
            queries=pb.queries, context=pb.context, heads_q=pb.heads_q, heads_kv=pb.heads_kv,
            head_dim=pb.head_dim, paged=self.paged, page=pb.page,
            kv_stride=0 if self.paged else int(self.t["k"].shape[1]),
            scale_stride=0 if self.paged else int(self.t["ks"].shape[-1]),
            seg_keys=self.seg_keys, qk_scale_log2=inputs.qk_scale_log2, p_scale=inputs.p_scale, config=config)

    def tune(self) -> tuple[object, dict]:
        """The fastest of the class's candidates on this shape (on the GPU): each is compiled and
        run once, and kept only if its output is the default configuration's (bitwise, or within
        ``reorder_tolerance`` where the launch parameters change the order of a row's fp32 sums);
        then each is timed by CUDA events. Returns (configuration, a record)."""
        torch, mod, pb = self.torch, self.mod, self.problem
        started = time.perf_counter()
        cands = mod.candidates(head_dim=pb.head_dim, paged=self.paged, page=pb.page, queries=pb.queries,
                               heads_q=pb.heads_q, heads_kv=pb.heads_kv, sm_count=self.sm_count)
        default = self.default_config()
        cands = [default] + [c for c in cands if c != default and c.same_arithmetic]
        dtype = torch.float16 if pb.out_dtype == "float16" else torch.float32
        n = pb.heads_q * pb.queries * pb.head_dim
        ref = torch.empty(n, dtype=dtype, device=self.t["q"].device)
        out = torch.empty_like(ref)
        fns, ms, rejected = {}, {}, {}
        for cfg in cands:
            try:
                buf = ref if cfg == default else out
                fn = self._launch_fn(cfg, buf)
                fn()
                torch.cuda.synchronize()
                if cfg != default:
                    bitwise, diff = same_output(out, ref)
                    scale = float(ref.float().abs().max())
                    if not bitwise and not diff <= reorder_tolerance(scale, dtype == torch.float16):
                        rejected[cfg.name] = f"output differs from the default's by {diff:.3e}"
                        continue
                fns[cfg.name] = fn
            except Exception as exc:   # a candidate that does not compile or run here
                rejected[cfg.name] = _error_line(exc)
        for name, fn in fns.items():
            fn()
            ms[name] = round(_event_ms(fn, torch), 5)
        best = min(ms, key=ms.get) if ms else default.name
        return mod.Config.parse(best), {"tune_ms": ms, "rejected": rejected,
                                        "tune_seconds": round(time.perf_counter() - started, 1)}

    def _launch_fn(self, config, out):
        t = self.t
        launch = self._plan(config)
        return self.mod.launcher(launch, t["q"], t["k"], t["v"], t["ks"], t["vs"], t["table"], out)

    # ------------------------------------------------------------------ launching
    def launcher(self, out):
        """A callable launching the kernel once into ``out`` (a CuPy array or a torch tensor whose
        first Hq*Nq*D elements are the output). Called directly it returns what Triton's launch
        returns (the compiled kernel: ``kernel_info``)."""
        t = self.t
        out_t = out if isinstance(out, self.torch.Tensor) else self.torch.as_tensor(out, device=t["q"].device)
        run = self.mod.launcher(self.launch, t["q"], t["k"], t["v"], t["ks"], t["vs"], t["table"], out_t)
        return on_timed_stream(run) if out_t.is_cuda else run

    def describe(self) -> dict:
        pb = self.problem
        out = {"variant": VARIANT, "shape": pb.shape.label, **self.launch.describe(),
               "config_source": self.config_source}
        if self.config_source != "argument" and self.gpu is not None:
            out["problem_class"] = self.problem_class()
        if self.tuning is not None:
            out["tuning"] = self.tuning
        return out


def kernel_info(kernel) -> dict:
    """Registers, spills, shared memory and a hash of the binary of a compiled Triton kernel
    (what a launch returned); {} for anything else."""
    info = {}
    # Triton's compiled kernel: its members differ between Triton versions (and are absent on
    # anything else), so each is looked up by name
    got = {name: getattr(kernel, name, None) for name in ("n_regs", "n_spills", "metadata", "asm")}
    for key, attr in (("registers", "n_regs"), ("spills", "n_spills")):
        if isinstance(got[attr], int):
            info[key] = got[attr]
    shared = getattr(got["metadata"], "shared", None)
    if isinstance(shared, int):
        info["shared_bytes"] = shared
    asm = got["asm"]
    binary = asm.get("cubin") if isinstance(asm, dict) else None
    if isinstance(binary, (bytes, bytearray)):
        info["binary_sha256"] = hashlib.sha256(binary).hexdigest()[:16]
    return info


def _error_line(exc: BaseException) -> str:
    """One line for a candidate that failed: the exception's type and first informative line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    pick = next((ln for ln in lines if "error" in ln.lower()), lines[0] if lines else "")
    return f"{type(exc).__name__}: {pick}"[:300]


def _host_arrays(inputs) -> dict:
    """The kernel's inputs from the host arrays: the page pool with its table, or contiguous K/V."""
    import numpy as np

    if inputs.problem.layout == "paged":
        pk = inputs.paged
        return {"q": inputs.q, "k": pk.k_pool, "v": pk.v_pool, "ks": pk.k_scale_pool, "vs": pk.v_scale_pool,
                "table": pk.page_table.astype(np.int32)}
    return {"q": inputs.q, "k": np.ascontiguousarray(inputs.k_i8), "v": np.ascontiguousarray(inputs.v_i8),
            "ks": np.ascontiguousarray(inputs.k_scale, dtype=np.float32),
            "vs": np.ascontiguousarray(inputs.v_scale, dtype=np.float32),
            "table": np.zeros(1, dtype=np.int32)}


__all__ = ["VARIANT", "unavailable_reason", "unsupported", "kernel_module", "tile_keys", "source_hash", "meta",
           "on_timed_stream", "TritonVariant", "MIN_CC", "TUNED", "problem_class", "kernel_info", "planned_config",
           "planned_tile_keys"]
