"""Conventions every plan_stack node follows, in one place.

* Parameters: a node declares the fields of its component's config dataclass
  (`declare_config`), with descriptors built from the fields' `param(...)`
  metadata; the values come from `config/<robot>.yaml` (bring-up, launch files
  or `--params-file`). A wrong type, out-of-range or missing required value
  raises `ParameterError` naming the parameter, and `run_nodes` turns that
  into a one-line fatal log and exit status 2 at start-up.
* QoS: the named profiles below, chosen by meaning.
* Diagnostics: `Diagnostics` publishes `diagnostic_msgs/DiagnosticArray` on
  `/diagnostics` (absolute, as diagnostic_aggregator expects).
* Lifecycle: `run_nodes` spins one or more nodes and shuts down cleanly on
  SIGINT/SIGTERM, calling each node's `close()` if it has one.
"""
from __future__ import annotations

import dataclasses
import signal
import sys
import threading
from typing import Any, Callable, Iterable, TypeVar

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType
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


def _descriptor(name: str, f: dataclasses.Field, kind: FieldKind) -> ParameterDescriptor:
    info = info_of(f)
    desc = ParameterDescriptor(name=name, description=info.description, read_only=info.read_only)
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


def declare_config(node: Node, cls: type[C], prefix: str = "", **fixed: Any) -> C:
    """Declare every field of `cls` as a parameter and build the config.

    `prefix` namespaces the parameters (`prefix.field`). Fields named in
    `fixed` are not declared (the node supplies them). Raises ParameterError
    naming the parameter when a value is missing, mistyped or out of range.
    """
    values: dict[str, Any] = dict(fixed)
    for name, (f, kind) in field_kinds(cls).items():
        if name in fixed:
            continue
        pname = f"{prefix}.{name}" if prefix else name
        declared, unset = _declaration(f, kind)
        try:
            node.declare_parameter(pname, declared, _descriptor(pname, f, kind))
            value = node.get_parameter(pname).value
        except ParameterUninitializedException:
            value = None
        except (InvalidParameterTypeException, InvalidParameterValueException) as exc:
            raise _param_error(node, f"{pname}: {exc}") from None
        if value is None:
            if unset is _REQUIRED:
                raise _param_error(node, f"{pname}: required parameter is missing")
            value = unset
        if hasattr(value, "tolist"):  # array.array / numpy arrays from rclpy
            value = value.tolist()
        elif isinstance(value, tuple):
            value = list(value)
        values[name] = value
    try:
        return cls(**values)
    except ConfigError as exc:
        raise _param_error(node, f"{prefix + '.' if prefix else ''}{exc}") from None


def _param_error(node: Node, message: str) -> ParameterError:
    return ParameterError(f"{message} (node '{node.get_fully_qualified_name()}')")


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


def executor_for(node: Node, threads: int | None = None) -> Executor:
    """The cheapest executor that serves `node`.

    A node whose callbacks may block each other (an action executing for
    seconds, a model inference beside its subscriptions) says how many threads
    it needs in its `executor_threads` class attribute; every other node gets a
    SingleThreadedExecutor. rclpy's MultiThreadedExecutor costs a busy core
    when polled with `spin_once` and is reserved for nodes that need it.
    `threads` overrides the node's own count (bring-up `--threads`).
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
    when a node rejected its parameters at start-up.
    """
    nodes: list[Node] = []
    with _StopSignals() as signals, rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO):
        stopping = signals.event if stop is None else stop
        try:
            try:
                for make in factories:
                    nodes.append(make())
            except ConfigError as exc:
                rclpy.logging.get_logger("plan_stack").fatal(f"invalid parameter {exc}")
                return 2
            executors = [executor_for(node, threads) for node in nodes]
            spinners = []
            for node, executor in zip(nodes, executors):
                executor.add_node(node)
                spinner = threading.Thread(target=_spin, args=(executor,), name=f"spin:{node.get_name()}",
                                           daemon=True)
                spinner.start()
                spinners.append(spinner)
            try:
                while (rclpy.ok() and not stopping.is_set() and not signals.event.is_set()
                       and all(t.is_alive() for t in spinners)):
                    signals.event.wait(STOP_POLL_S)
            finally:
                for node, executor in zip(nodes, executors):
                    executor.remove_node(node)
                    executor.shutdown(timeout_sec=1.0)
                for spinner in spinners:
                    spinner.join(timeout=1.0)
        finally:
            for node in reversed(nodes):
                _close(node)
    return 0


def _spin(executor: Executor) -> None:
    try:
        executor.spin()
    except ExternalShutdownException:
        pass


def node_main(node_cls: type[Node]) -> Callable[[list[str] | None], int]:
    """A `main(args=None)` for one node class, for lib/plan_stack wrappers."""

    def main(args: list[str] | None = None) -> int:
        return run_nodes([node_cls], args=args)

    main.__doc__ = f"Run the {node_cls.__name__} in its own process."
    return main
