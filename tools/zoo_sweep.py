"""Command line entry of the gluoncv zoo sweep: ``python tools/zoo_sweep.py --help``.

The sweep itself is the package ``tools/zoo_sweep/`` (its docstring defines every check):
``models`` builds the zoo models offline and calibrates their BatchNorm, ``checks`` runs
graphs and judges outputs, ``sweep`` takes one model through every dtype, ``runner`` runs
one worker process per model, ``render`` writes the report, ``cli`` parses the flags. Run
as a script, this file's folder is first on ``sys.path``, so ``import zoo_sweep`` finds the
package (a package wins over a module of the same name).
"""
import sys

from zoo_sweep.cli import main

if __name__ == "__main__":
    sys.exit(main())
