"""Conventions every plan_stack node follows, in one place.

* Parameters: a node declares the fields of its component's config dataclass
  (`declare_config`), with descriptors built from the fields' `param(...)`
  metadata; the values come from `config/<robot>.yaml` (bring-up, launch files
  or `--params-file`). A wrong type, out-of-range or missing required value
  raises `ParameterError` naming the parameter, and `run_nodes` turns that
  into a one-line fatal log and exit status 2 at start-up; so does a
  parameter given to a node that does not declare it (a misspelled name).
  An integer is accepted where a float is expected. At run time
  (`ros2 param set`, `set_parameters`) a node that passes `on_change` accepts
  changes of its non-read-only fields, validated by the same dataclass (a bad
  value is refused with the dataclass's message) and applied through
  `on_change(new_config)`; every other parameter is read-only and refused.
* QoS: the named profiles below, chosen by meaning.
* Diagnostics: `Diagnostics` publishes `diagnostic_msgs/DiagnosticArray` on
  `/diagnostics` (absolute, as diagnostic_aggregator expects).
* Lifecycle: `run_nodes` spins one or more nodes and shuts down cleanly on
  SIGINT/SIGTERM, calling each node's `close()` if it has one. A node whose
  worker thread dies calls `fail(node, reason)`: FATAL log, and the process
  exits with status 1 instead of lingering half-alive. `ros_session` starts
  and stops rclpy without `rclpy.init`'s context manager (absent on Jazzy).
"""
from __future__ import annotations

import contextlib
import dataclasses
import signal
import sys
import threading
from typing import Any, Callable, Iterable, TypeVar

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType, SetParametersResult
from rclpy.exceptions import (
    InvalidParameterTypeException,
    InvalidParameterValueException,
    ParameterUninitializedException,
)
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.signals import SignalHandlerOptions
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

from plan_stack.config import ConfigError, FieldKind, field_kinds, info_of

C = TypeVar("C")

# --- QoS ------------------------------------------------------------------------

#: Raw sensor streams (cameras, joint states): best effort, keep last 5.
SENSOR_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=5,
    reliability=ReliabilityPolicy.BEST_EFFORT,
    durability=DurabilityPolicy.VOLATILE,
)
#: Observations, plans, features, chunks, trajectories: reliable, keep last 10.
RELIABLE_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=10,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
#: Latched state (camera intrinsics, robot description): late joiners get the last one.
LATCHED_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
#: Diagnostics, as diagnostic_updater publishes them.
DIAGNOSTICS_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10)

QOS_BY_NAME = {
    "sensor": SENSOR_QOS,
    "sensor_data": qos_profile_sensor_data,
    "reliable": RELIABLE_QOS,
    "latched": LATCHED_QOS,
}


def qos_by_name(name: str) -> QoSProfile:
    """QoS profile for a config string (`sensor`, `sensor_data`, `reliable`, `latched`)."""
    try:
        return QOS_BY_NAME[name]
    except KeyError:
        raise ConfigError(f"qos: unknown profile {name!r} (known: {sorted(QOS_BY_NAME)})") from None


# --- parameters -----------------------------------------------------------------


class ParameterError(ConfigError):
    """A node parameter is missing, mistyped or out of range (names it)."""


_ARRAY_TYPES = {
    bool: ParameterType.PARAMETER_BOOL_ARRAY,
    int: ParameterType.PARAMETER_INTEGER_ARRAY,
    float: ParameterType.PARAMETER_DOUBLE_ARRAY,
    str: ParameterType.PARAMETER_STRING_ARRAY,
}
_SCALAR_TYPES = {
    bool: ParameterType.PARAMETER_BOOL,
    int: ParameterType.PARAMETER_INTEGER,
    float: ParameterType.PARAMETER_DOUBLE,
    str: ParameterType.PARAMETER_STRING,
}


