"""The judge's independence from the generator: self (refused unless allowed), same family
(a warning), independent."""

import pytest

from eval_pipeline.common.endpoint import Endpoint
from eval_pipeline.grading.independence import SELF_JUDGED_LABEL, judge_independence

LOCAL = "http://127.0.0.1:8000/v1"


def test_the_same_endpoint_and_model_is_refused_naming_the_settings():
    with pytest.raises(ValueError) as err:
        judge_independence(LOCAL, "qwen-7b", "http://127.0.0.1:8000/v1/", "qwen-7b", graders=("judge", "decision"))
    message = str(err.value)
    for setting in ("llm.base_url", "llm.model", "judge_llm.base_url", "judge_llm.model",
                    "answers.allow_self_judging: true", "judge and decision", "'qwen-7b'"):
        assert setting in message


def test_self_judging_allowed_is_labelled():
    got = judge_independence(LOCAL, "qwen-7b", LOCAL, "qwen-7b", allow_self_judging=True)
    assert got.kind == "self" and got.label == SELF_JUDGED_LABEL == "self-judged"
    assert "allow_self_judging is true" in got.message


def test_host_case_and_trailing_slash_do_not_make_another_endpoint_and_credentials_never_show():
    with pytest.raises(ValueError) as err:
        judge_independence(Endpoint("http://user:s3cret@LOCALHOST:8000/v1/"), "m",
                           "http://localhost:8000/v1?api-key=s3cret", "m")
    assert "s3cret" not in str(err.value)


def test_same_host_is_a_same_family_warning():
    other_model = judge_independence(LOCAL, "qwen-7b", LOCAL, "llama-8b")
    other_path = judge_independence("https://gw.example.com/openai/v1", "m", "https://gw.example.com/other/v1", "m")
    assert other_model.kind == other_path.kind == "same_family"
    assert "share the host '127.0.0.1'" in other_model.message and other_model.label == ""


def test_another_host_or_no_generator_model_is_independent():
    assert judge_independence(LOCAL, "m", "https://api.example.com/v1", "m").kind == "independent"
    assert judge_independence(None, None, LOCAL, "m").kind == "independent"  # the extractive generator


def test_an_unset_endpoint_is_the_clients_default():
    env = {"OPENAI_BASE_URL": LOCAL}
    with pytest.raises(ValueError, match="same"):
        judge_independence(None, "m", LOCAL, "m", environ=env)
    assert judge_independence(None, "m", LOCAL, "m", environ={}).kind == "independent"  # api.openai.com


@pytest.mark.parametrize("kwargs, message", [
    ({"judge_model": ""}, "judge_llm.model must be a non-empty model name"),
    ({"allow_self_judging": "yes"}, "answers.allow_self_judging must be true or false"),
])
def test_bad_settings_are_refused(kwargs, message):
    args = {"judge_model": "m", "allow_self_judging": False, **kwargs}
    with pytest.raises(ValueError, match=message):
        judge_independence(LOCAL, "m", LOCAL, args.pop("judge_model"), **args)
