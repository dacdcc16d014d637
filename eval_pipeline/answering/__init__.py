"""Answers, between the ranking and the judging: which golden prompts a run answers
(`prompts`), the numbered context an answer is written from and its citations (`context`),
the generators (`extractive.ExtractiveGenerator`, the offline baseline: no model, the
retrieved sentences closest to the question; `llm.LLMGenerator`), who served an answer
(`served`), the answer cache (`cache`) and the answers asset's function (`run.produce_answers`).
"""
