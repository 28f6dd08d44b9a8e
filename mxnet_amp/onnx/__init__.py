"""ONNX export of a converted model: the export and its checks (export), MXNet's exporter run
on it and the output names and order it writes (exporter), the converters that teach MXNet's
exporter the casts and low-precision ops (converters), the weights, constants and tensor types
of the written model (weights, constants, retype), and the graph as other tools read it: node
names, inference BatchNorms, plain float casts (tidy). Imports the core, io and passes."""
