"""The variants file's `gate:` block: a mistake in it is named, with its line, before any work."""

from __future__ import annotations

import pytest

from eval_pipeline.config.sweep import load_sweep
from eval_pipeline.ranking.variants import VariantConfigError

HEAD = "variants:\n  - engine: bm25\n  - engine: pg-dense\n"


def _load(tmp_path, gate: str):
    path = tmp_path / "variants.yaml"
    path.write_text(HEAD + gate)
    return path, lambda: load_sweep(path)


@pytest.mark.parametrize("key", ["tolerance", "stirct"])
def test_a_misspelled_gate_setting_is_named_with_its_line(tmp_path, key):
    path, load = _load(tmp_path, f"gate:\n  {key}: true\n")
    with pytest.raises(VariantConfigError) as raised:
        load()
    assert str(raised.value) == (f"{path}:5: gate: unknown setting(s) ['{key}']; valid: 'tolerances', 'strict', "
                                 "'effect'")


def test_a_bad_tolerance_is_named_with_the_line_of_the_tolerances(tmp_path):
    path, load = _load(tmp_path, "gate:\n  strict: false\n  tolerances:\n    hit@1: 50%\n")
    with pytest.raises(VariantConfigError, match=rf"^{path}:7: gate.tolerances: gate tolerance for 'hit@1'"):
        load()


def test_a_decimal_comma_in_a_flow_mapping_is_explained(tmp_path):
    """`{hit@1: 0,05}` is two entries in YAML, `hit@1: 0` and `05` (the number 5): said so, not
    "unknown metric 5"."""
    path, load = _load(tmp_path, "gate: {tolerances: {hit@1: 0,05}}\n")
    expected = (r"gate tolerance names 5, which is not a metric name \(a decimal comma in a \{\.\.\.\} mapping, "
                r"`hit@1: 0,05`, splits one entry in two: write 0\.05\)")
    with pytest.raises(VariantConfigError, match=expected):
        load()


def test_a_key_that_is_not_text_nor_a_number_is_named_without_the_comma_hint(tmp_path):
    path, load = _load(tmp_path, "gate:\n  tolerances:\n    true: 0.05\n")
    with pytest.raises(VariantConfigError) as raised:
        load()
    assert "gate tolerance names True, which is not a metric name; valid metrics:" in str(raised.value)
