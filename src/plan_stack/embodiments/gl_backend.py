"""Choose an offscreen OpenGL backend for MuJoCo rendering before any context is made.

MuJoCo picks its GL backend from `MUJOCO_GL` when it is first imported and
falls back to GLFW, which needs a display: on a headless machine the
simulator's rendering thread then dies on its first frame. Unless the user
chose a backend, the simulators probe EGL, then OSMesa, each in a short
subprocess (a failed GL initialisation can leave a process unusable), and use
the first that renders. No ROS imports.
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

__all__ = ["OFFSCREEN_BACKENDS", "GlBackendError", "backend_works", "choose_backend"]

#: Tried in this order when MUJOCO_GL is unset.
OFFSCREEN_BACKENDS = ("egl", "osmesa")
#: A probe that takes longer than this (s) counts as not working.
PROBE_TIMEOUT_S = 60.0

_PROBE = (
    "import importlib, sys; b = sys.argv[1]; "
    "ctx = importlib.import_module('mujoco.' + b).GLContext(16, 16); ctx.make_current(); ctx.free()"
)
_chosen: str | None = None


class GlBackendError(RuntimeError):
    """No offscreen OpenGL backend works on this machine."""


def backend_works(backend: str) -> bool:
    """True when a MuJoCo GL context of `backend` can be created and made current (in a subprocess)."""
    env = {**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend}
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE, backend], env=env, capture_output=True,
                              timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def choose_backend(environ: dict | None = None) -> str:
    """The MuJoCo GL backend to render with; sets `MUJOCO_GL` (and `PYOPENGL_PLATFORM`) when it chose one.

    A backend the user set is kept as is. Otherwise EGL, then OSMesa; raises
    GlBackendError when neither works. Probed once per process.
    """
    global _chosen
    env = os.environ if environ is None else environ
    user = env.get("MUJOCO_GL", "").strip()
    if user:
        return user
    if _chosen is None:
        for backend in OFFSCREEN_BACKENDS:
            if backend_works(backend):
                _chosen = backend
                break
        else:
            raise GlBackendError(
                "no offscreen OpenGL backend works (tried EGL, then OSMesa): install libegl1 (or libosmesa6), "
                "set MUJOCO_GL to a backend that works here, or disable rendering (camera_rate_hz: 0)")
    env["MUJOCO_GL"] = _chosen
    env.setdefault("PYOPENGL_PLATFORM", _chosen)
    _use_in_loaded_mujoco(_chosen)
    return _chosen


def _use_in_loaded_mujoco(backend: str) -> None:
    """If mujoco was imported before the choice (it fixed GLFW then), point its renderer at `backend`."""
    gl_context: Any = sys.modules.get("mujoco.rendering.classic.gl_context")  # a module patched in place
    if gl_context is None:
        return
    import importlib

    gl_context.GLContext = importlib.import_module(f"mujoco.{backend}").GLContext
