"""The variants file as typed, checked settings: variants, indexes, gates, answers, budgets, audit.
Entry: `sweep.load_sweep` (the file -> a frozen `models.SweepConfig`); the strict YAML reader
in `yaml_file`.
"""
