"""scripts/sass_loops.py on a made-up disassembly: which branches are loops, and what is counted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "sass_loops.py"
spec = importlib.util.spec_from_file_location("sass_loops", SCRIPT)
sass_loops = importlib.util.module_from_spec(spec)
sys.modules["sass_loops"] = sass_loops   # its dataclass looks its module up
spec.loader.exec_module(sass_loops)

SASS = """
	code for sm_90a
		Function : pa_other
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/              @!P0 BRA 0x0 ;
		Function : pa_v3
        /*0000*/                   MOV R1, c[0x0][0x28] ;                 /* 0x00000a0000017a02 */
        /*0010*/                   IMAD.WIDE.U32 R2, R0, 0x4, R2 ;
        /*0020*/                   FMUL R4, R4, R5 ;
        /*0030*/                   FMUL.FTZ R6, R6, R5 ;
        /*0040*/                   HGMMA.64x64x16.F32 R24, gdesc[UR4], RZ, !UPT ;
        /*0050*/               @P1 BRA 0x30 ;
        /*0060*/              @!P2 BRA 0x10 ;
        /*0070*/                   BRA 0x0 ;
        /*0080*/                   EXIT ;
"""


def test_the_function_is_cut_out_by_name():
    ins = sass_loops.function_instructions(SASS, "pa_v3")
    assert [a for a, _ in ins] == [0x0, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80]
    assert ins[2][1] == "FMUL R4, R4, R5"


def test_opcodes_drop_predicates_and_modifiers():
    assert sass_loops.opcode("@!P0 IMAD.WIDE.U32 R2, R0, 0x4, R2") == "IMAD"
    assert sass_loops.opcode("HGMMA.64x64x16.F32 R24, gdesc[UR4], RZ, !UPT") == "HGMMA"


def test_conditional_backward_branches_are_loops_and_an_unconditional_one_is_not():
    ins = sass_loops.function_instructions(SASS, "pa_v3")
    found = sass_loops.loops(ins, min_body=2)
    assert [(lp.start, lp.end, lp.length) for lp in found] == [(0x30, 0x50, 3), (0x10, 0x60, 6)]
    inner = found[0]
    assert inner.mix == {"FMUL": 1, "HGMMA": 1, "BRA": 1}
    assert sass_loops.loops(ins, min_body=4) == found[1:]   # the short one is below the floor


ROLES = """
		Function : pa_v3
        /*0000*/                   ISETP.GT.AND P0, PT, R0, 0x7f, PT ;
        /*0010*/               @P0 BRA 0x60 ;
        /*0020*/                   USETMAXREG.DEALLOC.CTAPOOL 0x48 ;
        /*0030*/                   LDGSTS.E.BYPASS.128 [R53], desc[UR20][R2.64] ;
        /*0040*/              @!P1 BRA 0x30 ;
        /*0050*/                   EXIT ;
        /*0060*/                   USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xd8 ;
        /*0070*/                   CALL.REL.NOINC 0xb0 ;
        /*0080*/                   STS.128 [R4], R196 ;
        /*0090*/                   EXIT ;
        /*00a0*/                   MOV R250, R251 ;
        /*00b0*/                   IMAD R7, R8, R9, RZ ;
        /*00c0*/                   RET.REL.NODEC R6 0x0 ;
"""


def test_each_setmaxnreg_region_counts_the_registers_its_reachable_code_names():
    """The producer (after the dealloc) reaches its loop and exit only; the consumer (after the
    alloc) its call's body too, and a 128-bit store names four registers; code that nothing reaches
    (R250 at 0xa0) counts for neither."""
    ins = sass_loops.function_instructions(ROLES, "pa_v3")
    assert [a for a, _ in sass_loops.reachable(ins, 0x20)] == [0x20, 0x30, 0x40, 0x50]
    assert [a for a, _ in sass_loops.reachable(ins, 0x60)] == [0x60, 0x70, 0x80, 0x90, 0xb0, 0xc0]
    assert sass_loops.setmaxnreg_regions(ins) == [(0x20, "DEALLOC", 72, 54), (0x60, "TRY_ALLOC", 216, 200)]


def test_between_waits_counts_the_softmax_and_the_branches_under_pv():
    sass = "\n".join([
        "HGMMA.64x128x16.F32 R24, R120, gdesc[UR4].tnspB, R24, gsb0 ;",
        "WARPGROUP.DEPBAR.LE gsb0, 0x1 ;", "MUFU.EX2 R1, R1 ;", "@!P0 BRA 0x5b20 ;", "MUFU.EX2 R2, R2 ;",
        "WARPGROUP.DEPBAR.LE gsb0, 0x0 ;", "MUFU.EX2 R3, R3 ;",
        "WARPGROUP.DEPBAR.LE gsb0, 0x1 ;", "WARPGROUP.DEPBAR.LE gsb0, 0x0 ;", "MUFU.EX2 R4, R4 ;",
        "WARPGROUP.DEPBAR.LE gsb0, 0x0 ;"])
    assert sass_loops.between_waits(sass.splitlines()) == [{"exp2": 2, "branches": 1}, {"exp2": 0, "branches": 0}]


def test_registers_used_counts_a_128_bit_operation_s_data_four_wide_but_its_address_as_named():
    """An LDS.128's destination holds four registers (R8..R11), the address in brackets only the
    one it names: `[R30+0x10]` must not make R30..R33 count."""
    assert sass_loops.registers_used([(0, "LDS.128 R8, [R30+0x10] ;")]) == 31
    assert sass_loops.registers_used([(0, "LDS.128 R40, [R30] ;")]) == 44
    assert sass_loops.registers_used([(0, "LDG.E.64 R2, desc[UR4][R6.64] ;")]) == 8      # the pair R6, R7
    assert sass_loops.registers_used([(0, "LDGSTS.E.BYPASS.128 [R9], desc[UR4][R2.64] ;")]) == 10
    assert sass_loops.registers_used([(0, "@P0 STS.128 [R3], R12 ;")]) == 16
