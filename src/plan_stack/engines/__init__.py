"""Inference engines: device selection, ONNX export, onnxruntime and TensorRT runners.

The fixed-shape models of the stack (the drafter's draft pass per primitive
block size, the action head's flow step, the target's vision encoder for one
image size) are exported once to ONNX (`plan-stack export`) and run through
onnxruntime (`backend: onnx`) or TensorRT engines built from the same files
(`backend: tensorrt`, where the `tensorrt` package and a GPU exist). The
target's KV-cached autoregressive forward stays in PyTorch. Every exported
model has a parity test against eager PyTorch.

No ROS imports; heavy imports (onnx, onnxruntime, tensorrt) happen on use.
"""
