"""plan_stack: camera streams to robot motion (see README.md).

Importing it imports nothing heavy. The package may live in two directories
at once during development: the source tree (src/plan_stack, first on
PYTHONPATH) and the colcon install (which also holds the generated
plan_stack.msg / plan_stack.action); extend_path merges them.
"""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
__version__ = "0.1.0"
