"""The planner on exported engines (drafter pass + vision encoder on onnxruntime) plans what PyTorch plans."""
from __future__ import annotations

import numpy as np
import pytest

from plan_stack.device import EngineError, resolve_placement
from plan_stack.engines.runtime import PlannerEngines
from plan_stack.planning.model_dir import load_planner_model
from plan_stack.planning.runtime import FrameInput, PlannerRuntime, RuntimeConfig
from plan_stack.planning.tiny_models import BLOCK, CAMERAS, PREFIX, images, make_model_dir

CPU = resolve_placement("cpu")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # the manifest names the forced primitive's layout (robot 3D, P = 2: B = 8), so its block is exported
    return make_model_dir(tmp_path_factory.mktemp("planner_engines") / "m", history_frames=2,
                          manifest={"primitive_kinds": ["robot_3d"], "waypoints": 2})


def _plans(model, n=3):
    rt = PlannerRuntime(model, RuntimeConfig(response_prefix=PREFIX))
    return [rt.plan(FrameInput(1.0 + 0.1 * i, CAMERAS, images(i))) for i in range(n)]


def test_onnx_engines_plan_the_same_primitives_and_features(model_dir):
    reference = _plans(load_planner_model(model_dir))
    model = load_planner_model(model_dir)
    engines = PlannerEngines(model, "onnx", CPU)
    try:
        assert engines.drafter.block_sizes == sorted({BLOCK, model.drafter.config.text_block})
        assert engines.vision.layouts == 2  # one frame's cameras, and the whole window at start-up
        got = _plans(model)
        for a, b in zip(got, reference):
            assert a.valid and a.primitives == b.primitives
            np.testing.assert_allclose(a.features, b.features, atol=1e-4)
        counts = engines.counters()
        assert counts["draft_engine_calls"] >= 3 and counts["vision_engine_calls"] == 3
        assert counts["vision_torch_fallbacks"] == 0
    finally:
        engines.close()


def test_an_export_of_another_model_is_refused(model_dir, tmp_path):
    from plan_stack.engines import export as E

    other = load_planner_model(make_model_dir(tmp_path / "other", seed=5))
    E.write_manifest(tmp_path / "eng", E.export_planner(other, tmp_path / "eng"),
                     {"planner": {"path": str(other.path), "sha256": E.directory_hash(other.path)}})
    with pytest.raises(EngineError, match="made from other weights"):
        PlannerEngines(load_planner_model(model_dir), "onnx", CPU, engine_dir=str(tmp_path / "eng"))
