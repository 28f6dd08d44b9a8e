"""``python -m mxnet_amp``: the ``mxnet-amp`` command line."""
import os
import sys

try:
    from .cli.main import run
except KeyboardInterrupt:   # Ctrl-C while the command line loads: nothing has started yet
    sys.stderr.write("mxnet-amp: interrupted\n")
    sys.stderr.flush()
    os._exit(130)

run()
