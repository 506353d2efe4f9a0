# Source me (bash) from anywhere: the environment `make test`, benchmarks and
# the demo run in. `--venv-only` stops before install/ (used to build it).
_ps_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ ! -f "$_ps_root/.venv/ros_env.sh" ]; then
  echo "plan_stack: run 'make setup' first (no .venv/ros_env.sh)" >&2; return 1
fi
if [ "${1:-}" = "--venv-only" ] || [ ! -f "$_ps_root/install/setup.bash" ]; then
  source "$_ps_root/.venv/ros_env.sh"
else
  # colcon's setup scripts read unset variables
  set +u; source "$_ps_root/install/setup.bash"; set -u
fi
export RMW_IMPLEMENTATION=rmw_fastrtps_cpp
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
# Tests and tools import the source tree first; plan_stack.msg/.action come
# from install/ (plan_stack/__init__.py merges both package directories).
export PYTHONPATH="$_ps_root/src${PYTHONPATH:+:$PYTHONPATH}"
export MUJOCO_GL="${MUJOCO_GL:-egl}"
unset _ps_root
