"""MXNet 1.9.1's own AMP conversion tests, ported to run on CPU against mxnet_amp."""
