"""VFlash decoding engine (ROS-free): vocabulary, primitive layouts, target adapter,
drafter, AR / DFlash / VFlash decoders and drafter training, after *VFlash: Enabling System-1 VLMs for Physical AI*.

Nothing heavy is imported here; import the submodules you need.
"""
