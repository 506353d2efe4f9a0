"""Node lifecycle: sessions, executors, spinning and shutdown.

`run_nodes` spins one or more nodes, each on its own executor (`executor_for`: single-threaded
unless the node class sets `executor_threads`), and shuts down cleanly on SIGINT/SIGTERM, calling
each node's `close()` if it has one. SIGINT/SIGTERM while the nodes are still being built (a planner
imports and loads its model for 10-60 s) abandons the construction at once (`StopRequested`) instead
of finishing it first. A parameter error at start-up is a one-line fatal log and exit status 2
(`node_processes.CONFIG_ERROR_STATUS`). A node whose worker thread dies calls `fail(node, reason)`:
FATAL log, and the process exits with status 1 instead of lingering half-alive. `ros_session` starts
and stops rclpy without `rclpy.init`'s context manager (absent on Jazzy). `node_main` is the `main()`
of one node class: it applies the niceness of `node_processes.NICE_ENV` first, and ends the process
with `node_processes.exit_now` (no interpreter finalisation) once the nodes are closed.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import rclpy
from rclpy.executors import Executor, ExternalShutdownException
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from plan_stack.config import ConfigError
from plan_stack.node_processes import CONFIG_ERROR_STATUS, apply_nice_from_env, exit_now
from plan_stack.ros.diagnostics import ERROR, Diagnostics
from plan_stack.ros.executors import executor_with_threads
from plan_stack.ros.params import check_overrides


def _close(node: Node) -> None:
    close = getattr(node, "close", None)
    if callable(close):
        try:
            close()
        except Exception as exc:  # a failing close must not stop the others
            node.get_logger().error(f"close() failed: {exc}")
    node.destroy_node()


#: How often the spin loop checks for a stop request (s): the worst-case
#: reaction time to SIGINT/SIGTERM.
STOP_POLL_S = 0.1


class StopRequested(BaseException):
    """SIGINT/SIGTERM arrived while the nodes were being built: the construction is abandoned.

    A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way (a model loader's)
    swallows it."""


class _StopSignals:
    """SIGINT/SIGTERM set a flag that the spin loop polls.

    rclpy's own handlers only wake executors that exist when the signal
    arrives; one landing between `rclpy.init` and the first spin was lost and
    the process spun forever. Polling a flag has no such window. Installed
    only in the main thread (Python's rule); elsewhere the caller stops us.
    While `interrupting` is set (the nodes are being built in the main
    thread) the handler also raises `StopRequested` there: a node that
    imports and loads a model for a minute would otherwise see the flag
    only after that, and launch escalates to SIGTERM and SIGKILL meanwhile.
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self.interrupting = False
        self.received = ""  # the name of the last stop signal
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: object) -> None:
        self.received = signal.Signals(signum).name
        self.event.set()
        if self.interrupting:
            raise StopRequested(self.received)

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def fail(node: Node, reason: str) -> None:
    """A node's worker died: FATAL log, ERROR diagnostic if it has any, and `run_nodes` exits with status 1."""
    node.get_logger().fatal(reason)
    diagnostics = getattr(node, "diagnostics", None)
    if isinstance(diagnostics, Diagnostics):
        try:
            diagnostics.report("fatal", ERROR, reason, now=True)
        except Exception:  # the context may be closing; the log and the exit status still say it
            pass
    node.fatal_error = reason  # type: ignore[attr-defined]  # any rclpy Node; read by run_nodes


@contextlib.contextmanager
def ros_session(args: list[str] | None = None, **kwargs: Any) -> Iterator[None]:
    """rclpy.init ... rclpy.try_shutdown, on every distribution.

    Kilted's `rclpy.init` also returns a context manager, Jazzy's returns
    None; calling it plainly and shutting down in `finally` works on both.
    """
    rclpy.init(args=args, **kwargs)
    try:
        yield
    finally:
        rclpy.try_shutdown()


def executor_for(node: Node, threads: int | None = None) -> Executor:
    """The cheapest executor that serves `node`.

    A node whose callbacks may block each other (an action executing for
    seconds, a model inference beside its subscriptions) says how many threads
    it needs in its `executor_threads` class attribute; every other node gets a
    SingleThreadedExecutor. A multi-threaded executor (`ThreadedExecutor`, rclpy's
    without its resubmission storm) costs more per callback and is reserved for
    nodes that need it.
    `threads` overrides the node's own count (bring-up `--threads`).
    rclpy's EventsExecutor is not offered: its `shutdown()` from another
    thread deadlocks on the GIL (docs/failure_behaviour.md, Executors).
    """
    wanted = int(threads if threads is not None else getattr(node, "executor_threads", 1))
    return executor_with_threads(node.context, wanted)


def run_nodes(
    factories: Iterable[Callable[[], Node]],
    args: list[str] | None = None,
    threads: int | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Create the nodes, spin them until SIGINT/SIGTERM (or `stop`), then close them.

    Each node spins on its own executor (`executor_for`) in its own thread, so
    nodes in one process cannot starve each other and an idle node sleeps in
    its wait set. Returns the process exit status: 0 on a clean shutdown
    (also when stopped while the nodes were being built), 2 when a node
    rejected its parameters at start-up, 1 when a node failed (`fail`) or a
    callback raised (FATAL log naming the node).
    """
    nodes: list[Node] = []
    status = 0
    with _StopSignals() as signals, ros_session(args=args, signal_handler_options=SignalHandlerOptions.NO):
        stopping = signals.event if stop is None else stop
        try:
            try:
                signals.interrupting = True
                try:
                    for make in factories:
                        if stopping.is_set() or signals.event.is_set():
                            return 0
                        nodes.append(make())
                        check_overrides(nodes[-1])
                finally:
                    signals.interrupting = False
            except (StopRequested, Exception) as exc:
                # StopRequested may surface as another error where it crossed C++ code (torch's loaders turn
                # it into a RuntimeError, which a node reports as a bad model_dir): a stop signal decides
                if isinstance(exc, StopRequested) or signals.event.is_set():
                    rclpy.logging.get_logger("plan_stack").info(f"{signals.received} during start-up: stopping")
                    return 0
                if isinstance(exc, ConfigError):
                    rclpy.logging.get_logger("plan_stack").fatal(f"invalid parameter {exc}")
                    return CONFIG_ERROR_STATUS
                raise
            executors = [executor_for(node, threads) for node in nodes]
            shutting_down = threading.Event()
            spinners = []
            for node, executor in zip(nodes, executors):
                executor.add_node(node)
                spinner = _Spinner(node, executor, shutting_down)
                spinner.start()
                spinners.append(spinner)
            try:
                while (rclpy.ok() and not stopping.is_set() and not signals.event.is_set()
                       and all(t.is_alive() for t in spinners)):
                    failed = [n for n in nodes if getattr(n, "fatal_error", None)]
                    if failed:
                        for n in failed:
                            sys.stderr.write(f"plan_stack: node {n.get_name()} failed: {n.fatal_error}\n")  # type: ignore[attr-defined]
                        status = 1
                        break
                    signals.event.wait(STOP_POLL_S)
                if (rclpy.ok() and not all(t.is_alive() for t in spinners) and not stopping.is_set()
                        and not signals.event.is_set()):
                    status = status or 1
            finally:
                shutting_down.set()
                for node, executor in zip(nodes, executors):
                    executor.remove_node(node)
                    executor.shutdown(timeout_sec=1.0)
                for spinner in spinners:
                    spinner.join(timeout=1.0)
            if any(s.error is not None for s in spinners):
                status = 1
        finally:
            for node in reversed(nodes):
                _close(node)
    return status


class _Spinner(threading.Thread):
    """Spins one node's executor. A callback that raises ends the thread; `run_nodes` then stops the
    process with status 1 after a FATAL log naming the node (a node must not linger half dead).
    What the executor raises while `run_nodes` shuts it down from another thread is expected and
    ignored (rclpy may run a last task after its guard condition is destroyed)."""

    def __init__(self, node: Node, executor: Executor, shutting_down: threading.Event) -> None:
        super().__init__(name=f"spin:{node.get_name()}", daemon=True)
        self.node_name = node.get_fully_qualified_name()
        self.executor = executor
        self.shutting_down = shutting_down
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.executor.spin()
        except ExternalShutdownException:
            pass
        except Exception as exc:  # noqa: BLE001 - reported, then the process stops
            if not self.shutting_down.is_set():
                self.error = exc
                rclpy.logging.get_logger("plan_stack").fatal(
                    f"node {self.node_name}: a callback raised {type(exc).__name__}: {exc}; stopping")


def node_main(node_cls: type[Node]) -> Callable[[list[str] | None], int]:
    """A `main(args=None)` for one node class, for lib/plan_stack wrappers."""

    def main(args: list[str] | None = None) -> int:
        try:
            apply_nice_from_env()
        except ConfigError as exc:
            sys.stderr.write(f"plan_stack: {node_cls.__name__}: {exc}\n")
            exit_now(CONFIG_ERROR_STATUS)
        exit_now(run_nodes([node_cls], args=args))

    main.__doc__ = (f"Run the {node_cls.__name__} in its own process, which ends with the exit status "
                    "(`node_processes.exit_now`).")
    return main
