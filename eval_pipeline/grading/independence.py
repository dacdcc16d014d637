"""Is the judge the model that wrote the answers? A model grading its own answers is lenient with
them (self-preference), and one of the same provider tends to share its blind spots; a judge
number is worth believing only when the judge is independent of the generator.

:func:`judge_independence` compares the generator's endpoint and model with the judge's (the
`llm` and `judge_llm` resources; an LLM grader is `judge` or `decision`):

``self``
    The same endpoint (scheme, host, port and path; case-insensitive host; a trailing ``/``
    ignored; never the credentials, which `Endpoint` keeps apart) and the same model name
    (whitespace-trimmed, case-sensitive: providers' names are). Refused with a ValueError naming
    the settings, unless ``allow_self_judging`` (``answers.allow_self_judging: true``); then
    every judge number is labelled `SELF_JUDGED_LABEL`.
``same_family``
    Not ``self``, but the same host (another model at one provider, or another path of one
    gateway): allowed, with a warning text.
``independent``
    Another host, or a generator that is not a model (the extractive generator: `generator_model`
    None).

An endpoint given as None is the client's default, as `LLMClient` resolves it: ``OPENAI_BASE_URL``
from `environ`, else OpenAI's. Nothing here calls a model or reads a key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from eval_pipeline.common.endpoint import Endpoint, safe_url
from eval_pipeline.common.llm import DEFAULT_BASE_URL

__all__ = ["INDEPENDENCE", "SELF_JUDGED_LABEL", "Independence", "judge_independence"]

INDEPENDENCE = ("self", "same_family", "independent")
SELF_JUDGED_LABEL = "self-judged"


@dataclass(frozen=True)
class Independence:
    """How independent the judge is (`INDEPENDENCE`); `message` "" when independent, else the
    warning (same_family) or the label's explanation (self, allowed)."""

    kind: Literal["self", "same_family", "independent"]
    message: str
    label: str = ""  # SELF_JUDGED_LABEL on every judge number when kind is "self"


def _endpoint(value: Endpoint | str | None, environ: Mapping[str, str]) -> Endpoint:
    if isinstance(value, Endpoint):
        return value
    return Endpoint(value or environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL)


def _same_place(a: Endpoint, b: Endpoint) -> bool:
    def norm(e: Endpoint) -> str:
        url = safe_url(e.for_client())
        scheme, _, rest = url.partition("://")
        host, slash, path = rest.partition("/")
        return f"{scheme.lower()}://{host.lower()}{slash}{path}".rstrip("/")

    return norm(a) == norm(b)


def judge_independence(generator_endpoint: Endpoint | str | None, generator_model: str | None,
                       judge_endpoint: Endpoint | str | None, judge_model: str, *,
                       allow_self_judging: bool = False, graders: tuple[str, ...] = ("judge",),
                       environ: Mapping[str, str] | None = None, allow_setting: str = "answers.allow_self_judging",
                       judge_settings: str = "judge_llm.model (or judge_llm.base_url)") -> Independence:
    """The judge's independence from the generator (module docstring). `graders` names the
    LLM graders in the messages; `allow_setting` and `judge_settings` name, in them, where a
    user sets `allow_self_judging` and the judge's model and endpoint (the run config's path,
    the environment variables). Raises ValueError for ``self`` without `allow_self_judging`."""
    if not isinstance(judge_model, str) or not judge_model.strip():
        raise ValueError(f"judge_llm.model must be a non-empty model name, got {judge_model!r}")
    if not isinstance(allow_self_judging, bool):
        raise ValueError(f"{allow_setting} must be true or false, got {allow_self_judging!r}")
    if generator_model is None:
        return Independence("independent", "")
    env = os.environ if environ is None else environ
    gen, judge = _endpoint(generator_endpoint, env), _endpoint(judge_endpoint, env)
    which = " and ".join(graders) or "judge"
    if _same_place(gen, judge) and generator_model.strip() == judge_model.strip():
        where = f"{judge.safe} model {judge_model.strip()!r}"
        if not allow_self_judging:
            raise ValueError(
                f"the {which} grader would grade answers with the model that wrote them ({where}: llm.base_url/"
                "llm.model and judge_llm.base_url/judge_llm.model are the same): a model is lenient with its own "
                f"answers. Set {judge_settings} to another model, or set "
                f"{allow_setting}: true to run it anyway, every judge number labelled 'self-judged'")
        return Independence("self", f"self-judged: the {which} grader is the generator ({where}); "
                                    f"{allow_setting} is true", SELF_JUDGED_LABEL)
    if (gen.hostname or "").lower() == (judge.hostname or "").lower():
        return Independence("same_family", (
            f"the {which} grader ({judge.safe} model {judge_model.strip()!r}) and the generator ({gen.safe} model "
            f"{generator_model.strip()!r}) share the host {judge.hostname!r}: a judge of the same provider family "
            "may share the generator's blind spots; judge_llm.base_url on another provider is independent"))
    return Independence("independent", "")
