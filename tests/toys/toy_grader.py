"""A toy grader: an answer passes when it has at most `MAX_WORDS` words; its score is
min(1, MAX_WORDS / words). No model; every answer has something to grade."""

from __future__ import annotations

from eval_pipeline.grading.registry import GRADER_KINDS, AnswerToGrade, GraderKind
from eval_pipeline.grading.run import grade_row

MAX_WORDS = 60


def grade(answer: AnswerToGrade) -> dict:
    if answer.text is None:
        return grade_row(answer.variant, answer.prompt.id, "toy_length", "no_answer", passed=False, score=0.0)
    words = len(answer.text.split())
    return grade_row(answer.variant, answer.prompt.id, "toy_length", "graded", passed=words <= MAX_WORDS,
                     score=min(1.0, MAX_WORDS / words) if words else 1.0, reason=f"{words} words")


GRADER_KINDS.register(GraderKind("toy_length", grade_one=grade, yardstick=lambda: f"toy_length:v1+{MAX_WORDS}",
                                 description="a toy: short answers pass"))
