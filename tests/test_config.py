"""Config loading and validation: every bad input is a one-line ConfigError naming file and key."""

import math
from pathlib import Path

import pytest
import yaml

from pa_bench.problem.config import (CONFIG_DIR, DEFAULT_CONFIG, Config, ParitySettings, RefFigure,
                             TimingSettings, load_config)
from pa_bench.errors import ConfigError, PaBenchError, ShapeError
from pa_bench.problem.shapes import parse_shape

MINIMAL = "name: t\nshapes: [1Kx16]\n"


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def config_error(tmp_path, text) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message
    assert "\n" not in message
    assert isinstance(info.value, PaBenchError)
    return message


# ---------------------------------------------------------------------- shipped configs


def test_default_config_is_the_pr_config():
    assert DEFAULT_CONFIG == CONFIG_DIR / "pr2092.yaml"
    assert DEFAULT_CONFIG.is_file()
    assert Path(DEFAULT_CONFIG).parent.parent == Path(__file__).resolve().parent.parent


def test_pr2092_config():
    c = load_config(DEFAULT_CONFIG)
    assert c.name == "pr2092"
    assert [(s.context, s.queries) for s in c.shapes] == [
        (32768, 1024), (65536, 512), (0, 1536), (2150, 256)]
    assert [s.label for s in c.shapes] == ["32Kx1024", "64Kx512", "1.5K", "2.1Kx256"]
    assert "1536" in c.description and "no" in c.description  # says how 1.5K is read
    assert (c.heads_q, c.heads_kv, c.head_dim, c.layout, c.page, c.data) == (
        32, 8, 128, "paged", 64, "normal")
    assert c.variants == ("v1", "v2", "v2t", "v3", "triton", "torch-sdpa", "torch-sdpa-flash", "torch-sdpa-cudnn",
                          "torch-sdpa+dequant", "torch-flex")
    assert c.softmax_scale is None and c.resolved_softmax_scale == pytest.approx(128 ** -0.5)
    src = c.reference.source
    for word in ("2080 Ti", "sm_75", "1650 MHz", "CUDA 13.0", "595"):
        assert word in src
    v1 = [c.ref_figure(s, "v1").ms for s in c.shapes]
    v2t = [c.ref_figure(s, "v2t") for s in c.shapes]
    assert v1 == [13.0, 6.7, 6.2, 3.2]
    assert [f.ms for f in v2t] == [7.6, 4.8, 5.0, 2.3]
    assert [f.err for f in v2t] == [3.7e-6, 4.9e-6, 4.5e-6, 3.8e-6]
    # The third row is found by its label, its string in the file and its exact numbers.
    figs = c.reference.figures
    assert figs["1.5K"] is figs["0x1536"] is figs.get(c.shapes[2])
    assert "0x1536" in figs and c.ref_figure("2150x256", "v1") == RefFigure(ms=3.2)
    assert c.ref_figure("1.5K", "v2") is None


def test_smoke_and_sweep_configs():
    smoke = load_config(CONFIG_DIR / "smoke.yaml")
    assert smoke.variants == ("v1", "v2", "v2t")
    assert all(s.context + s.queries <= 2048 for s in smoke.shapes)
    assert (1023, 113) in [(s.context, s.queries) for s in smoke.shapes]
    assert any(s.context == 0 for s in smoke.shapes)
    sweep = load_config(CONFIG_DIR / "sweep.yaml")
    contexts = sorted({s.context for s in sweep.shapes})
    queries = sorted({s.queries for s in sweep.shapes})
    assert contexts == [1024 * 2 ** i for i in range(8)]  # 1K .. 128K
    assert queries[0] == 256 and queries[-1] == 2048
    assert {"v1", "v2", "v2t", "torch-sdpa"} <= set(sweep.variants)


def test_bare_name_finds_shipped_config():
    assert load_config("smoke").name == "smoke"


# ---------------------------------------------------------------------- defaults, YAML rules


