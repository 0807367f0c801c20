"""experiments/ncu_source_summary.py on a small hand-made source page (no GPU, no ncu)."""

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "ncu_source_summary.py"
spec = importlib.util.spec_from_file_location("ncu_source_summary", SCRIPT)
nss = importlib.util.module_from_spec(spec)
sys.modules["ncu_source_summary"] = nss   # its dataclasses look their module up
spec.loader.exec_module(nss)

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
          '"Instructions Executed","stall_barrier","stall_long_sb","stall_short_sb","stall_barrier (Not Issued)"')


def _row(addr, src, samples, executed, barrier=0, long_sb=0, short_sb=0):
    return f'"{addr}","{src}","{samples:,}","0","{executed:,}","{barrier}","{long_sb}","{short_sb}","999"'


def _page():
    # a prologue run once, a two-instruction loop run 1000 times whose branch into a spin-wait
    # holds most samples, and the spin-wait itself run 5000 times
    rows = [
        _row("0x7f00", "LDC R1, c[0x0][0x28]", 2, 1),
        _row("0x7f10", "IADD3 R2, R2, 0x1, RZ", 1, 1),
        _row("0x7f20", "@!P3 BRA 0x7f60", 60, 1000, long_sb=58),
        _row("0x7f30", "FMUL R4, R4, R5", 20, 1000, short_sb=15),
        _row("0x7f40", "EXIT", 1, 1),
        _row("0x7f60", "SYNCS.PHASECHK.TRANS64.TRYWAIT P3, [UR8]", 16, 5000, barrier=10),
    ]
    return ['"Kernel Name","pa_v3",', HEADER] + rows


def test_read_keeps_every_instruction_and_only_issued_stall_columns():
    instrs = nss.read(_page())
    assert [i.address for i in instrs] == ["0x7f00", "0x7f10", "0x7f20", "0x7f30", "0x7f40", "0x7f60"]
    assert instrs[2].samples == 60 and instrs[2].executed == 1000
    assert set(instrs[0].stalls) == {"barrier", "long_sb", "short_sb"}   # "(Not Issued)" left out
    assert instrs[5].stalls["barrier"] == 10


def test_stretches_split_where_the_execution_count_changes():
    instrs = nss.read(_page())
    assert nss.stretches(instrs) == [(0, 2), (2, 4), (4, 5), (5, 6)]


def test_summary_shares_add_up_and_name_the_loop_that_waits():
    text = nss.summary(nss.read(_page()), top=2, min_share=5)
    assert "100 warp-state samples" in text
    assert "long_sb 58.0" in text                      # kernel-wide reasons as % of all samples
    loop = next(line for line in text.splitlines() if "0x7f20" in line or "7f20-" in line)
    assert "80.0 %" in loop and "long_sb 58.0" in loop
    assert "0x7f00" not in text.split("stretches")[1].split("the 2")[0]   # 3 % prologue below 5 %
    top = text.split("the 2 instructions with the most samples:")[1].strip().splitlines()
    assert "BRA" in top[0] and "FMUL" in top[1]


def test_not_a_source_page_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "raw.csv"
    bad.write_text('"ID","Kernel Name"\n"0","pa_v3"\n')
    assert nss.main([str(bad)]) == 2
    assert "no 'Address' header" in capsys.readouterr().err
    with pytest.raises(ValueError):
        nss.read(['"Address","Source"', '"0x1","NOP"'])
