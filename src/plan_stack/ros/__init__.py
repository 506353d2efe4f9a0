"""ROS edge of plan_stack: node conventions, message conversions, bring-up helpers."""
