"""Offscreen GL backend choice: the user's MUJOCO_GL wins; otherwise the first backend that renders."""
from __future__ import annotations

from plan_stack.embodiments import gl_backend


def test_a_backend_the_user_set_is_kept_without_probing(monkeypatch):
    monkeypatch.setattr(gl_backend, "backend_works", lambda b: (_ for _ in ()).throw(AssertionError("probed")))
    env = {"MUJOCO_GL": "osmesa"}
    assert gl_backend.choose_backend(env) == "osmesa"
    assert env == {"MUJOCO_GL": "osmesa"}


def test_unset_backend_is_probed_egl_first_and_exported(monkeypatch):
    monkeypatch.setattr(gl_backend, "_chosen", None)
    env = {}
    chosen = gl_backend.choose_backend(env)
    assert chosen in gl_backend.OFFSCREEN_BACKENDS
    assert env["MUJOCO_GL"] == chosen and env["PYOPENGL_PLATFORM"] == chosen
    assert gl_backend.backend_works(chosen)


def test_a_backend_that_cannot_render_is_reported_as_not_working():
    assert not gl_backend.backend_works("glx_without_display_does_not_exist")


def test_library_renderers_work_in_a_shell_without_mujoco_gl():
    """What a user runs after `source install/setup.bash` alone (record-demos, eval-head): every simulator's
    camera renderer chooses a working backend itself instead of failing in MuJoCo's context creation."""
    import os
    import subprocess
    import sys

    code = ("from plan_stack.embodiments.aloha.sim import AlohaSim, CameraRenderer\n"
            "sim = AlohaSim(offscreen_size=(64, 48)); r = CameraRenderer(sim, 64, 48, ('cam_high',))\n"
            "print(r.render('cam_high').shape)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "(48, 64, 3)" in out.stdout
