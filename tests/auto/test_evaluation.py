"""mxnet_amp.auto.evaluation: models judged over evaluation data of any size."""
import math
import os

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto.batches import BatchSource
from mxnet_amp.auto.evaluation import DataJudge, batch_pool, merge_checks
from mxnet_amp.auto.measure import OutputCheck
from mxnet_amp.auto.task_metric import task_metric
from mxnet_amp.auto.workers import InProcess, ModelBlob
from mxnet_amp.errors import ArgumentError


def _blob(key, bias):
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc")
    params = {"fc_weight": mx.nd.array([[1, 0], [0, 1]]), "fc_bias": mx.nd.array(bias)}
    return ModelBlob(key, sym, params, {"data": "float32"})


def _data():
    """Three batches of two rows, with class labels the identity model gets right."""
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(3):
        x = rng.standard_normal((2, 2)).astype(np.float32) * 10
        batches.append((x, np.argmax(x, axis=1).astype(np.float32)))
    return batches


def test_merge_checks_pass_only_when_every_batch_passes():
    """The largest figures are kept, flips and rows summed; no batch at all does not pass."""
    a = OutputCheck("scale", True, 0.5, 0.1, 0.01, 0, 2)
    b = OutputCheck("scale", False, 2.0, 0.3, 0.05, 1, 2)
    merged = merge_checks([a, b])
    assert not merged.passed and merged.tolerance_ratio == 2.0 and merged.top1_flips == 1
    assert merged.top1_rows == 4
    assert not merge_checks([]).passed and merge_checks([]).tolerance_ratio == math.inf


def test_batch_pool_picks_in_process_for_one_worker_and_refuses_zero():
    """One worker runs here; zero workers is an ArgumentError."""
    assert isinstance(batch_pool(1, None), InProcess)
    with pytest.raises(ArgumentError, match="at least 1"):
        batch_pool(0, None)


def test_closeness_is_judged_on_every_stored_batch_and_the_files_go_on_close():
    """The reference outputs are stored per batch; the same model passes, a shifted one
    fails; closing deletes the stored files."""
    judge = DataJudge(BatchSource(_data(), ["data"]), InProcess(), target_dtype="bfloat16",
                      tolerance=0.01, rtol=None, atol=None, quiet=True)
    judge.reference(_blob("fp32", [0, 0]))
    assert judge.stored_files() == 3
    same, _ = judge.judge(_blob("same", [0, 0]))
    shifted, _ = judge.judge(_blob("shifted", [100, 0]))
    assert same.passed and not shifted.passed
    # three passes over six samples: every sample evaluation counted
    assert judge.sample_evaluations == 3 * 6 and len(judge.pass_seconds) == 3
    folder = judge.spill_dir
    judge.close()
    assert judge.stored_files() == 0 and folder is not None


def test_a_metric_scores_the_reference_and_each_model():
    """With a metric, the reference's accuracy is 1.0 and a biased model scores lower;
    nothing is stored on disk."""
    judge = DataJudge(BatchSource(_data(), ["data"]), InProcess(), target_dtype="bfloat16",
                      tolerance=0.01, rtol=None, atol=None, metric=task_metric("acc"), quiet=True)
    judge.reference(_blob("fp32", [0, 0]))
    assert judge.reference_score == 1.0 and judge.stored_files() == 0
    _, score = judge.judge(_blob("biased", [100, 0]))
    assert score < 1.0
    judge.close()


def test_no_more_worker_processes_than_batches_or_cores_and_absurd_counts_refused(monkeypatch):
    """``workers=8`` on two batches runs here or on two processes, never eight (24 s against
    6 s in the newcomer audit); ``workers=1000`` is an ArgumentError naming the cores, before
    any process starts (it spawned until killed)."""
    import mxnet_amp.auto.evaluation as evaluation
    started, real_cores = [], evaluation.usable_cores()
    monkeypatch.setattr(evaluation, "ProcessPool", lambda n: started.append(n) or n)
    monkeypatch.setattr(evaluation, "usable_cores", lambda: 4)
    assert batch_pool(8, None, batches=2) == 2
    assert batch_pool(16, None) == 4                   # batches unknown: the cores bound it
    assert isinstance(batch_pool(8, None, batches=1), InProcess)
    assert batch_pool(None, None, batches=3) == 3
    with pytest.raises(ArgumentError, match=r"workers=1000 on a machine with 4 cores.*at most 4"):
        batch_pool(1000, None)
    assert started == [2, 4, 3]
    assert 1 <= real_cores <= (os.cpu_count() or 1)