def test_minimal_config_gets_defaults(tmp_path):
    c = load_config(write(tmp_path, MINIMAL))
    assert c.timing == TimingSettings() and c.parity == ParitySettings()
    assert (c.heads_q, c.heads_kv, c.head_dim, c.page, c.out_dtype) == (32, 8, 128, 64, "float32")
    assert c.reference is None and c.description == ""
    assert c.path == str(tmp_path / "c.yaml")


def test_unquoted_0x_shape_is_not_hex(tmp_path):
    c = load_config(write(tmp_path, "name: t\nshapes: [0x1536, {shape: 0x96, label: first}]\n"))
    assert [(s.context, s.queries) for s in c.shapes] == [(0, 1536), (0, 96)]
    assert c.shapes[1].label == "first"


def test_yaml12_scalars(tmp_path):
    c = load_config(write(tmp_path, MINIMAL + "softmax_scale: 1e-1\nparity: {determinism: false}\n"))
    assert c.softmax_scale == 0.1 and c.parity.determinism is False
    msg = config_error(tmp_path, MINIMAL + "force_turing: yes\n")
    assert "force_turing" in msg  # only true/false are booleans


# ---------------------------------------------------------------------- unknown keys


def test_unknown_top_level_key(tmp_path):
    msg = config_error(tmp_path, MINIMAL + "timming: {}\n")
    assert "unknown key 'timming'" in msg and "did you mean 'timing'" in msg
    assert "known:" in msg


@pytest.mark.parametrize("section, key", [
    ("timing", "foo"), ("parity", "sample_row"), ("reference", "sauce")])
def test_unknown_nested_key(tmp_path, section, key):
    msg = config_error(tmp_path, MINIMAL + f"{section}: {{{key}: 1}}\n")
    assert f"unknown key '{section}.{key}'" in msg


def test_unknown_keys_deeper(tmp_path):
    ref = "reference:\n  source: x\n  figures:\n    1Kx16: {v1: {ms: 1.0, msec: 2}}\n"
    assert "reference.figures.1Kx16.v1.msec" in config_error(tmp_path, MINIMAL + ref)
    ref = "reference:\n  source: x\n  figures:\n    1Kx16: {v9: {ms: 1.0}}\n"
    assert "v9" in config_error(tmp_path, MINIMAL + ref)
    msg = config_error(tmp_path, "name: t\nshapes: [{shape: 1Kx16, lable: a}]\n")
    assert "shapes[0].lable" in msg


# ---------------------------------------------------------------------- file problems


