"""The one formatter: numbers, CUDA versions, one-line errors, plain-text tables."""

import math

from pa_bench import fmt


def test_numbers_and_missing_values():
    assert fmt.ms(13.04567) == "13.046" and fmt.ms(0.012345) == "0.0123"
    assert fmt.ms(None) == fmt.ms(math.nan) == "–" and fmt.ms(None, "-") == "-"
    assert fmt.err(3.7e-6) == "3.70e-06" and fmt.err("x") == "–"
    assert fmt.ratio(1.234) == "1.23" and fmt.ratio(1.234, suffix="x") == "1.23x"
    assert fmt.speedup(1.71, 1.7, 1.72) == "1.71x [1.70–1.72]" and fmt.speedup(1.71, None, 2) == "1.71x"
    assert fmt.speedup(None, 1, 2, missing="-") == "-"
    assert fmt.pct(0.1, "+.1f") == "+10.0%" and fmt.pct(-0.0123) == "-1.23%"
    assert fmt.fixed(1965.4, 0) == "1965" and fmt.rate(145.2) == "145" and fmt.rate(24.91) == "24.9"


def test_cuda_version():
    assert fmt.cuda_version(13000) == "13.0" and fmt.cuda_version(12040) == "12.4"
    assert fmt.cuda_version(0) is None and fmt.cuda_version(None) is None


def test_one_line_errors():
    assert fmt.first_line(ValueError("\n  bad k\nmore")) == "bad k"
    assert fmt.first_line(KeyError()) == "KeyError"
    log = RuntimeError("compile log\nkernel.cu(3): error: expected ;\nwarning")
    assert fmt.error_line(log) == "kernel.cu(3): error: expected ;"
    assert fmt.error_line(RuntimeError("plain")) == "plain"
    assert fmt.one_line("a\n b\n") == "a b" and fmt.one_line("1\n2\n3\n4") == "1"


def test_text_table_aligns_columns():
    lines = fmt.text_table(["name", "ms"], [["v1", "1.500"], ["v2t", "10.250"]], right={1}).splitlines()
    assert len(lines) == 4 and lines[0].split() == ["name", "ms"] and set(lines[1]) == {"─"}
    assert lines[2].startswith("v1 ") and lines[3].startswith("v2t ")
    assert lines[2].endswith("1.500") and len(lines[2]) == len(lines[3])  # right-aligned
