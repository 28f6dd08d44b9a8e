"""Sweep the gluoncv model zoo: build each model offline, convert it to float16 and to
bfloat16, run it, judge it.

For every name in ``gluoncv.model_zoo.get_model_list()`` (or ``--models``):

1. build it offline (``pretrained=False``, ``pretrained_base=False`` and, for video nets,
   ``use_kinetics_pretrain=False`` where accepted, the classes a ``*_custom`` model needs,
   a segmentation net's crop size set to its input;
   gluoncv's 2D action recognisers, whose zoo functions download their base or trip over
   uninitialised params, from their classes), random He-normal weights; a model that
   cannot be built without downloads is recorded "not buildable offline" with the reason;
2. run it in float32 on a small image-like input (:func:`sample_input`) suited to its
   family (the first of a few sizes that the network accepts);
3. set BatchNorm statistics (``--bn``): ``calibrated`` (default) sets each layer's running
   mean and variance from the activations that reach it on a batch of 4 sample inputs once
   every earlier layer is calibrated, one sequential forward pass
   (:func:`calibrate_batchnorm` for Gluon blocks, :func:`calibrate_graph_batchnorm` on the
   exported graph for BatchNorm ops inside SymbolBlocks, as detector backbones are), so every
   BatchNorm output is normalised as in a trained net; ``identity`` keeps the random-init
   statistics (mean 0, variance 1), under which deep nets reach activations of 1e6..1e15
   (calibrated only where the fp32 model is non-finite so);
4. export it (``HybridBlock.export``, ``mx.model.load_checkpoint``), as a user with a
   checkpoint would, and convert it with :func:`mxnet_amp.convert_model` to each of
   ``--dtypes`` (default float16 and bfloat16);
5. run the converted model with the low precision numerics emulated
   (:mod:`mxnet_amp.emulation`; MXNet runs no float16 on a CPU) and compare with float32;
   bfloat16 also natively where this CPU can (unfused and with oneDNN fusion), recording
   how far the emulation is from the native run with ``rounding='nearest'`` and
   ``'mxnet-cpu'`` (``native_vs_emulated``, ``native_vs_emulated_mxnet_cpu``);
6. run the converted graph with its casts stripped, which must give the float32 outputs
   of the graph it converted (folded, where the default folding folded BatchNorms) to
   float32 roundoff (``structure_err`` <= ``STRUCTURE_TOL``): whatever the precision
   does, the pass must not have lost, rewired or changed an op; folding's own float32
   drift from the unfolded model is recorded (``fold_fp32_err``);
7. convert it with ``mx.contrib.amp.convert_model`` too and run that model emulated the
   same way (``contrib_max_rel_err``), side by side.

A model *passes* in a dtype when it converts, the converted graph runs, the graph without
casts reproduces float32 (step 6), no output is non-finite where float32 is finite, and
every checked float output is within ``--tol`` (default 0.1) of float32, measured as
``max|lp - fp32| / max|fp32|`` per output: the strict tolerance, with no other way to pass.
A failing model also records ``sensitivity_err``: the error of the fp32 model run on input
and weights merely rounded to the dtype, the perturbation any deployment in that dtype
starts from. Random-init nets whose BatchNorm is calibrated are chaotic: centring every
layer's activations removes the common component that keeps an identity-BN net's outputs
stable, and a perturbation then grows layer by layer (measured on resnet50_v1d_0.86 in
bfloat16, i.i.d. noise input: 0.5% after the stem, 7% after stage 2, 50% after the last),
so such a failure
says how sensitive the random net is, not how good the conversion is; ``sensitivity_err``
and mx.contrib.amp's error beside it tell the two apart. The report therefore also judges
every model by the *sensitivity-scaled criterion* (:func:`.render.scaled_pass`): its error
is <= ``--tol`` or <= 2x ``sensitivity_err`` (its own floor), with no output non-finite
where fp32 is finite; mx.contrib.amp's model is judged the same way on the same floor, and
the nets where ours errs more than 1.1x contrib's are listed. A model so chaotic that rounding
only input and weights changes its outputs by half or more is ``inconclusive``. Where a
model fails, :func:`mxnet_amp.auto_convert_model` runs with the same criterion
(``validate=``, emulated, at most ``AUTO_MAX_EXECUTIONS`` executions) and records its
executions and the nodes it keeps in float32.

Degenerate outputs measure nothing and are left out: an fp32 output that vanished (all ~0,
or one constant) or is saturated (>= 90% of its values at its minimum or maximum), see
:func:`degenerate`; a model all of whose checked outputs are degenerate, or whose low
precision outputs equal fp32 exactly although it computes in low precision, is
``degenerate`` and not counted as tested.
Outputs downstream of top-k / NMS / comparisons / box decoding are only checked for
finiteness (random-init scores tie, so rounding picks other boxes, and decoding
exponentiates the regressions); the dense tensors feeding those ops are compared instead.
A model whose fp32 output is already non-finite is recorded ``fp32_nonfinite``.

Each model runs in a process of its own with a per-model timeout; ``--jobs`` of them run
at once, each with ``--threads`` threads (default its share of the cores). Models are run
cheapest first (by a name heuristic) so that a wall-clock budget skips the heaviest ones,
each recorded with the reason; each record notes the load average when it finished.

Usage::

    python tools/zoo_sweep.py --jobs 1 --threads 1 --timeout 400 --budget 4500 \
        --json docs/zoo_sweep.json --md docs/zoo_sweep.md      # the whole zoo, both dtypes
    python tools/zoo_sweep.py --models resnet18_v1 ssd_300_mobilenet0.25_voc   # a subset
    python tools/zoo_sweep.py --dtypes float16 --bn identity --models resnet101_v1
    python tools/zoo_sweep.py --json docs/zoo_sweep.json --resume   # only models not in the JSON
    python tools/zoo_sweep.py --report-from docs/zoo_sweep.json --md docs/zoo_sweep.md
    python tools/zoo_sweep.py --report-from a.json b.json --json all.json --md all.md  # merge sweeps

Modules: :mod:`.models` builds the zoo models offline and calibrates their BatchNorm,
:mod:`.checks` runs graphs and judges outputs, :mod:`.sweep` takes one model through every
dtype, :mod:`.runner` runs one worker process per model (timeouts, budget, resume, the
JSON), :mod:`.render` writes the report, :mod:`.cli` parses the flags; ``tools/zoo_sweep.py``
is the command line entry.
"""
from __future__ import annotations

from .checks import compare, degenerate
from .cli import main
from .common import DTYPES, TOLERANCE
from .models import calibrate_batchnorm, calibrate_graph_batchnorm, cost_rank, family_of, input_shapes
from .render import cause_of, per_dtype, summarize, write_markdown
from .runner import run_sweep
from .sweep import sweep_one

__all__ = ["family_of", "input_shapes", "sweep_one", "run_sweep", "write_markdown",
           "cost_rank", "degenerate", "compare", "calibrate_batchnorm", "calibrate_graph_batchnorm",
           "summarize", "per_dtype", "cause_of", "main",
           "TOLERANCE", "DTYPES"]