def test_missing_file_is_one_line(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (f"{path}: config file not found (packaged configs, by name: "
                               "long, pr2092, prompt98k, smoke, sweep)")


def test_yaml_syntax_error_is_one_line(tmp_path):
    msg = config_error(tmp_path, "name: t\nshapes: [1Kx16\nheads_q: 4\n")
    assert "invalid YAML" in msg and "line" in msg


@pytest.mark.parametrize("text, words", [
    ("", ["empty"]),
    ("- a\n- b\n", ["mapping"]),
    ("shapes: [1Kx16]\n", ["missing", "name"]),
    ("name: t\n", ["missing", "shapes"]),
    ("name: t\nname: u\nshapes: [1Kx1]\n", ["duplicate", "name"]),
])
def test_structural_errors(tmp_path, text, words):
    msg = config_error(tmp_path, text)
    for w in words:
        assert w in msg


# ---------------------------------------------------------------------- bad values


@pytest.mark.parametrize("extra, words", [
    ("heads_kv: 3\n", ["heads_kv", "divide", "32"]),
    ("heads_q: 0\n", ["heads_q", "at least 1"]),
    ("heads_q: 4.0\n", ["heads_q", "integer"]),
    ("heads_q: true\n", ["heads_q", "integer"]),
    ("head_dim: 96\n", ["head_dim", "64", "128"]),
    ("page: 48\n", ["page", "power of two"]),
    ("page: 8\n", ["page", "power of two"]),
    ("layout: strided\n", ["layout", "paged"]),
    ("data: uniform\n", ["data", "realistic"]),
    ("data: npz\n", ["data_file", "required"]),
    ("data: npz\ndata_file: missing.npz\n", ["data_file", "not found"]),
    ("out_dtype: bf16\n", ["out_dtype", "float16"]),
    ("softmax_scale: -1\n", ["softmax_scale", "greater than 0"]),
    ("softmax_scale: fast\n", ["softmax_scale", "number"]),
    ("seed: -1\n", ["seed"]),
    ("variants: [v1, v9]\n", ["variants", "'v9'"]),
    ("variants: [v1, v1]\n", ["variants", "twice"]),
    ("variants: []\n", ["variants"]),
    ("timing: {warmup: -1}\n", ["timing.warmup"]),
    ("timing: {max_noise: 0}\n", ["timing.max_noise"]),
    ("timing: {min_samples: 20, max_samples: 10}\n", ["timing.max_samples", "min_samples"]),
    ("timing: {hot: 1}\n", ["timing.hot", "true or false"]),
    ("timing: {l2_flush: memset}\n", ["timing.l2_flush", "read, discard", "memset"]),
    ("parity: {sample_rows: 0}\n", ["parity.sample_rows"]),
    ("name: has space\n", ["name"]),
])
def test_bad_values_are_named(tmp_path, extra, words):
    text = MINIMAL if extra.startswith("name:") is False else "shapes: [1Kx16]\n"
    msg = config_error(tmp_path, text + extra)
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize("shapes, words", [
    ("[32Kx1024, bogus]", ["shapes[1]", "'bogus'", "CTXxQ"]),
    ("[]", ["shapes", "non-empty"]),
    ("[1024]", ["shapes[0]", "quote"]),
    ("[1Kx16, 1024x16]", ["shapes[1]", "twice"]),
    ("[{label: x}]", ["shapes[0]", "'shape'"]),
])
def test_bad_shapes_in_config(tmp_path, shapes, words):
    msg = config_error(tmp_path, f"name: t\nshapes: {shapes}\n")
    for w in words:
        assert w in msg, msg


def test_reference_key_must_be_a_shape(tmp_path):
    ref = "reference:\n  source: x\n  figures:\n    2Kx16: {v1: {ms: 1.0}}\n"
    msg = config_error(tmp_path, MINIMAL + ref)
    assert "reference.figures.2Kx16" in msg and "not one of the config's shapes" in msg
    ref = "reference:\n  source: x\n  figures:\n    1Kx16: {v1: {ms: -1.0}}\n"
    assert "reference.figures.1Kx16.v1.ms" in config_error(tmp_path, MINIMAL + ref)


def test_npz_data_file_is_relative_to_config(tmp_path):
    sub = tmp_path / "cfg"
    sub.mkdir()
    (sub / "cap.npz").write_bytes(b"")
    c = load_config(write(sub, MINIMAL + "data: npz\ndata_file: cap.npz\n"))
    assert c.data_file == str((sub / "cap.npz").resolve())


# ---------------------------------------------------------------------- overrides


def test_overrides_return_a_validated_copy():
    base = load_config(DEFAULT_CONFIG)
    c = base.with_overrides(shapes="32Kx1024,1023x113", variants="v1,v2t", layout="contiguous",
                            hot=True, max_seconds=3, sample_rows=64, seed=None)
    assert [s.label for s in c.shapes] == ["32Kx1024", "1023x113"]
    assert c.variants == ("v1", "v2t") and c.layout == "contiguous"
    assert c.timing.hot is True and c.timing.max_seconds == 3.0 and c.parity.sample_rows == 64
    assert c.seed == base.seed and c.path == base.path  # None: not overridden
    # The base is untouched; figures of shapes no longer in the config are dropped.
    assert len(base.shapes) == 4 and base.layout == "paged"
    assert list(c.reference.figures) == ["32Kx1024"]
    assert c.ref_figure(c.shapes[0], "v2t").ms == 7.6


def test_overrides_accept_lists_and_settings():
    base = load_config(DEFAULT_CONFIG)
    c = base.with_overrides(shapes=[parse_shape("0x1536", "1.5K")], variants=["v2"],
                            timing={"warmup": 1}, parity=ParitySettings(determinism=False))
    assert c.shapes[0].label == "1.5K" and c.ref_figure("1.5K", "v1").ms == 6.2
    assert c.timing.warmup == 1 and c.parity.determinism is False


@pytest.mark.parametrize("kw, err, words", [
    ({"page": 48}, ConfigError, ["page", "power of two"]),
    ({"heads_kv": 5}, ConfigError, ["heads_kv", "divide"]),
    ({"variants": "v1,v7"}, ConfigError, ["'v7'"]),
    ({"pagee": 64}, ConfigError, ["unknown key 'pagee'", "did you mean 'page'"]),
    ({"shapes": "32Kx"}, ShapeError, ["'32Kx'"]),
    ({"max_seconds": 0}, ConfigError, ["timing.max_seconds"]),
])
def test_bad_overrides(kw, err, words):
    with pytest.raises(err) as info:
        load_config(DEFAULT_CONFIG).with_overrides(**kw)
    for w in words:
        assert w in str(info.value)


def test_to_dict_round_trip(tmp_path):
    for name in ("pr2092", "smoke", "sweep"):
        c = load_config(name)
        again = load_config(write(tmp_path, yaml.safe_dump(c.to_dict()), f"{name}.yaml"))
        assert again.to_dict() == c.to_dict()
        assert again.shapes == c.shapes
    # Figures are written with the shape strings as in `shapes` (records' `shape` column).
    figures = load_config("pr2092").to_dict()["reference"]["figures"]
    assert list(figures) == ["32Kx1024", "64Kx512", "0x1536", "2.1Kx256"]


def test_config_is_frozen():
    c = load_config(DEFAULT_CONFIG)
    with pytest.raises(Exception):
        c.page = 16
    assert isinstance(c, Config) and math.isclose(c.timing.max_noise, 0.005)


def test_every_row_has_one_value_and_the_command_line_beats_the_config(tmp_path):
    from pa_bench.problem.config import ALL_ROWS, config_from_dict

    c = load_config(write(tmp_path, MINIMAL + "parity: {sample_rows: null, numpy_sample_rows: all}\n"))
    assert c.parity.sample_rows == c.parity.numpy_sample_rows == ALL_ROWS
    assert c.to_dict()["parity"]["sample_rows"] is None       # written as the YAML writes it
    assert config_from_dict(c.to_dict(), where="meta").parity == c.parity
    assert c.with_overrides(sample_rows=5).with_overrides(sample_rows=ALL_ROWS).parity.sample_rows == ALL_ROWS
    p = c.with_overrides(numpy_sample_rows=8).parity
    assert (p.rows_for(numpy=True), p.rows_for(numpy=False), p.rows_for(numpy=True, given=3)) == (8, ALL_ROWS, 3)
    assert "parity.numpy_sample_rows" in config_error(tmp_path, MINIMAL + "parity: {numpy_sample_rows: some}\n")


def test_the_models_mma_is_a_checked_config_key_that_reaches_the_backend(tmp_path):
    from pa_bench.backends import make_backend

    assert "parity.mma" in config_error(tmp_path, MINIMAL + "parity: {mma: fast}\n")
    c = load_config(write(tmp_path, MINIMAL + "parity: {mma: rn}\n"))
    assert c.parity.mma == "rn" and load_config(write(tmp_path, MINIMAL)).parity.mma == "emulated"
    assert make_backend("numpy", c).mma == "rn"
