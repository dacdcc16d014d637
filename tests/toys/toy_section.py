"""A toy report section, before the provenance: how many variants and questions the report
covers, and each variant's share of questions missed."""

from __future__ import annotations

from eval_pipeline.reporting.report import SECTIONS, ReportInputs, ReportSection, SectionPart


def build(inputs: ReportInputs) -> SectionPart:
    missed = {v: float(f["miss_class"].notna().mean()) for v, f in inputs.per_variant.items()}
    lines = ["## Toy section", "", f"{len(missed)} variants on {len(inputs.question_set.questions)} questions.", ""]
    lines += [f"- `{v}`: {share:.0%} missed" for v, share in missed.items()] + [""]
    return SectionPart(lines=lines, output={"toy_section": missed}, metadata={"toy variants": len(missed)})


SECTIONS.register(ReportSection("toy", "before_provenance", build, description="a toy: misses per variant"))