def _descriptor(name: str, f: dataclasses.Field, kind: FieldKind, read_only: bool) -> ParameterDescriptor:
    info = info_of(f)
    desc = ParameterDescriptor(name=name, description=info.description, read_only=read_only)
    if kind.dynamic:
        desc.dynamic_typing = True
        desc.type = ParameterType.PARAMETER_NOT_SET
        return desc
    desc.type = _SCALAR_TYPES[kind.scalar] if kind.scalar else _ARRAY_TYPES[kind.item]
    if info.choices is not None:
        desc.additional_constraints = f"one of {list(info.choices)}"
    # rclpy enforces ranges only on scalars; sequences are checked by the config.
    if kind.scalar is float and (info.min is not None or info.max is not None):
        desc.floating_point_range = [FloatingPointRange(
            from_value=float(info.min if info.min is not None else -sys.float_info.max),
            to_value=float(info.max if info.max is not None else sys.float_info.max),
            step=0.0,
        )]
    elif kind.scalar is int and (info.min is not None or info.max is not None):
        desc.integer_range = [IntegerRange(
            from_value=int(info.min if info.min is not None else -(2**63)),
            to_value=int(info.max if info.max is not None else 2**63 - 1),
            step=0,
        )]
    return desc


_REQUIRED = object()


def _declaration(f: dataclasses.Field, kind: FieldKind) -> tuple[Any, Any]:
    """(value to declare with, value to use when the parameter stays unset).

    Required fields and empty-list defaults are declared statically typed but
    uninitialised (rclpy cannot infer an element type from `[]`); an unset
    required field is an error, an unset empty list keeps its default.
    """
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    else:
        default = _REQUIRED
    empty_list = isinstance(default, (tuple, list)) and not default
    if default is _REQUIRED or (empty_list and not kind.dynamic):
        if kind.dynamic:
            return None, default
        ros_type = _SCALAR_TYPES[kind.scalar] if kind.scalar else _ARRAY_TYPES[kind.item]
        return Parameter.Type(ros_type), default
    return (list(default) if isinstance(default, tuple) else default), default


def _accept_int_for_float(node: Node, pname: str, kind: FieldKind) -> None:
    """An integer override (YAML `10`) of a float parameter becomes 10.0 (rclpy would refuse the type)."""
    override = node._parameter_overrides.get(pname)
    if override is None or kind.dynamic:
        return
    if kind.scalar is float and override.type_ == Parameter.Type.INTEGER:
        node._parameter_overrides[pname] = Parameter(pname, Parameter.Type.DOUBLE, float(override.value))
    elif kind.item is float and override.type_ == Parameter.Type.INTEGER_ARRAY:
        node._parameter_overrides[pname] = Parameter(pname, Parameter.Type.DOUBLE_ARRAY,
                                                     [float(v) for v in override.value])


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):  # array.array / numpy arrays from rclpy
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    return value


def declare_config(node: Node, cls: type[C], prefix: str = "", on_change: Callable[[C], None] | None = None,
                   runtime: Iterable[str] | None = None, **fixed: Any) -> C:
    """Declare every field of `cls` as a parameter and build the config.

    `prefix` namespaces the parameters (`prefix.field`). Fields named in
    `fixed` are not declared (the node supplies them). Raises ParameterError
    naming the parameter when a value is missing, mistyped or out of range.

    Without `on_change` every parameter is read-only at run time (a set is
    refused with a reason). With it, fields not marked `read_only` may be set
    at run time: the new config is built by `dataclasses.replace` (so the
    dataclass validates it; a refusal carries its message) and handed to
    `on_change` once rclpy has stored the values. `runtime` narrows the
    settable fields to those named (the ones `on_change` really applies).
    """
    settable = None if runtime is None else set(runtime)
    values: dict[str, Any] = dict(fixed)
    names: dict[str, str] = {}  # parameter name -> field name
    for name, (f, kind) in field_kinds(cls).items():
        if name in fixed:
            continue
        pname = f"{prefix}.{name}" if prefix else name
        names[pname] = name
        declared, unset = _declaration(f, kind)
        _accept_int_for_float(node, pname, kind)
        read_only = on_change is None or info_of(f).read_only or (settable is not None and name not in settable)
        try:
            node.declare_parameter(pname, declared, _descriptor(pname, f, kind, read_only))
            value = node.get_parameter(pname).value
        except ParameterUninitializedException:
            value = None
        except (InvalidParameterTypeException, InvalidParameterValueException) as exc:
            raise _param_error(node, f"{pname}: {exc}") from None
        if value is None:
            if unset is _REQUIRED:
                raise _param_error(node, f"{pname}: required parameter is missing")
            value = unset
        values[name] = _plain(value)
    try:
        cfg = cls(**values)
    except ConfigError as exc:
        raise _param_error(node, f"{prefix + '.' if prefix else ''}{exc}") from None
    if on_change is not None:
        _watch_changes(node, cfg, names, prefix, on_change)
    return cfg


