"""One model loader for the rewrite job, the evaluation job and the service (rrt/modelling/loading.py)."""

from __future__ import annotations

import pytest
from conftest import DECODING

from rrt.modelling.loading import VARIANT_SYSTEMS, build_rewriter, load_model
from rrt.modelling.rewriter import SYSTEMS
from testing.local_service import tiny_model

SETTINGS = DECODING.model_copy(
    update={"top_k": 5, "top_p": 0.9, "temperature": 0.7, "max_step_tokens": 12}
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> str:
    return tiny_model(str(tmp_path_factory.mktemp("loading") / "model"))


def test_a_model_loads_with_its_meta_block_size_and_system(exported):
    model = load_model(exported)
    assert (
        model.meta["variant"] == "contextual"
        and model.block_size == 256
        and model.system == "contextual"
    )
    assert not model.lm.training and model.device == "cpu"


def test_the_rewriter_samples_as_the_settings_say(exported):
    model = load_model(exported)
    rewriter = build_rewriter(model, SETTINGS, candidates=4, constrained=True)
    assert rewriter.system == "contextual" and rewriter.constrained and rewriter.plan == "loop"
    s = rewriter.settings
    assert (s.top_k, s.top_p, s.temperature, s.candidates, s.max_new_tokens) == (5, 0.9, 0.7, 4, 12)
    # A system named by the caller wins over the model's own (an ablation on the same weights).
    assert build_rewriter(model, SETTINGS, 1, False, system="no_context").system == "no_context"


def test_every_variant_that_rewrites_has_one_system_and_others_are_refused(exported):
    assert set(VARIANT_SYSTEMS) == {v for v in SYSTEMS.values() if v}
    assert all(SYSTEMS[system] == variant for variant, system in VARIANT_SYSTEMS.items())
    assert VARIANT_SYSTEMS["contextual_ing"] == "contextual_rule"
    model = load_model(exported)
    model.meta = {**model.meta, "variant": "ing_predictor"}
    with pytest.raises(ValueError, match="does not rewrite recipes"):
        build_rewriter(model, SETTINGS, 1, False)
