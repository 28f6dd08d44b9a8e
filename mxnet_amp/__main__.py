"""``python -m mxnet_amp``: the ``mxnet-amp`` command line."""
import sys

from .cli.main import main

sys.exit(main())