def _watch_changes(node: Node, cfg: Any, names: dict[str, str], prefix: str, on_change: Callable) -> None:
    """Validate run-time sets of this config's parameters with the dataclass; apply accepted ones."""
    state = {"cfg": cfg, "pending": None}

    def candidate(params: list[Parameter]) -> Any:
        changes = {names[p.name]: _plain(p.value) for p in params if p.name in names}
        return dataclasses.replace(state["cfg"], **changes) if changes else None

    def on_set(params: list[Parameter]) -> SetParametersResult:
        try:
            state["pending"] = candidate(params)
        except ConfigError as exc:
            return SetParametersResult(successful=False, reason=f"{prefix + '.' if prefix else ''}{exc}")
        return SetParametersResult(successful=True)

    def post_set(params: list[Parameter]) -> None:
        new, state["pending"] = state["pending"], None
        if new is None:
            return
        state["cfg"] = new
        try:
            on_change(new)
        except Exception as exc:  # the values are stored; say loudly that applying them failed
            node.get_logger().error(f"applying parameter change failed: {exc!r}")
        else:
            node.get_logger().info("parameters changed: " + ", ".join(
                f"{p.name}={_plain(p.value)!r}" for p in params if p.name in names))

    node.add_on_set_parameters_callback(on_set)
    node.add_post_set_parameters_callback(post_set)


def check_overrides(node: Node) -> None:
    """Refuse parameters given to a node that it never declared (a misspelled name in the config).

    rclpy silently ignores such overrides; a robot would then run on a default
    the operator thought they had changed.
    """
    unknown = sorted(n for n in node._parameter_overrides if not node.has_parameter(n))
    if unknown:
        known = sorted(n for n in node._parameters if n != "start_type_description_service")
        raise _param_error(node, f"{unknown[0]}: unknown parameter (declared: {known})")


def _param_error(node: Node, message: str) -> ParameterError:
    return ParameterError(f"{message} (node '{node.get_fully_qualified_name()}')")


# --- clock resets ---------------------------------------------------------------

#: A backward jump of ROS time by more than this (s) is a clock reset (a simulator reset or restart).
CLOCK_RESET_S = 1e-3


def on_clock_reset(node: Node, callback: Callable[[], None]) -> None:
    """Call `callback()` (no arguments, must not block) whenever the node's ROS time jumps backwards.

    With sim time, a restarted or reset simulator starts /clock again from 0: state kept from before
    (references, measured states, chunks) would be replayed against a different world.
    """
    from rclpy.clock import JumpThreshold
    from rclpy.duration import Duration

    threshold = JumpThreshold(min_forward=None, min_backward=Duration(nanoseconds=-int(CLOCK_RESET_S * 1e9)),
                              on_clock_change=False)
    handle = node.get_clock().create_jump_callback(threshold, post_callback=lambda _jump: callback())
    handles = getattr(node, "_plan_stack_jump_handles", [])
    handles.append(handle)  # the handle must outlive the node's use of it
    node._plan_stack_jump_handles = handles


# --- diagnostics ----------------------------------------------------------------

OK = DiagnosticStatus.OK
WARN = DiagnosticStatus.WARN
ERROR = DiagnosticStatus.ERROR
STALE = DiagnosticStatus.STALE


