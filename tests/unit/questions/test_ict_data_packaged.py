"""The ICT generator's off-domain text ships in the wheel: an installed package (not an editable
checkout) would otherwise fail to build the abstention slice (issue #30)."""

import tomllib
from fnmatch import fnmatch
from pathlib import Path

import eval_pipeline
from eval_pipeline.questions.ict import OFFDOMAIN_TEXT

REPO = Path(__file__).resolve().parents[3]


def test_package_data_covers_the_offdomain_text():
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    relative = OFFDOMAIN_TEXT.relative_to(Path(eval_pipeline.__file__).parent).as_posix()
    assert OFFDOMAIN_TEXT.is_file()
    assert any(fnmatch(relative, p) for p in patterns["eval_pipeline"]), (relative, patterns)
