"""The Launchpad pre-fills every config default, `pgvector_store`'s chunking included: a run
launched from it without touching anything must not count those defaults as the user's
chunking, or the index sweep cannot be launched from the UI at all (issue #28, item 1). A
chunking value that differs from the default is still refused: the variants file sets each
index's chunking."""

from __future__ import annotations

from eval_pipeline.config.sweep import load_sweep

SWEEP = """\
indexes:
  - embedder: bundled
    chunking: {split_length: 150, split_overlap: 20}
  - name: minilm-w60
    chunking: {split_length: 60, split_overlap: 10}
variants:
  - engine: pg-dense
"""


def validate(tmp_path, store_config: dict) -> str:
    from assets import validate_run_config
    from assets.store import StoreConfig

    path = tmp_path / "v.yaml"
    path.write_text(SWEEP)
    defaults = {k: f.default for k, f in StoreConfig.model_fields.items()}
    given = {k: defaults[k] if v == "DEFAULT" else v for k, v in store_config.items()}
    try:
        validate_run_config({"ops": {"pgvector_store": {"config": given}}}, load_sweep(path))
    except ValueError as exc:
        return str(exc)
    return "accepted"


def test_the_launchpad_s_prefilled_chunking_defaults_are_not_the_user_s_setting(tmp_path):
    given = {k: "DEFAULT" for k in ("split_by", "split_length", "split_overlap", "embed_title")}
    assert validate(tmp_path, given) == "accepted"


def test_a_chunking_value_other_than_the_default_is_still_refused(tmp_path):
    out = validate(tmp_path, {"split_by": "DEFAULT", "split_length": 30})
    assert out.startswith("ops.pgvector_store.config.split_length: the variants file"), out
