"""ONNX export of a converted model: the export and its checks (export), the converters that
teach MXNet's exporter the casts and low-precision ops (converters), the weights, constants and
tensor types of the written model (weights, constants, retype). Imports the core, io and passes."""
