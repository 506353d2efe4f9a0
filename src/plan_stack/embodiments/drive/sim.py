"""The embedded driving world without ROS: a MuJoCo road scene and a kinematic bicycle ego.

The road runs along world +x: `lanes` lanes of `lane_width_m` centred on
y = 0 (lane 0 is the rightmost, driving direction +x), solid white edge
lines, dashed white lane separators, grass around, and box obstacles
(parked cars) placed from the seed. The ego is a mocap body posed from a
`vehicle.BicycleState` (the model is kinematic: no tyre forces), carrying
a front camera at the windscreen (the ego's own body is in geom group 3,
which the front camera does not render). Collisions and road departure are checked
geometrically on the vehicle footprint (exact for boxes on a plane).

`FrontCamera` renders offscreen (EGL, shadows off); construct, render and
close it on one thread (the GL context is thread-bound).
"""
from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np

from plan_stack.camera import (
    CameraModel,
    optical_pose,
    pinhole_model,
    project_points,
    segmentation_ids,
    world_to_camera,
)
from plan_stack.config import param, validate
from plan_stack.embodiments.drive.errors import DriveConfigError, DriveError
from plan_stack.embodiments.drive.vehicle import BicycleState, VehicleParams, step

__all__ = ["DriveSceneConfig", "Obstacle", "DriveSim", "FrontCamera", "project_ego_points"]



@dataclasses.dataclass(frozen=True)
class DriveSceneConfig:
    """The road scene and the ego's front camera (node `drive_sim`)."""

    road_length_m: float = param("length of the straight road (m)", 800.0, min=50.0, max=5000.0, read_only=True)
    lanes: int = param("number of lanes (lane 0 is the rightmost)", 2, min=1, max=4, read_only=True)
    lane_width_m: float = param("lane width (m)", 3.5, min=2.5, max=5.0, read_only=True)
    start_lane: int = param("lane the ego starts in", 0, min=0, max=3, read_only=True)
    obstacles: int = param("number of box obstacles on the road", 8, min=0, max=100, read_only=True)
    first_obstacle_m: float = param("x of the first obstacle (m)", 45.0, min=5.0, read_only=True)
    obstacle_gap_m: tuple[float, ...] = param("[min, max] longitudinal gap between obstacles (m)", (45.0, 70.0),
                                              min=5.0, read_only=True)
    obstacle_size_m: tuple[float, ...] = param("obstacle length, width, height (m)", (4.2, 1.8, 1.5), min=0.1,
                                               read_only=True)
    timestep_s: float = param("simulation step (s)", 0.01, min=0.001, max=0.05, read_only=True)
    camera_fovy_deg: float = param("front camera vertical field of view (deg)", 60.0, min=10.0, max=150.0,
                                   read_only=True)
    camera_position_m: tuple[float, ...] = param("front camera position in the ego frame (rear axle; m)",
                                                 (1.2, 0.0, 1.5), read_only=True)
    camera_pitch_rad: float = param("front camera downward pitch (rad)", 0.08, min=-0.5, max=0.8, read_only=True)
    pose_history_s: float = param("how long ego poses are kept for time lookups (s)", 10.0, min=0.1, max=120.0,
                                  read_only=True)

    def __post_init__(self) -> None:
        validate(self)
        if self.start_lane >= self.lanes:
            raise DriveConfigError(f"start_lane: {self.start_lane} but the road has {self.lanes} lane(s)")
        if len(self.obstacle_gap_m) != 2 or self.obstacle_gap_m[0] > self.obstacle_gap_m[1]:
            raise DriveConfigError("obstacle_gap_m: expected [min, max] with min <= max")
        if len(self.obstacle_size_m) != 3:
            raise DriveConfigError("obstacle_size_m: expected [length, width, height]")
        if len(self.camera_position_m) != 3:
            raise DriveConfigError("camera_position_m: expected [x, y, z]")

    @property
    def road_half_width_m(self) -> float:
        return 0.5 * self.lanes * self.lane_width_m

    def lane_center_y(self, lane: int) -> float:
        return -self.road_half_width_m + (lane + 0.5) * self.lane_width_m


