"""``v3-n128``: v3 at 128-key tiles, as a plug-in kernel variant.

kernels/v3.cu built with ``-DPA_V3_BN=128`` (the kernel's opening comment): S of 128 keys per
step, K and V in separate stage rings (a K stage released after S, a V stage after P.V), Q as S's
shared-memory operand, each tile staged by the TMA unit as two 64-key halves (K apart from V) and
converted to fp16 by the producer warpgroup; setmaxnreg 40 for the producer, 232 for the
consumers. The same function (``pa_v3``), arguments, grid and pa_combine as v3.

Its numerics model is v3's at 128-key tiles (``tile_keys=128``): the softmax's maximum, rescale and
row sums per 128 keys; P.V accumulates straight into O as in v3 (``pv_chain_keys`` 0: one MMA
chain over the keys of a segment). Its key segments are v3's rule in whole 128-key tiles
(``pa_bench.numerics.model.segment_keys`` rounds to the variant's tile).

Not registered by default (nothing of it has been measured): load it as a plug-in,
``--plugin pa_bench.v3_n128``.
"""

from __future__ import annotations

from pa_bench import variants as registry
from pa_bench.backends import kernels

NAME = "v3-n128"


def register() -> None:
    """Register ``v3-n128`` (once: loading the plug-in again leaves it as it is)."""
    if registry.find(NAME) is not None:
        return
    v3 = registry.get("v3")
    registry.register(registry.Variant(
        NAME, registry.CUDA_KERNEL,
        "v3 at 128-key tiles: K and V staged apart (a K stage released after S, a V stage after P.V), "
        "two 64-key int8 halves a tile",
        source=v3.source, min_arch=v3.min_arch, max_arch=v3.max_arch, arch_suffix=v3.arch_suffix,
        arch_needs=v3.arch_needs, tile_keys=128, threads=v3.threads,
        cta="384 threads: a producer warpgroup + 2 consumer warpgroups x 64 rows (the query heads of one KV "
            "group packed into the rows); 221 KB of dynamic shared memory at D=128",
        turing_path=False, fill_rows=v3.fill_rows, defines=("-DPA_V3_BN=128",), function="pa_v3",
        geometry=kernels.kv_group_rows))


register()

__all__ = ["NAME", "register"]
