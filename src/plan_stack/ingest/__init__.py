"""Camera + joint-state ingestion: timestamp sync (pure) and the `ingest` node.

Library modules (`config`, `sync`, `joints`, `preprocess`, `monitor`,
`errors`) import no rclpy and no message packages; `node` is the ROS shell.
"""
