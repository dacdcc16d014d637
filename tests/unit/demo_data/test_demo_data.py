"""The bundled demo corpus and question set keep the shape the README promises (document
count and lengths, question forms and hard classes, abstention share, questions per
document): tests/demo_data_rules.py holds the rules."""

from tests import demo_data_rules


def test_the_demo_data_passes_its_rules(capsys):
    assert demo_data_rules.main([]) == 0, capsys.readouterr().out
