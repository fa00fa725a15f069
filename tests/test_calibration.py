import pytest

from elsi_lib.study.paper import captures
from elsi_lib.hidden.calibration import SELECTIONS
from elsi_lib.hidden.settings import CaptureSettings


@pytest.mark.parametrize(
    "models, model, expected",
    [
        (["smollm2-135m"], None, ["smollm2-135m"]),
        (["qwen2.5-coder-0.5b"], "smollm2-135m", ["smollm2-135m", "qwen2.5-coder-0.5b"]),
        ("smollm2-135m, qwen2.5-coder-0.5b", None, ["smollm2-135m", "qwen2.5-coder-0.5b"]),  # papermill -p
        (("smollm2-135m", "smollm2-135m"), "smollm2-135m", ["smollm2-135m"]),
    ],
)
def test_model_names_accept_lists_and_comma_separated_strings(models, model, expected):
    assert captures.model_names(models, model) == expected


@pytest.mark.parametrize("models", ['["smollm2-135m", "qwen2.5-coder-0.5b"]', "['a']", 3, ["a", ""], [], ""])
def test_model_names_refuse_anything_else_and_show_the_yaml_form(models):
    with pytest.raises(ValueError, match=r"-y 'MODELS: \[") as err:
        captures.model_names(models)
    if isinstance(models, str) and "[" in models:  # the papermill -p mistake is named as such
        assert "is a string, not a list" in str(err.value)


def test_selections_override_only_what_one_pass_may_vary():
    for options in SELECTIONS.values():
        assert set(options) <= set(CaptureSettings.PER_VARIANT)
        CaptureSettings().replace(**options)  # each is a valid capture
