"""Recorded demonstrations -> planner training and evaluation samples (no ROS imports).

`episodes` reads what `plan-stack record-demos` wrote (MCAP bag + annotation
JSON per episode) into keyframes: camera images as ingest produces them and
the annotated plan; `samples` turns a keyframe into a prompt and a response
(sub-task text, tool call, primitive blocks); `metrics` scores decoded plans
against the annotation; `split` fixes which seeds train and which are held out.
"""
