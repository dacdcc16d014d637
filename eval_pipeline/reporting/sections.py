"""The report's built-in sections, registered in `eval_pipeline.reporting.report.SECTIONS`:

Each is two steps (`ReportSection`): what it measures, in the findings asset, and how that
is rendered, in the report asset.

- `validity` ("How far the numbers can be trusted", eval_pipeline.reporting.validity), before
  the provenance: its files beside the report, its metadata (needs the database; the LLM only
  when the report grades the holes);
- `indexes` ("Indexes", eval_pipeline.reporting.indexes), before the variants, when the
  variants file lists indexes: its Pareto plots, indexes.json, its recommendation in the
  headline, the output and metadata;
- `answers` ("Answer quality", eval_pipeline.reporting.answers), after the retrieval gate: its
  gate's output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eval_pipeline.common.atomic import atomic_write_text
from eval_pipeline.reporting.answers import answer_gate_output, answer_section, write_answer_files
from eval_pipeline.reporting.indexes import index_plots
from eval_pipeline.reporting.report import SECTIONS, ReportInputs, ReportSection, SectionPart
from eval_pipeline.reporting.run import index_report
from eval_pipeline.reporting.validity import assess, validity_metadata, validity_section, write_validity_files


def measure_validity(inputs: ReportInputs) -> Any:
    """Power, the audit, the labels' coverage, the flips against each variant's previous run
    (read from the history) and, when the findings asset was given a model, the graded holes."""
    return assess(inputs.per_variant, questions=inputs.question_set.questions, snapshot=inputs.snapshot,
                  sweep=inputs.sweep, verdict=inputs.verdict, connection_string=inputs.connection_string,
                  llm=inputs.llm() if inputs.llm else None, hole_cache=inputs.state.hole_grades,
                  limited=inputs.question_set.limited, relevance_calibration=inputs.relevance_calibration,
                  audit_cache=inputs.state.audits)


def render_validity(validity: Any) -> SectionPart:
    return SectionPart(lines=lambda files: validity_section(validity, files=dict(files)),
                       write=lambda stage, suffix: write_validity_files(validity, stage, suffix),
                       metadata=validity_metadata(validity))


def measure_indexes(inputs: ReportInputs) -> Any:
    """Each index's cost (read from the store), the pairs' quality and latency, the
    recommendation under the variants file's budgets."""
    return index_report(inputs.per_variant, inputs.verdict, sweep=inputs.sweep, stores=inputs.stores,
                        index_of=inputs.index_of, tables=inputs.tables, questions=inputs.question_set.questions,
                        connection_string=inputs.connection_string)


def render_indexes(report: Any) -> SectionPart:
    def write(stage: Path, suffix: str) -> dict[str, str]:  # the Indexes section's numbers, for scripts
        path = stage / f"indexes{suffix}.json"
        atomic_write_text(path, json.dumps(report.data, indent=1, default=str) + "\n")
        return {"indexes": str(path)}

    return SectionPart(lines=report.lines, write=write,
                       plots=lambda stage, suffix: index_plots(report.pairs, report.recommendation, stage, suffix),
                       output={"recommendation": report.output}, metadata=report.metadata, headline=report.headline)


def measure_answers(inputs: ReportInputs) -> Any:
    """The answer verdict (decided by the verdict asset): nothing is measured again."""
    return inputs.verdict.answers


def render_answers(answers: Any) -> SectionPart:
    """The answer section, naming the files it writes beside the report: answers.jsonl (every
    per-prompt grading) and, when grounding ran, hallucinations.md/.jsonl."""
    return SectionPart(lines=lambda files: answer_section(answers, files),
                       write=lambda stage, suffix: write_answer_files(answers, stage, suffix),
                       output={"answers": answer_gate_output(answers)})


SECTIONS.register(ReportSection("validity", "before_provenance", measure_validity, render_validity,
                                needs=frozenset({"database", "llm"}), description="how far the numbers can be trusted"))
SECTIONS.register(ReportSection("indexes", "before_variants", measure_indexes, render_indexes,
                                needs=frozenset({"database", "indexes"}),
                                description="cost, quality and latency per index; the recommendation"))
SECTIONS.register(ReportSection("answers", "after_gate", measure_answers, render_answers,
                                description="answer quality and its gate"))
