"""Answer grading: the graders (deterministic assertions, static checks, an LLM judge and an
LLM decision), the answer metrics over their grades, and the step that grades a run's answers.
Entries: `run.grade_variants`, `run.answer_metric_frames`.
"""
