"""`RobotProfile`: every fact of one robot in one record, as plain data.

A profile names the robot's parts (simulator, expert, recorder, bridge config), what its planner sees and
emits, how its models are trained and on which recorded seeds, how its episodes are recorded and judged,
and its node executables. Nothing here imports robot code or anything heavy: the parts are
`module:attribute` references inside the robot's embodiment package (`plan_stack.embodiments.<name>`),
loaded on first use by `plan_stack.embodiments.registry`, so listing robots (argument parsers, config
checks, the executables table that CMake and setup.py read) costs nothing, and the learning code, which
reads profiles, still reads data and not robots. Standard library only.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

__all__ = ["Split", "OnpolicyRound", "Parts", "Executable", "LearningSpec", "Recipe", "EpisodeSettings",
           "RobotProfile"]

#: episode seeds of a split: (first seed, episodes), recorded as `record-demos --seed S --episodes N`
Split = tuple[int, int]
#: one on-policy round: (its split, its extra record-demos options)
OnpolicyRound = tuple[str, tuple[str, ...]]


@dataclasses.dataclass(frozen=True)
class Parts:
    """Where the robot's code lives: `module:attribute` inside its embodiment package.

    Every robot folder uses the same module names (`sim`, `expert`, `recording`, `bridge`), so only the
    class names differ from robot to robot.
    """

    sim: str  # the simulator class (`embodiments.base.Simulator`)
    recorder_options: str  # the recorder's options dataclass
    bridge_config: str  # the bridge's config dataclass
    bridge_limits: str | None  # `load_limits(bridge_config) -> Limits`; None: the bridge is not joint space
    expert: str = "expert:demonstrate"  # `embodiments.base.Expert`
    recorder: str = "recording:recorder"  # `(task, out_dir, width, height) -> embodiments.base.Recorder`


@dataclasses.dataclass(frozen=True)
class Executable:
    """One node executable of the robot: its name in lib/plan_stack and, inside the robot's package, its
    node module's `main` (a process of its own) and node class (in-process bring-up).

    The module is named after the executable's role: `<robot>_<role>` lives in `<role>_node.py`.
    """

    name: str
    main: str  # module:function
    node_class: str  # class name in main's module


@dataclasses.dataclass(frozen=True)
class LearningSpec:
    """What a robot's planner model sees and emits (the annotations its recorder writes)."""

    robot: str
    format: str  # annotation format tag
    cameras: tuple[str, ...]  # prompt cameras (Observation names), first = annotated camera
    kind: str  # layout kind of the trajectory primitive
    arms: tuple[str, ...]  # annotation arm keys in block order ("" for driving)
    box_objects: tuple[str, ...] = ()  # objects whose box precedes the trajectory in the response
    frame_id: str = ""
    #: the plan is one ground path in the ego frame (annotation keys `xy` / `uv` per keyframe, z = 0),
    #: not per-arm waypoints (`arms.<arm>.xyz` / `.uv`)
    ground_path: bool = False
    #: sub-task of a keyframe when the annotation names none (ground paths: one per episode, optional)
    default_subtask: str = ""
    #: the robot's stack runs an action head (chunker) on the planner's plan features
    action_head: bool = True


