"""Applications on top of the libraries: the robot-wide training chain (`plan-stack train`, `train`).

A recipe module composes recording, the trainers of `planning.training` and `actions.train`, the
evaluations of `eval` and the model directory into one resumable command. Libraries never import it.
"""
