"""Issue 32, item 5: the attribution finds culprits of every kind (both planted-culprit
generators of benchmarks/), in at most 2 + k + 1 executions; a failed validation falls back
to the bisection without retries."""
import os
import sys

import math

import mxnet as mx
import numpy as np
import pytest


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))

from planted_culprits import planted  # noqa: E402
from planted_culprits_structured import KINDS, planted_structured  # noqa: E402

from helpers import PLANTED_TOLERANCE, accuracy_culprits, auto_planted  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:type inference leaves")


@pytest.mark.parametrize("generator,shape,n,k", [
    ("structured", "chain", 50, 3), ("structured", "dag", 120, 4),
    ("structured", "chain", 400, 2), ("shifted", "dag", 50, 2)])
def test_planted_cells_exact_validated_within_2_plus_k_plus_1(generator, shape, n, k):
    p = (planted_structured if generator == "structured" else planted)(n, k, shape, seed=n + k)
    assert len(p.culprits) == k
    report = auto_planted(p)
    assert accuracy_culprits(report) == sorted(p.culprits)
    # 2 + k + 1 checks (reference, check, validation, each culprit alone), the attribution's run aside
    assert report.validated and report.executions - 1 <= 2 + k + 1


def test_structured_generator_has_every_kind_and_lookalikes():
    """Four culprit kinds in turn, and harmless look-alikes of each beside them: the
    culprits alone in float32 validate, and none of them is out of float16's range."""
    p = planted_structured(120, 4, "chain", seed=7)
    assert sorted(c.rstrip("0123456789_fc") for c in p.culprits) == sorted(
        {"paired": "pair", "batchnorm": "bn", "dynamic": "dyn", "accumulation": "long"}[k]
        for k in KINDS)
    names = p.sym.get_internals().list_outputs()
    assert sum(n.startswith("pair") and n.endswith("_diff_output") for n in names) > 3
    report = auto_planted(p, excluded_sym_names=list(p.culprits))
    assert report.validated and not report.kept_fp32[len(p.culprits):]


def test_failed_validation_searches_past_the_picks_without_retries(monkeypatch):
    """A wrong ranking (a harmless node first): one validation fails, and the bisection goes
    on in the ranking's order from the pick; no second round of picks, the pick dropped, and
    no more executions than the bisection's bound plus the attribution's two and the
    shrinking's k (docs/emulation_and_auto.md, "Execution bounds")."""
    import mxnet_amp.auto.search as search
    from mxnet_amp.auto.records import NodeError
    p = planted_structured(50, 2, "chain", seed=11)
    real = search.attribute

    def misranked(*args, **kwargs):
        errors = real(*args, **kwargs)
        harmless = next(e for e in errors if e.name not in p.culprits and e.op == "FullyConnected")
        top = NodeError(harmless.name, harmless.op, harmless.local_error,
                        harmless.relative_local_error, 10.0)
        return [top] + [NodeError(e.name, e.op, e.local_error, e.relative_local_error, 1e-6)
                        for e in errors if e.name != harmless.name]

    # the name the search calls (it imports attribute at module level)
    monkeypatch.setattr(search, "attribute", misranked)
    report = auto_planted(p)
    kinds = [s.kind for s in report.steps]
    assert kinds.count("validate") == 1 and "bisect" in kinds
    assert accuracy_culprits(report) == sorted(p.culprits) and report.validated
    alone = auto_planted(p, search="bisection")
    k = len(p.culprits)
    assert report.executions <= 3 + k * (math.ceil(math.log2(report.op_nodes)) + 1) + 2 + k
    assert alone.minimality.startswith("1-minimal") and report.minimality.startswith("1-minimal")
    assert any("bisected in the attribution's order" in n for n in report.notes)
