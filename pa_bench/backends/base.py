"""What a backend is: the methods the runner calls, and the record ``compute`` returns.

A backend runs kernels and does not judge them: it reports why a variant cannot run, uploads a
shape's inputs, computes outputs (with canary and determinism facts), the FP64 reference and
the timings; the runner judges parity and writes records. ``numpy`` and ``cuda`` implement it;
a test double only has to provide these methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from pa_bench.launch import Launch
    from pa_bench.measure.settings import TimingSettings
    from pa_bench.measure.timing import TimingResult


@dataclass
class KernelOutput:
    """What ``Backend.compute`` returns."""

    out: np.ndarray                    # float32 [Hq, R, D], the selected rows
    canary_ok: bool = True             # guard regions intact and every element written
    deterministic: bool | None = None  # two launches bitwise equal (None: not checked)
    full_hash: str | None = None       # sha1 of the full output bytes (cuda), for bitwise checks
    diff_source: object | None = None  # backend-private handle for cross-variant diffs


@runtime_checkable
class Backend(Protocol):
    """The interface the runner drives (docs/DESIGN.md, "Backends")."""

    name: str  # "numpy" | "cuda"
    #: Whether a kernel variant's ``compute`` output is the numerics model's own (numpy: the model
    #: is its "kernel"): the runner then takes it as the model's output and compares fewer rows.
    kernels_are_model: bool
    #: Whether ``model`` runs on the GPU: the runner then gives it more work per shape before it
    #: samples the rows the model runs on.
    model_on_gpu: bool

    def describe(self) -> dict[str, Any]:
        """Who runs the rows: backend, gpu, arch ("sm_90" / "cpu"), sm_count, mma ..."""

    def meta(self) -> dict[str, Any]:
        """Compile options, kernel source hashes, builds and launches (meta.json)."""

    def unsupported_parity(self, variant: str, problem) -> str | None:
        """Why ``variant`` cannot be checked on ``problem`` (one line), or None."""

    def unsupported_timing(self, variant: str, problem) -> str | None:
        """Why ``variant`` cannot be timed on ``problem`` (one line), or None."""

    def prepare(self, inputs) -> Any:
        """Upload one shape's inputs; the handle goes to compute, time, max_diff and release."""

    def launch(self, variant: str, problem) -> Launch:
        """The launch ``variant`` runs ``problem`` with here (pa_bench.launch.choose on this
        backend's device and pins); the numerics model follows its tile, split and segments."""

    def compute(self, prepared, variant: str, rows: np.ndarray | None,
                check_determinism: bool | None = None) -> KernelOutput:
        """``variant``'s output on the query ``rows`` (None: every row)."""

    def model(self, inputs, tile_keys: int, rows: np.ndarray | None = None, split_keys: int = 0,
              pv_chain_keys: int = 0, segment_keys: int | None = None,
              max_slack: float | None = None, input_rounding: str | None = None) -> np.ndarray:
        """The numerics model (pa_bench.numerics.model.model_attention) of the arithmetic given,
        float32 [Hq, R, D], on this backend's hardware (the same bits everywhere)."""

    def impl(self, prepared, variant: str) -> str | None:
        """What ran a peer on this shape (its ``impl()``), None for a kernel."""

    def max_diff(self, prepared, a: str, b: str) -> float | None:
        """Max abs difference of two computed variants' full outputs; None where the backend
        does not keep them (the runner then diffs the compared rows)."""

    def reference(self, inputs, rows: np.ndarray | None, quantised: bool = True) -> np.ndarray | None:
        """FP64 attention [Hq, R, D] on the dequantised int8 K/V (``quantised``), or on the
        float K/V (None where the inputs have none)."""

    def time(self, prepared, variants: list[str], settings: TimingSettings) -> dict[str, TimingResult | str]:
        """Time ``variants`` interleaved; a string is why that variant was not timed."""

    def compile_builds(self, problems, variants: list[str]) -> None:
        """Start compiling the builds a run of ``problems`` x ``variants`` needs, side by side, so
        that ``compute`` waits less (cuda: a process pool); nothing where nothing compiles."""

    def close(self) -> None:
        """End what ``compile_builds`` started; the run calls it once, whatever ended the walk."""

    def release(self, prepared) -> None:
        """Free what ``prepare`` allocated."""


__all__ = ["KernelOutput", "Backend"]
