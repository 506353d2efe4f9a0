"""Data: demonstrations, annotations, datasets and rosbag2 (MCAP) bag I/O, without ROS imports."""
