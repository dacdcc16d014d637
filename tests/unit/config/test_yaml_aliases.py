"""A variants file that expands, through YAML aliases, into more values than any real file
holds (a "billion laughs" bomb) is refused when it is read, naming the file, in well under a
second: the code location never hangs nor exhausts memory (issue #25, item 9). Ordinary
anchors and aliases (one setting shared by a few variants) still work."""

from __future__ import annotations

import time

import pytest

from eval_pipeline.config.sweep import load_sweep
from eval_pipeline.ranking.variants import VariantConfigError


PLACES = {
    "a variant's name": "variants:\n  - engine: bm25\n    name: {bomb}\n",
    "an unknown variant setting": "variants:\n  - engine: bm25\n    colour: {bomb}\n",
    "a reranker option": "variants:\n  - engine: bm25\n    reranker: {{kind: mmr, lambda_: {bomb}}}\n",
    "a gate tolerance": "variants:\n  - engine: bm25\ngate:\n  tolerances: {{mrr: {bomb}}}\n",
    "an unknown top-level key": "variants:\n  - engine: bm25\nextra: {bomb}\n",
}


def bomb(place: str, levels: int = 9) -> str:
    """The bomb inline, where the setting is: a list whose items anchor 9 copies of the one before."""
    items = ['&a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    items += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return PLACES[place].format(bomb="[" + ", ".join(items) + "]")


@pytest.mark.parametrize("place", list(PLACES))
def test_an_alias_bomb_is_refused_quickly_naming_the_file(tmp_path, place):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb(place))
    started = time.monotonic()
    with pytest.raises(VariantConfigError) as err:
        load_sweep(path)
    assert time.monotonic() - started < 2
    message = str(err.value)
    assert str(path) in message and "alias" in message and len(message) < 500


def test_a_few_shared_settings_through_aliases_still_load(tmp_path):
    path = tmp_path / "shared.yaml"
    path.write_text("variants:\n  - &h {engine: hybrid, fusion: rrf, rrf_k: 60, name: h1}\n"
                    "  - {<<: *h, name: h2}\n")
    sweep = load_sweep(path)
    assert list(sweep.keys) == ["h1", "h2"]
