"""The cells of the kernels table (``pa-bench kernels``): a built row's shared memory and async
copies as the terminal and the plain-text table show them, and the note on key segments. The rows
themselves come from :func:`pa_bench.backends.kernel_info.kernel_table`."""

from __future__ import annotations

from pa_bench import fmt

SEGMENTS_NOTE = ("key segments (contexts above 64K keys, and v3 on chunks of fewer than 128 CTAs: "
                 "pa_bench.launch.segment_keys): grid.z = ceil(keys / segment keys) CTAs per "
                 "row block, each on one segment, then pa_combine (a warp per row) merges them")


def smem_cell(row: dict) -> str:
    """The "smem B" cell of a built row: static bytes, and the dynamic bytes a kernel launches
    with where it has them (``219216 dynamic``; ``1024 + 219216 dynamic`` with both)."""
    static, dynamic = row.get("smem_bytes"), row.get("dynamic_smem_bytes")
    if dynamic is None:
        return str(static)
    return f"{dynamic} dynamic" if not static else f"{static} + {dynamic} dynamic"


def copy_kind(row: dict) -> str:
    """The "async copy" cell: cp.async (LDGSTS), bulk (cp.async.bulk, the TMA unit), or -."""
    kinds = [name for key, name in (("cp_async", "cp.async"), ("bulk_copy", "bulk")) if row.get(key)]
    return "+".join(kinds) or "-"


def format_table(rows: list[dict]) -> str:
    """A plain-text table of kernel_table's rows, and the key-segment note."""
    head = ["variant", "arch", "built", "regs", "spills", "smem B", "async copy", "mma", "combine regs", "CTA / reason"]
    lines = []
    for r in rows:
        if r["compiled"]:
            comb = r.get("combine_registers")
            lines.append([r["variant"], r["arch"], "yes", str(r["registers"]), str(r["spill_bytes"]),
                          smem_cell(r), copy_kind(r), r["mma"] or "-",
                          "-" if comb is None else str(comb),
                          r["cta"] + (f"; WGMMA SERIALISED by ptxas: {r['wgmma_serialized']}"
                                      if r.get("wgmma_serialized") else "")])
        else:
            lines.append([r["variant"], r["arch"], "no", "-", "-", "-", "-", "-", "-", r["reason"]])
    table = fmt.text_table(head, lines, right={3, 4, 5, 8})
    return "\n".join([table, f"With {SEGMENTS_NOTE}."])
