"""Driving embodiment: plan waypoints -> time-stamped trajectories, bicycle model, follower, simulator.

Libraries here import no ROS (`vehicle`, `trajectory`, `follower`, `sim`);
`bridge_node` and `sim_node` are the thin ROS shells.
"""