@dataclasses.dataclass(frozen=True)
class Recipe:
    """Sizes and budgets of one robot's models (measured to fit <= 60 min on 2 CPU cores)."""

    image_size: tuple[int, int] = (112, 112)
    hidden: int = 192
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 32
    vision_hidden: int = 96
    vision_depth: int = 2
    #: ViT patch edge (px); each LLM image token merges 2 x 2 patches
    vision_patch: int = 16
    target_steps: int = 360
    target_batch: int = 16
    target_lr: float = 1e-3
    #: Gaussian soft target over the coordinate bins (std in bins; 0 = exact bin),
    #: `planning.training.target.response_loss`
    target_coord_sigma_bins: float = 0.0
    #: weight of the auxiliary localisation loss (`planning.training.target.LocateHead`) on the object `locate` names
    target_locate_weight: float = 0.0
    #: which annotated box the localisation loss places: "first" = the first of the robot's `box_objects`
    #: (ALOHA, Franka: the cube); "largest" = the largest box in view (driving: the nearest obstacle)
    locate: str = "first"
    eval_every: int = 325
    val_keyframes: int = 24
    drafter_width: int = 192
    drafter_layers: int = 3
    drafter_steps: int = 200
    drafter_batch: int = 8
    drafter_lr: float = 6e-4
    drafter_text_anchors: int = 4
    #: text block the drafter is trained on (anchor + proposals), and its loss weights' decay over the block
    #: (w_j = exp(-(j-1)/decay), DFlash's 7 for 16 positions); the manifest's `text_block` is chosen among
    #: `recipes.selection.TEXT_BLOCKS` and this one
    drafter_text_block: int = 16
    drafter_text_decay: float = 7.0
    head_steps: int = 800
    head_episodes: int = 60  # train episodes whose plan features the heads see (feature pass budget)
    head_batch: int = 64
    head_lr: float = 1e-3
    head_rtc_max_delay: int = 10
    #: Gaussian noise on the heads' input state, robot units (one std or one per channel; empty = off)
    head_state_noise: tuple[float, ...] = ()
    #: the target also trains on every planner keyframe mirrored left to right (`planning.samples.mirrored`;
    #: ground paths only)
    target_mirror: bool = False
    #: extra planner splits (`RobotProfile.planner_extra_splits`) whose episodes the heads train on as well,
    #: all of them
    head_extra_splits: tuple[str, ...] = ()
    #: each on-policy round's fine-tune (`RobotProfile.onpolicy_rounds`): target steps and peak lr, drafter steps
    onpolicy_target_steps: int = 800
    onpolicy_target_lr: float = 3e-4
    onpolicy_drafter_steps: int = 600
    #: after the last round: the drafter alone fine-tuned this many steps more on the same data, the target
    #: unchanged (0: none; `final_drafter_fine_tune`)
    onpolicy_final_drafter_steps: int = 0
    budget_margin: int = 24
    gate_step_factor: float = 1.5
    #: the gate's bound on the change between consecutive steps, this factor x the largest true change on
    #: the validation split (0: no such bound)
    gate_step_change_factor: float = 0.0
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class EpisodeSettings:
    """How the robot's episodes run: its tasks, how `record-demos` records them and how `run-episodes`
    judges and watches them."""

    #: the robot's tasks (the first is the default)
    tasks: tuple[str, ...]
    # --- closed-loop episodes (`plan-stack run-episodes`) ---
    #: success criterion of an episode: a kind in `plan_stack.eval.episodes.criterion.CRITERIA`
    success_criterion: str = "success_flag"
    #: default sim-time budget of an episode (s)
    time_limit_s: float = 15.0
    #: camera whose images start the latency clock of an episode
    latency_camera: str = ""
    #: controller command topic whose messages the episode monitor counts as bridge commands (None: none)
    bridge_command_topic: str | None = None
    #: the episode monitor checks the measured arm joint states against the bridge's URDF limits
    checks_joint_states: bool = False
    # --- recorded demonstrations (`plan-stack record-demos`) ---
    #: the annotation carries a reward worth printing
    reports_reward: bool = False
    #: what a successful demonstration means, for the summary line
    success_means: str = "solved"
    #: options only this robot's recorder has (argument names)
    recorder_only_options: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class RobotProfile:
    """One robot: its parts, executables, learning facts, training recipe and data, and episode settings."""

    name: str
    parts: Parts
    sim_executable: Executable
    bridge_executable: Executable
    learning: LearningSpec
    episode: EpisodeSettings
    recipe: Recipe
    #: episode seeds per split: disjoint, fixed, written into the manifest (`plan-stack train`)
    splits: Mapping[str, Split]
    #: splits the planner (target and drafter; the action heads only where the recipe's `head_extra_splits`
    #: names them) trains on besides `train` -> the extra record-demos options they are recorded with
    planner_extra_splits: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    #: the on-policy rounds (stage `onpolicy`, DAgger), in order: (split, its extra record-demos options).
    #: In each round the model written last drives the split's seeds (`record-demos --policy-model`), the
    #: expert labels each keyframe with its path from there, and the model is fine-tuned on every planner
    #: split plus the rounds' splits so far (`--init-from`)
    onpolicy_rounds: tuple[OnpolicyRound, ...] = ()
    #: record-demos options of every split (beside the common image size and camera rate)
    record_options: tuple[str, ...] = ()

    @property
    def package(self) -> str:
        """The robot's embodiment package, which every part reference is relative to."""
        return f"plan_stack.embodiments.{self.name}"

    def executables(self) -> tuple[Executable, ...]:
        return self.sim_executable, self.bridge_executable

    def check_task(self, task: str) -> None:
        """ValueError unless `task` is one of the robot's tasks (before any simulator is built)."""
        if task not in self.episode.tasks:
            raise ValueError(f"task: {task!r} is not a {self.name} task (choose from {list(self.episode.tasks)})")