@dataclasses.dataclass(frozen=True)
class Obstacle:
    """An axis-aligned box on the road: centre (x, y), half length/width (m), lane index."""

    x: float
    y: float
    half_length: float
    half_width: float
    lane: int

    def corners(self) -> np.ndarray:
        hl, hw = self.half_length, self.half_width
        return np.array([[self.x - hl, self.y - hw], [self.x - hl, self.y + hw],
                         [self.x + hl, self.y + hw], [self.x + hl, self.y - hw]])


def _rects_overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Separating-axis test of two convex quadrilaterals [4, 2]."""
    for poly in (a, b):
        for i in range(4):
            edge = poly[(i + 1) % 4] - poly[i]
            axis = np.array([-edge[1], edge[0]])
            pa, pb = a @ axis, b @ axis
            if pa.max() < pb.min() or pb.max() < pa.min():
                return False
    return True


def _xml(scene: DriveSceneConfig, vehicle: VehicleParams, obstacles: list[Obstacle], size: tuple[int, int]) -> str:
    L, half = scene.road_length_m, scene.road_half_width_m
    geoms = [
        f'<geom name="grass" type="plane" size="{L} {L} 1" pos="{L / 2} 0 -0.02" rgba="0.25 0.45 0.2 1"/>',
        f'<geom name="road" type="box" size="{L / 2 + 20} {half} 0.01" pos="{L / 2} 0 -0.01" rgba="0.3 0.3 0.32 1"/>',
    ]
    for side in (-1, 1):  # solid edge lines
        geoms.append(f'<geom name="edge_{"l" if side > 0 else "r"}" type="box" size="{L / 2 + 20} 0.08 0.002" '
                     f'pos="{L / 2} {side * (half - 0.15)} 0.002" rgba="0.95 0.95 0.95 1"/>')
    for k in range(1, scene.lanes):  # dashed separators: 3 m dash, 6 m gap
        y = -half + k * scene.lane_width_m
        for i, x in enumerate(np.arange(-10.0, L + 10.0, 9.0)):
            geoms.append(f'<geom name="dash_{k}_{i}" type="box" size="1.5 0.07 0.002" pos="{x + 1.5} {y} 0.002" '
                         f'rgba="0.95 0.95 0.95 1"/>')
    h = scene.obstacle_size_m[2] / 2
    for i, o in enumerate(obstacles):
        geoms.append(f'<geom name="obstacle_{i}" type="box" size="{o.half_length} {o.half_width} {h}" '
                     f'pos="{o.x} {o.y} {h}" rgba="0.8 0.2 0.15 1"/>')
    body_x = vehicle.length_m / 2 - vehicle.rear_overhang_m
    cx, cy, cz = scene.camera_position_m
    p = scene.camera_pitch_rad
    # camera x = ego right (-y), camera y = up tilted forward by the pitch: looks along +x, pitched down.
    xyaxes = f"0 -1 0 {math.sin(p):.6f} 0 {math.cos(p):.6f}"
    return f"""
<mujoco model="drive_scene">
  <option timestep="{scene.timestep_s}"/>
  <visual>
    <global offwidth="{size[0]}" offheight="{size[1]}"/>
    <quality shadowsize="0" offsamples="0"/>
    <map znear="0.0005" zfar="2"/>
    <headlight ambient="0.5 0.5 0.5" diffuse="0.5 0.5 0.5"/>
  </visual>
  <asset>
    <texture name="sky" type="skybox" builtin="gradient" rgb1="0.55 0.7 0.9" rgb2="0.9 0.9 0.95" width="32" height="32"/>
  </asset>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    {chr(10).join(geoms)}
    <body name="ego" mocap="true" pos="0 0 0">
      <geom name="ego_body" type="box" size="{vehicle.length_m / 2} {vehicle.width_m / 2} 0.45" pos="{body_x} 0 0.75"
            rgba="0.15 0.3 0.8 1" group="3"/>
      <camera name="front" pos="{cx} {cy} {cz}" xyaxes="{xyaxes}" fovy="{scene.camera_fovy_deg}"/>
    </body>
  </worldbody>
