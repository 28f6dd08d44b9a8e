"""The measured accuracy search of :mod:`mxnet_amp.auto`: prefixes of a ranked candidate
order and the bisection over them (:mod:`.bisection`), and the shrinking that makes every
kept set 1-minimal (:mod:`.shrink`)."""
