"""Data without ROS imports: recorded demonstrations, datasets, bag I/O.

`episodes` reads what `plan-stack record-demos` wrote (MCAP bag + annotation
JSON per episode) into keyframes: camera images as ingest produces them and
the annotated plan; `samples` turns a keyframe into a prompt and a response
(sub-task text, tool call, primitive blocks); `metrics` scores decoded plans
against the annotation; `split` fixes which seeds train and which are held out;
`bag_writer` writes rosbag2 (MCAP) bags in closed splits (`plan-stack record`).
"""
