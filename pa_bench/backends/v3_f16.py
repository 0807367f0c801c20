"""Plug-in ``v3-f16``: v3's consumer loop on fp16 K/V, the control that says what int8 K/V costs v3
(pa_bench.backends.v3_controls). Not registered by default: ``--plugin pa_bench.backends.v3_f16``
or a config's ``plugins: [pa_bench.backends.v3_f16]``."""

from __future__ import annotations

from functools import partial

from pa_bench.backends import v3_controls
from pa_bench.backends.v3_controls import F16_NAME as NAME
from pa_bench.backends.v3_controls import V3F16

#: The control's build on a problem: v3's launch, fp16 K/V and a copy-only producer.
build_for = partial(v3_controls.build_for, kv_f16=True)


def register() -> None:
    """Register ``v3-f16`` (once: loading the plug-in again leaves it as it is)."""
    v3_controls.register(V3F16)


register()

__all__ = ["V3F16", "NAME", "build_for", "register"]
