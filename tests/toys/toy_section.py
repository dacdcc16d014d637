"""A toy report section, before the provenance: how many variants and questions the report
covers, and each variant's share of questions missed."""

from __future__ import annotations

from typing import Any

from eval_pipeline.reporting.report import SECTIONS, ReportInputs, ReportSection, SectionPart


def measure(inputs: ReportInputs) -> dict[str, Any]:
    return {"questions": len(inputs.question_set.questions),
            "missed": {v: float(f["miss_class"].notna().mean()) for v, f in inputs.per_variant.items()}}


def render(measured: dict[str, Any]) -> SectionPart:
    missed = measured["missed"]
    lines = ["## Toy section", "", f"{len(missed)} variants on {measured['questions']} questions.", ""]
    lines += [f"- `{v}`: {share:.0%} missed" for v, share in missed.items()] + [""]
    return SectionPart(lines=lines, output={"toy_section": missed}, metadata={"toy variants": len(missed)})


SECTIONS.register(ReportSection("toy", "before_provenance", measure, render, description="a toy: misses per variant"))
