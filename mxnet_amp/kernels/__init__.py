"""Compiled rounding kernels for the emulation (:mod:`mxnet_amp.kernels.build`)."""
