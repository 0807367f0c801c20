"""``v3-f16-n128``: the v3-f16 control (pa_bench/peers/v3_f16.py) at 128-key tiles.

kernels/v3.cu built with ``-DPA_KV_F16=1 -DPA_V3_BN=128`` (``KernelBuild.tile_keys``): S of 128
keys per step, K and V in separate stage rings (a K stage released after S, a V stage after P.V),
Q as S's shared-memory operand, setmaxnreg 40 for the copy-only producer and 232 for the consumers
(the kernel's opening comment). Everything else is v3-f16's: the fp16 K/V it reads, the grid, v3's
key segments (rounded up to whole 128-key tiles) and pa_combine. It asks what 128-key tiles give
v3's consumer loop.

Not registered by default (nothing of it has been measured): load it as a plug-in,
``--plugin pa_bench.peers.v3_f16_n128``. Loading it loads v3-f16 too (the class it sets to
128-key tiles), so the two controls run side by side.
"""

from __future__ import annotations

from pa_bench import variants as registry
from pa_bench.peers import register_peer
from pa_bench.peers.v3_f16 import V3F16

NAME = "v3-f16-n128"


class V3F16N128(V3F16):
    name = NAME
    summary = ("control: v3-f16 at 128-key tiles, K and V in separate stage rings (a K stage released "
               "after S, a V stage after P.V), fp16 K/V copied by cp.async")
    tile_keys = 128


def register() -> None:
    """Register ``v3-f16-n128`` (once: loading the plug-in again leaves it as it is)."""
    if registry.find(NAME) is None:
        register_peer(V3F16N128)


register()

__all__ = ["V3F16N128", "NAME", "register"]
