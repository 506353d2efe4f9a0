"""The in-process head rollout on the real ALOHA simulator: the expert's commands solve the task through
the same loop, a head that holds still does not, and the keyframe in force follows sim time."""
import numpy as np
import pytest

pytest.importorskip("mujoco")

from plan_stack.embodiments.aloha.expert import plan_episode  # noqa: E402
from plan_stack.eval.heads import AnnotatedPlans, rollout, summarise  # noqa: E402


@pytest.fixture(scope="module")
def expert():
    return plan_episode("transfer_cube", 3).commands


def _replayer(commands, execute_steps):
    calls = []

    def sample(state, cond):
        k = len(calls) * execute_steps
        calls.append(int(cond[0, 0]))
        return commands[np.minimum(np.arange(k, k + 50), len(commands) - 1)]
    return sample, calls


def test_expert_commands_through_the_loop_solve_the_task(expert):
    key_times = np.array([0.0, 1.0, 2.0])
    conds = [np.full((2, 4), float(i)) for i in range(3)]
    sample, calls = _replayer(expert, 10)
    r = rollout(sample, 3, AnnotatedPlans(key_times, conds), expert, execute_steps=10, episode_s=8.0)
    assert r.success and r.max_reward == 4
    assert r.rms_to_expert == pytest.approx(0.0, abs=1e-12)
    assert r.sim_time_s < 8.0  # stops once solved
    # query k at t = 0.2 k s sees the keyframe in force then: 0 until 1 s, 1 until 2 s, then 2
    assert calls[:5] == [0] * 5 and calls[5:10] == [1] * 5 and set(calls[10:]) == {2}


def test_a_head_that_holds_still_fails_and_is_measured(expert):
    start = expert[0]
    r = rollout(lambda state, cond: np.repeat(start[None], 50, axis=0), 3,
                AnnotatedPlans(np.array([0.0]), [np.zeros((1, 4))]), expert, execute_steps=25, episode_s=2.0)
    assert not r.success and r.max_reward == 0 and r.queries == 4
    assert r.rms_to_expert > 0.01
    s = summarise([r])
    assert s["episodes"] == 1 and s["successes"] == 0 and s["reward_stages"][0] == 1


def test_cli_scores_the_shipped_head_and_the_expert_on_a_recorded_episode(tmp_path):
    """`plan-stack eval-head` end to end: a real recording, the shipped target's features, the shipped head."""
    import json

    from plan_stack.cli import main

    demos = tmp_path / "demos"
    assert main(["record-demos", "--robot", "aloha", "--episodes", "1", "--seed", "7", "--width", "224",
                 "--height", "224", "--camera-rate", "2", "--out", str(demos)]) == 0
    out = tmp_path / "heads.json"
    assert main(["eval-head", "--demos", str(demos), "--expert", "--heads", "aloha/action_head/plain",
                 "--episode-s", "7", "--json", str(out)]) == 0
    expert, head = json.loads(out.read_text())
    assert expert["summary"]["head"] == "expert" and expert["summary"]["successes"] == 1
    assert head["summary"]["head"] == "aloha/action_head/plain" and head["summary"]["episodes"] == 1
    row = head["rows"][0]
    assert row["seed"] == 7 and row["queries"] >= 1 and 0 <= row["max_reward"] <= 4
    # the learned stack minus ROS: the shipped planner decodes the live camera image
    live = tmp_path / "live.json"
    assert main(["eval-head", "--demos", str(demos), "--heads", "aloha/action_head/plain", "--plans", "vflash",
                 "--episode-s", "1", "--json", str(live)]) == 0
    (block,) = json.loads(live.read_text())
    assert block["summary"]["plans"] == "vflash" and block["rows"][0]["queries"] == 5
    assert main(["eval-head", "--demos", str(tmp_path / "none")]) == 2
    assert main(["eval-head", "--robot", "franka", "--demos", str(demos)]) == 2


def test_executing_more_commands_than_a_chunk_holds_is_refused(expert):
    with pytest.raises(ValueError, match="execute_steps"):
        rollout(lambda state, cond: expert[:50], 3, AnnotatedPlans(np.array([0.0]), [np.zeros((1, 4))]), expert,
                execute_steps=60, episode_s=2.0)


def test_a_delayed_chunk_runs_from_the_row_due_when_it_arrives(expert):
    """With latency the commands stay time-aligned (the expert still solves the task, its commands
    executed at their own times) and a chunk that moves only late is seen late."""
    sample, _ = _replayer(expert, 25)
    r = rollout(sample, 3, AnnotatedPlans(np.array([0.0]), [np.zeros((1, 4))]), expert, execute_steps=25,
                episode_s=8.0, delay_steps=10)
    assert r.success
    seen = []

    def probe(state, cond):  # row i of the chunk queried at step q carries i + q
        q = len(seen) * 5
        seen.append(q)
        return np.tile(np.arange(q, q + 50, dtype=float)[:, None] * 1e-4, (1, 14)) + expert[0]

    sent = []
    from plan_stack.embodiments.aloha.sim import AlohaSim

    class Recorder(AlohaSim):
        def set_command(self, q):
            sent.append(np.asarray(q).copy())
            return super().set_command(q)

    rollout(probe, 3, AnnotatedPlans(np.array([0.0]), [np.zeros((1, 4))]), expert, execute_steps=5,
            episode_s=0.4, delay_steps=7, sim=Recorder("transfer_cube", offscreen_size=(64, 48)))
    sent = sent[-20:]  # the rollout's 20 commands (resets send the start pose too)
    steps = np.round((np.array(sent)[:, 0] - expert[0][0]) / 1e-4).astype(int)
    # steps 0-6 hold the start pose; from step 7 on, command k is row k of its chunk (value k)
    assert steps[:7].tolist() == [0] * 7 and steps[7:].tolist() == list(range(7, 20))
    with pytest.raises(ValueError, match="delay_steps"):
        rollout(probe, 3, AnnotatedPlans(np.array([0.0]), [np.zeros((1, 4))]), expert, execute_steps=25,
                episode_s=1.0, delay_steps=30)
    with pytest.raises(ValueError, match="delay_steps"):
        rollout(probe, 3, AnnotatedPlans(np.array([0.0]), [np.zeros((1, 4))]), expert, delay_steps=-1)
