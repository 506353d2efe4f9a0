"""The planner node's config refuses values it could not run with, naming the parameter."""
from __future__ import annotations

import pytest

from plan_stack.config import ConfigError
from plan_stack.planning.config import PlannerNodeConfig


def test_defaults_plan_whenever_the_worker_is_free_on_the_cpu():
    cfg = PlannerNodeConfig(model_dir="aloha")
    assert (cfg.replan_period_s, cfg.device, cfg.backend, cfg.stats_window) == (0.0, "cpu", "torch", 100)


@pytest.mark.parametrize("kw, match", [
    (dict(replan_period_s=-0.1), r"^replan_period_s: -0.1 is below the minimum 0.0"),
    (dict(request_timeout_s=0.0), r"^request_timeout_s: 0.0 is below the minimum 0.1"),
    (dict(device="tpu"), r"^device: 'tpu' is not one of"),
    (dict(stats_window=0), r"^stats_window: 0 is below the minimum 1"),
])
def test_bad_values_are_refused(kw, match):
    with pytest.raises(ConfigError, match=match):
        PlannerNodeConfig(model_dir="aloha", **kw)


def test_the_model_directory_is_required():
    with pytest.raises(TypeError, match="model_dir"):
        PlannerNodeConfig()  # type: ignore[call-arg]
