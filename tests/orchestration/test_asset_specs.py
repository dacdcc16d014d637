"""What the Catalog shows beside each asset (issue #28, item 10): its kinds (the icons a user
filters by: postgres and pgvector for the store, pandas for the DataFrames, markdown for the
report) and an owner. Both are set in one place, definitions.ASSET_KINDS and OWNERS, applied to
every asset of the Definitions by `map_asset_specs`."""


def _specs():
    import definitions

    repository = definitions.defs.get_repository_def()
    return {key.to_user_string(): assets_def.specs_by_key[key]
            for key, assets_def in repository.assets_defs_by_key.items()}


def test_every_asset_of_the_code_location_has_kinds_and_an_owner():
    specs = _specs()
    assert len(specs) >= 11, sorted(specs)
    for name, spec in specs.items():
        assert spec.kinds, f"{name} has no kinds"
        assert spec.owners, f"{name} has no owner"
        assert all(o.startswith("team:") or "@" in o for o in spec.owners), (name, spec.owners)
        assert len(spec.kinds) <= 3, (name, spec.kinds)  # the Catalog shows three


def test_the_kinds_say_what_each_asset_is():
    specs = _specs()
    assert {"postgres", "pgvector"} <= specs["pgvector_store"].kinds
    assert "markdown" in specs["report"].kinds
    for frames in ("ranked_results", "variant_metrics", "answers", "graded_answers", "answer_metrics"):
        assert "pandas" in specs[frames].kinds, (frames, specs[frames].kinds)
    for python_object in ("corpus_snapshot", "question_set", "golden_prompts", "verdict"):
        assert "python" in specs[python_object].kinds, (python_object, specs[python_object].kinds)


def test_every_asset_the_code_location_builds_has_its_own_kinds():
    """An asset added without an entry in ASSET_KINDS would show as a plain `python` asset (the
    code location still loads: the Catalog's decoration never breaks it); this test asks for it."""
    import definitions

    missing = set(_specs()) - set(definitions.ASSET_KINDS)
    assert not missing, f"add {sorted(missing)} to ASSET_KINDS in definitions.py"
    from dagster import AssetSpec

    assert definitions.with_kinds_and_owner(AssetSpec("new_asset")).kinds == {"python"}


def test_the_mapped_assets_keep_everything_else():
    """map_asset_specs only adds: descriptions, groups, partitions and metadata are the assets' own."""
    import definitions

    specs = _specs()
    for assets_def in definitions.ALL_ASSETS:
        for key, own in assets_def.specs_by_key.items():
            mapped = specs[key.to_user_string()]
            assert (mapped.description, mapped.group_name, mapped.partitions_def) == \
                   (own.description, own.group_name, own.partitions_def)
            assert not own.kinds  # the assets themselves stay as the factories build them
