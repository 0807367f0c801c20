"""Plug-in ``v3-dq``: v3 with its conversion in a pass of its own before the kernel, the same bits
(pa_bench.backends.v3_controls). Not registered by default: ``--plugin pa_bench.backends.v3_dq``
or a config's ``plugins: [pa_bench.backends.v3_dq]``."""

from __future__ import annotations

from functools import partial

from pa_bench.backends import v3_controls
from pa_bench.backends.v3_controls import DQ_NAME as NAME
from pa_bench.backends.v3_controls import V3DQ

#: The build of v3 on images at v3's own launch on a problem (its rows and consumer step).
build_for = partial(v3_controls.build_for, kv_images=True)


def register() -> None:
    """Register ``v3-dq`` (once: loading the plug-in again leaves it as it is)."""
    v3_controls.register(V3DQ)


register()

__all__ = ["V3DQ", "NAME", "build_for", "register"]
