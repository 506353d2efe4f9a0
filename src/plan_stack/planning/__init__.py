"""VFlash decoding engine (ROS-free): vocabulary, primitive layouts, target adapter,
drafter, AR / DFlash / VFlash decoders and drafter training (DESIGN section 4).

Nothing heavy is imported here; import the submodules you need.
"""
