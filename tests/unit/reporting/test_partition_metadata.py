"""Each partition's own metadata names its partition: an asset's Overview shows the metadata of the
partition written last, and a UI walk read hybrid+mmr's numbers there as the asset's (the
partition's name sits at the top of the page, out of view at the metadata)."""

import ast
from pathlib import Path

from assets.metadata import add_partition_metadata

ASSETS = Path(__file__).resolve().parents[3] / "assets"


class Recorder:
    def __init__(self):
        self.calls = []

    def add_asset_metadata(self, metadata, partition_key=None):
        self.calls.append((partition_key, metadata))


def test_a_partition_s_metadata_leads_with_its_key():
    context = Recorder()
    add_partition_metadata(context, "minilm-w150-o20|hybrid+mmr", {"hit@1": 0.5})
    ((key, metadata),) = context.calls
    assert key == "minilm-w150-o20|hybrid+mmr"
    assert list(metadata) == ["partition", "hit@1"] and metadata["partition"] == "minilm-w150-o20|hybrid+mmr"


def test_every_partition_s_metadata_goes_through_it():
    """No asset adds a partition's metadata on its own (it would lack the name)."""
    direct = []
    for path in sorted(ASSETS.glob("*.py")):
        if path.name == "metadata.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "add_asset_metadata":
                direct.append(f"{path.name}:{node.lineno}")
    assert direct == []
