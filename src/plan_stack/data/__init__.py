"""Data without ROS imports: recorded demonstrations, datasets, bag I/O.

`episodes` reads what `plan-stack record-demos` wrote (MCAP bag + annotation
JSON per episode) into keyframes: camera images as ingest produces them and
the annotated plan (`plan_stack.planning.samples` turns a keyframe into a prompt
and a response);
`bags` reads and writes rosbag2 (MCAP) bags (`read_bag`, the recorders'
`BagWriter`, and `SplitBagWriter`, closed splits for `plan-stack record`);
`recording` holds the options and helpers every robot's demonstration recorder
shares; `annotation` the per-keyframe plan annotation (future tool paths,
projected waypoints, object boxes, sub-tasks) the recorders write. Plans decoded
from these keyframes are scored in `plan_stack.eval.plans`. `record_cli` is
`plan-stack record` (live topics to a bag; a ROS edge).
"""
