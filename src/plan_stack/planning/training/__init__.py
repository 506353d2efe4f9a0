"""Training of the planner's models (ROS-free): the target (`target`), the VFlash drafter (`drafter`),
data-parallel ranks on the CPU (`data_parallel`), the learning-rate schedule (`schedule`) and checkpoint files
(`checkpoints`) every trainer shares, and `plan-stack train-drafter` (`cli`).

Nothing heavy is imported here; import the submodules you need.
"""
