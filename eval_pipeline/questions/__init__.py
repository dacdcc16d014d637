"""Stage 3, the question_set asset: the question-set file format, generation with an LLM and
its per-document cache, and building the run's set. Entry: `build.build_question_set`
(and `build.preflight_run`, the checks the run makes before anything is embedded).
"""