class Diagnostics:
    """Per-node diagnostics on `/diagnostics`.

    Each named status keeps its latest level, message and values; a timer
    republishes all of them every `period_s`, and `report(..., now=True)`
    publishes at once (use it for rejections, so none is lost between ticks).
    Thread-safe: callbacks in different callback groups may report.
    """

    def __init__(self, node: Node, period_s: float = 1.0, hardware_id: str = "") -> None:
        self._node = node
        self._hardware_id = hardware_id
        self._pub = node.create_publisher(DiagnosticArray, "/diagnostics", DIAGNOSTICS_QOS)
        self._lock = threading.Lock()
        self._status: dict[str, DiagnosticStatus] = {}
        # A zero-argument callback: rclpy's EventsExecutor hands a TimerInfo to any callback that
        # takes an argument, and `publish(only=...)` would take it for a status list.
        self._timer = node.create_timer(period_s, lambda: self.publish())

    def report(self, name: str, level: int, message: str, now: bool = False, **values: Any) -> None:
        status = DiagnosticStatus(
            level=level,
            name=f"{self._node.get_name()}: {name}",
            message=message,
            hardware_id=self._hardware_id,
            values=[KeyValue(key=k, value=str(v)) for k, v in values.items()],
        )
        with self._lock:
            self._status[name] = status
        if now:
            self.publish(only=[status])

    def level(self, name: str) -> bytes | None:
        """Latest level of a status (a DiagnosticStatus level byte), None if never reported."""
        with self._lock:
            st = self._status.get(name)
        return None if st is None else st.level

    def publish(self, only: Iterable[DiagnosticStatus] | None = None) -> None:
        with self._lock:
            status = list(only) if only is not None else list(self._status.values())
        if not status or not rclpy.ok(context=self._node.context):
            return
        msg = DiagnosticArray(status=status)
        msg.header.stamp = self._node.get_clock().now().to_msg()
        self._pub.publish(msg)


# --- lifecycle ------------------------------------------------------------------


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


class _StopSignals:
    """SIGINT/SIGTERM set a flag that the spin loop polls.

    rclpy's own handlers only wake executors that exist when the signal
    arrives; one landing between `rclpy.init` and the first spin was lost and
    the process spun forever. Polling a flag has no such window. Installed
    only in the main thread (Python's rule); elsewhere the caller stops us.
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "_StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, lambda _s, _f: self.event.set())
        return self

    def __exit__(self, *exc) -> None:
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
    node.fatal_error = reason


@contextlib.contextmanager
def ros_session(args: list[str] | None = None, **kwargs: Any):
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
    SingleThreadedExecutor. rclpy's MultiThreadedExecutor costs a busy core
    when polled with `spin_once` and is reserved for nodes that need it.
    `threads` overrides the node's own count (bring-up `--threads`).
    rclpy's EventsExecutor is not offered: its `shutdown()` from another
    thread deadlocks on the GIL (docs/failure_behaviour.md, Executors).
    """
    wanted = int(threads if threads is not None else getattr(node, "executor_threads", 1))
    if wanted <= 1:
        return SingleThreadedExecutor(context=node.context)
    return MultiThreadedExecutor(num_threads=wanted, context=node.context)


def run_nodes(
    factories: Iterable[Callable[[], Node]],
    args: list[str] | None = None,
    threads: int | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Create the nodes, spin them until SIGINT/SIGTERM (or `stop`), then close them.

    Each node spins on its own executor (`executor_for`) in its own thread, so
    nodes in one process cannot starve each other and an idle node sleeps in
    its wait set. Returns the process exit status: 0 on a clean shutdown, 2
    when a node rejected its parameters at start-up, 1 when a node failed
    (`fail`) or a callback raised (FATAL log naming the node).
    """
    nodes: list[Node] = []
    status = 0
    with _StopSignals() as signals, ros_session(args=args, signal_handler_options=SignalHandlerOptions.NO):
        stopping = signals.event if stop is None else stop
        try:
            try:
                for make in factories:
                    nodes.append(make())
                    check_overrides(nodes[-1])
            except ConfigError as exc:
                rclpy.logging.get_logger("plan_stack").fatal(f"invalid parameter {exc}")
                return 2
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
                            sys.stderr.write(f"plan_stack: node {n.get_name()} failed: {n.fatal_error}\n")
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
        return run_nodes([node_cls], args=args)

    main.__doc__ = f"Run the {node_cls.__name__} in its own process."
    return main
