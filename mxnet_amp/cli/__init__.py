"""The ``mxnet-amp`` command line: argument parsing and commands (main), what a command writes
(output) and the ``demo`` command. Imports anything in the package; nothing imports it but
``__main__``."""