</mujoco>
"""


class DriveSim:
    """The road world and the ego vehicle; deterministic given the seed."""

    def __init__(self, scene: DriveSceneConfig, vehicle: VehicleParams, seed: int = 0,
                 offscreen_size: tuple[int, int] = (640, 480)) -> None:
        import mujoco

        self._mj = mujoco
        self.scene, self.vehicle = scene, vehicle
        self.obstacles = self._place_obstacles(np.random.default_rng(seed))
        self._offscreen_size = offscreen_size
        self._near_m = vehicle.length_m + scene.obstacle_size_m[0]  # beyond this no overlap is possible
        self._model = self._data = None  # the MuJoCo scene is built on first use (physics does not need it)
        self.reset()

    @property
    def model(self):
        if self._model is None:
            mj = self._mj
            self._model = mj.MjModel.from_xml_string(_xml(self.scene, self.vehicle, self.obstacles,
                                                          self._offscreen_size))
            self._data = mj.MjData(self._model)
            self._mocap = self._model.body("ego").mocapid[0]
            self._cam = self._model.camera("front").id
        return self._model

    @property
    def data(self):
        self.model  # noqa: B018 - builds the scene on first use
        return self._data

    def _place_obstacles(self, rng: np.random.Generator) -> list[Obstacle]:
        sc = self.scene
        length, width, _ = sc.obstacle_size_m
        out, x = [], sc.first_obstacle_m
        for _ in range(sc.obstacles):
            if x > sc.road_length_m - length:
                break
            lane = int(rng.integers(sc.lanes))
            out.append(Obstacle(float(x), sc.lane_center_y(lane), length / 2, width / 2, lane))
            gap_min, gap_max = sc.obstacle_gap_m  # [min, max] (checked by the config)
            x += float(rng.uniform(gap_min, gap_max))
        return out

    def reset(self) -> None:
        self.time_s = 0.0
        self.state = BicycleState(x=0.0, y=self.scene.lane_center_y(self.scene.start_lane))
        self.collided_with: int | None = None
        self.left_road = False
        self._history: collections.deque = collections.deque()
        self._record()

    @property
    def timestep_s(self) -> float:
        return self.scene.timestep_s

    def step(self, accel_cmd: float, steer_cmd: float) -> BicycleState:
        """One timestep under the commands (clipped by the vehicle's limits); updates the safety flags."""
        step(self.state, self.vehicle, accel_cmd, steer_cmd, self.scene.timestep_s)
        self.time_s += self.scene.timestep_s
        self._record()
        fp = self.footprint()
        if self._off_road(fp):
            self.left_road = True
        if self.collided_with is None:
            self.collided_with = self._obstacle_hit(fp)
        return self.state

    def footprint(self) -> np.ndarray:
        return self.vehicle.footprint(self.state.x, self.state.y, self.state.yaw)

    def _off_road(self, fp: np.ndarray, margin_m: float = 0.0) -> bool:
        """A footprint corner is beyond the road's edge less `margin_m`."""
        return bool(np.abs(fp[:, 1]).max() > self.scene.road_half_width_m - margin_m)

    def _obstacle_hit(self, fp: np.ndarray) -> int | None:
        """Index of the first obstacle the footprint overlaps (None: none); only obstacles near the ego's x."""
        for i, o in enumerate(self.obstacles):
            if abs(o.x - self.state.x) < self._near_m and _rects_overlap(fp, o.corners()):
                return i
        return None

    def displace(self, dy_m: float, dyaw_rad: float, edge_margin_m: float = 0.1, clear_ahead_m: float = 0.0) -> bool:
        """Move the ego sideways by `dy_m` and turn it by `dyaw_rad` in place (speed and steering kept);
        False, and nothing moved, where the moved footprint would come within `edge_margin_m` of the road's
        edge or overlap an obstacle, or an obstacle lies less than `clear_ahead_m` ahead of the ego. For
        recording recovery data: the planner's own failures put the car off-centre heading for the edge, a
        state the expert never drives into."""
        s = self.state
        if not (math.isfinite(dy_m) and math.isfinite(dyaw_rad)):
            raise ValueError(f"displace: finite offsets required, got dy {dy_m} m, dyaw {dyaw_rad} rad")
        fp = self.vehicle.footprint(s.x, s.y + dy_m, s.yaw + dyaw_rad)
        if self._off_road(fp, edge_margin_m) or self._obstacle_hit(fp) is not None:
            return False
        if any(0.0 <= o.x - o.half_length - s.x < clear_ahead_m for o in self.obstacles):
            return False
        s.y += dy_m
        s.yaw += dyaw_rad
        if self._history and self._history[-1][0] == self.time_s:  # the pose at this instant is the moved one
            self._history.pop()
        self._record()
        return True

    def _record(self) -> None:
        s = self.state
        self._history.append((self.time_s, s.x, s.y, s.yaw))
        while self._history and self._history[0][0] < self.time_s - self.scene.pose_history_s:
            self._history.popleft()

    def pose_at(self, t_s: float) -> tuple[float, float, float] | None:
        """Ego (x, y, yaw) at sim time `t_s` (interpolated); None when outside the kept history."""
        h = self._history
        if not h or t_s < h[0][0] - 1e-9 or t_s > h[-1][0] + 1e-9:
            return None
        arr = np.array(h)
        yaw = np.unwrap(arr[:, 3])
        return (float(np.interp(t_s, arr[:, 0], arr[:, 1])), float(np.interp(t_s, arr[:, 0], arr[:, 2])),
                float(np.interp(t_s, arr[:, 0], yaw)))

    def _pose_mocap(self) -> None:
        s, data = self.state, self.data
        data.mocap_pos[self._mocap] = (s.x, s.y, 0.0)
        data.mocap_quat[self._mocap] = (math.cos(s.yaw / 2), 0.0, 0.0, math.sin(s.yaw / 2))

    def forward(self) -> None:
        """Update the MuJoCo scene (ego body, camera) from the vehicle state: call before rendering."""
        self._pose_mocap()
        self._mj.mj_kinematics(self.model, self.data)
        self._mj.mj_camlight(self.model, self.data)

    def camera_model(self, width: int, height: int) -> CameraModel:
        """Pinhole intrinsics matching MuJoCo's rendering (vertical fovy, square pixels, centred)."""
        return pinhole_model(self.model, self._cam, "front", width, height)

    def camera_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """World pose of the front camera's optical frame (x right, y down, z forward); after `forward()`."""
        return optical_pose(self.data, self._cam)

    def ego_to_world(self, points_ego: np.ndarray, pose: tuple[float, float, float] | None = None) -> np.ndarray:
        """[N, 2|3] ego-frame points (z = 0 on the road when absent) -> [N, 3] world points."""
        p = np.asarray(points_ego, dtype=float).reshape(len(points_ego), -1)
        x0, y0, yaw = pose if pose is not None else (self.state.x, self.state.y, self.state.yaw)
        c, s = math.cos(yaw), math.sin(yaw)
        z = p[:, 2] if p.shape[1] > 2 else np.zeros(len(p))
        return np.stack([x0 + c * p[:, 0] - s * p[:, 1], y0 + s * p[:, 0] + c * p[:, 1], z], axis=1)


def project_ego_points(sim: DriveSim, points_ego: np.ndarray, cam: CameraModel) -> tuple[np.ndarray, np.ndarray]:
    """Ego-frame road points -> ([N, 2] pixels, [N] inside mask) in the front camera at the present state."""
    return project_points(world_to_camera(sim.ego_to_world(points_ego), sim.camera_pose()), cam)


class FrontCamera:
    """Offscreen renderer of the ego's front camera. Thread contract: one thread for all calls."""

    def __init__(self, sim: DriveSim, width: int, height: int) -> None:
        import mujoco

        gl = sim.model.vis.global_
        if width > gl.offwidth or height > gl.offheight:
            raise DriveError(f"width/height: {width}x{height} exceeds the offscreen buffer "
                             f"{gl.offwidth}x{gl.offheight}; build the DriveSim with a larger offscreen_size")
        self.sim = sim
        self.model = sim.camera_model(width, height)
        from plan_stack.embodiments.gl_backend import choose_backend

        choose_backend()  # a working offscreen backend (EGL, then OSMesa) unless MUJOCO_GL is set
        self._renderer = mujoco.Renderer(sim.model, height=int(height), width=int(width))
        self._option = mujoco.MjvOption()
        self._option.geomgroup[3] = 0  # the ego's own body (group 3) would hide the road ahead

    def render(self) -> np.ndarray:
        """[H, W, 3] uint8 RGB at the sim's present state."""
        self.sim.forward()
        self._renderer.update_scene(self.sim.data, camera="front", scene_option=self._option)
        return self._renderer.render().copy()

    def segmentation(self) -> np.ndarray:
        """[H, W] geom id per pixel (-1 background) at the sim's present state, for obstacle boxes."""
        self.sim.forward()
        return segmentation_ids(self._renderer, self.sim.data, "front", self._option)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
