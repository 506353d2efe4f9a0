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
