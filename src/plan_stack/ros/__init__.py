"""ROS edge of plan_stack: the conventions every node follows and message conversions.

`params` (node parameters from config dataclasses), `qos` (named QoS profiles), `diagnostics`
(`/diagnostics` publishing), `lifecycle` (sessions, executors, spinning, shutdown, `node_main`),
`clock` (clock-reset callbacks), `time` (stamps), `image` (Image <-> numpy), `action_client`,
`domains` (ROS domain reservation for tests and parallel jobs), `testing` (test helpers).
"""
