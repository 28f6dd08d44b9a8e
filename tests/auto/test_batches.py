"""Automatic mode over evaluation data of any size (``auto_convert_model(eval_data=...)``):
DataIters, DataLoaders, generators and .rec files read a batch at a time, MXNet's metrics
updated batch by batch, worker processes and a Dask cluster giving the same decisions."""
import glob
import os
import tempfile
import weakref

import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.auto import auto_convert_model
from mxnet_amp.auto.batches import BatchSource, NpzFolder, RecordBatches
from mxnet_amp.auto.task_metric import task_metric

from auto_models import cancellation_model


def classifier(seed=0, n_in=16, n_hidden=32, n_out=10):
    """A two-layer classifier, its params, and logits = f(x) in numpy."""
    rng = np.random.RandomState(seed)
    d = mx.sym.var("data")
    h = mx.sym.relu(mx.sym.FullyConnected(d, num_hidden=n_hidden, name="fc1"), name="relu1")
    out = mx.sym.FullyConnected(h, num_hidden=n_out, name="fc2")
    w1 = rng.randn(n_hidden, n_in).astype(np.float32) * 0.3
    w2 = rng.randn(n_out, n_hidden).astype(np.float32) * 0.3
    args = {"fc1_weight": mx.nd.array(w1), "fc1_bias": mx.nd.zeros(n_hidden),
            "fc2_weight": mx.nd.array(w2), "fc2_bias": mx.nd.zeros(n_out)}
    return out, args, (lambda x: np.maximum(x @ w1.T, 0) @ w2.T)


def labelled(n=200, seed=1, wrong=0.3):
    """``(x, labels, logits)``: labels are the float32 model's top-1, a share ``wrong`` of them
    changed, so the accuracy over the whole set is not that of any one batch."""
    _, _, f = classifier()
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 16).astype(np.float32)
    logits = f(x)
    y = logits.argmax(1)
    flip = rng.rand(n) < wrong
    y[flip] = (y[flip] + 1) % 10
    return x, y.astype(np.float32), logits


def test_accuracy_over_a_data_iter_is_the_whole_set_s():
    sym, args, _ = classifier()
    x, y, logits = labelled()
    it = mx.io.NDArrayIter(x, y, batch_size=32)      # 7 batches, the last one padded
    _, _, _, report = auto_convert_model(sym, args, {}, eval_data=it, metric=mx.metric.Accuracy(),
                                         max_drop=0.01, workers=1, quiet=True)
    expected = float(np.mean(logits.argmax(1) == y))
    assert report.metric["reference"] == pytest.approx(expected)
    assert report.metric["value"] == pytest.approx(expected)
    assert report.samples == 200 and report.batches == 7 and report.attribution_samples == 8
    assert report.validated and report.kept_fp32 == () and report.executions == 3
    assert [s.kind for s in report.steps] == ["reference", "reference data", "check"]
    assert "judged on 200 samples (7 batches" in report.summary()


def test_top_k_accuracy_by_instance_and_by_name():
    sym, args, _ = classifier()
    x, y, logits = labelled(wrong=0.9)
    top3 = float(np.mean((np.argsort(-logits, 1)[:, :3] == y[:, None]).any(1)))
    loader = [(x[i:i + 50], y[i:i + 50]) for i in range(0, 200, 50)]
    for metric in (mx.metric.TopKAccuracy(top_k=3), mx.metric.create("top_k_accuracy", top_k=3)):
        _, _, _, report = auto_convert_model(sym, args, {}, eval_data=loader, metric=metric,
                                             max_drop=0.01, workers=1, quiet=True)
        assert report.metric["reference"] == pytest.approx(top3)
        assert report.metric["name"] == "top_k_accuracy_3"


def test_a_loss_metric_by_name_counts_lower_as_better():
    sym, args, f = classifier(n_out=1)
    x = np.random.RandomState(0).randn(64, 16).astype(np.float32)
    y = f(x).ravel() + 0.5
    data = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]
    _, _, _, report = auto_convert_model(sym, args, {}, eval_data=data, metric="mse",
                                         max_drop=0.01, workers=1, quiet=True)
    assert report.metric["reference"] == pytest.approx(-0.25, rel=1e-3)   # minus the loss
    assert report.validated


def test_a_gluon_data_loader():
    sym, args, _ = classifier()
    x, y, logits = labelled()
    loader = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(x, y), batch_size=40)
    _, _, _, report = auto_convert_model(sym, args, {}, eval_data=loader, metric="acc",
                                         max_drop=0.01, workers=1, quiet=True)
    assert report.samples == 200 and report.batches == 5
    assert report.metric["reference"] == pytest.approx(float(np.mean(logits.argmax(1) == y)))


def _write_rec(path, count, size=8, seed=0):
    import cv2
    rng = np.random.RandomState(seed)
    rec = mx.recordio.MXIndexedRecordIO(path + ".idx", path, "w")
    for i in range(count):
        img = rng.randint(0, 256, (size, size, 3)).astype(np.uint8)
        rec.write_idx(i, mx.recordio.pack_img(mx.recordio.IRHeader(0, float(i % 3), i, 0), img,
                                              img_fmt=".png"))
    rec.close()


def conv_classifier(seed=0):
    rng = np.random.RandomState(seed)
    d = mx.sym.var("data")
    h = mx.sym.Convolution(d, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    h = mx.sym.Pooling(mx.sym.relu(h), global_pool=True, kernel=(1, 1), pool_type="avg")
    out = mx.sym.FullyConnected(h, num_hidden=3, name="fc")
    args = {"conv_weight": mx.nd.array(rng.randn(4, 3, 3, 3) * 0.01), "conv_bias": mx.nd.zeros(4),
            "fc_weight": mx.nd.array(rng.randn(3, 4)), "fc_bias": mx.nd.zeros(3)}
    return out, args


def test_an_image_record_iter_over_a_rec_file(tmp_path):
    rec = str(tmp_path / "tiny.rec")
    _write_rec(rec, 20)
    it = mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 8, 8), batch_size=5,
                               round_batch=False, preprocess_threads=1)
    sym, args = conv_classifier()
    _, _, _, report = auto_convert_model(sym, args, {}, eval_data=it, metric="acc",
                                         max_drop=0.5, workers=1, quiet=True)
    assert report.samples == 20 and report.batches == 4 and report.validated
    # a last batch the records do not fill: RecordBatches keeps exactly the 20 records
    # (ImageRecordIter itself fills it up and reports no padding)
    source = RecordBatches(rec, (3, 8, 8), 6, preprocess_threads=1)
    got = list(source)
    assert [len(b[0]) for b in got] == [6, 6, 6, 2]
    assert np.concatenate([b[1] for b in got]).tolist() == [float(i % 3) for i in range(20)]
    _, _, _, report = auto_convert_model(sym, args, {}, eval_data=source, metric="acc",
                                         max_drop=0.5, workers=1, quiet=True)
    assert report.samples == 20 and report.batches == 4


def test_a_generator_is_read_once_spilled_and_deleted(tmp_path, monkeypatch):
    """A one-shot iterator is written to a temporary folder as it is read, read back from
    there by the later passes, and nothing of it is left afterwards."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sym, args, _ = classifier()
    x, y, logits = labelled()
    reads = []

    def batches():
        for i in range(0, 200, 25):
            reads.append(i)
            yield x[i:i + 25], y[i:i + 25]
    _, _, _, report = auto_convert_model(sym, args, {}, eval_data=batches(), metric="acc",
                                         max_drop=0.01, workers=1, quiet=True)
    assert reads == list(range(0, 200, 25))                 # the generator ran once
    assert report.samples == 200 and report.executions == 3
    # the float32 pass and the check's, over all 200 (the ranges ran on sample rows)
    assert report.sample_evaluations == 2 * 200 and report.to_dict()["sample_evaluations"] == 400
    assert "400 sample evaluations in all" in report.summary()
    assert report.metric["value"] == pytest.approx(float(np.mean(logits.argmax(1) == y)))
    assert os.listdir(tmp_path) == []                       # spilled batches deleted


def test_closeness_over_the_data_stores_the_reference_on_disk_and_deletes_it(tmp_path, monkeypatch):
    """Without a metric every batch is judged against the float32 outputs, which are written
    to disk (one file per batch and output), not held; deleted at the end."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sym, args, x2 = cancellation_model()
    x = np.random.RandomState(3).uniform(0, 1, (60, 16)).astype(np.float32)
    seen = []
    from mxnet_amp.auto import evaluation
    original = evaluation.DataJudge.judge

    def judge(self, *a, **k):
        seen.append(len(glob.glob(os.path.join(self.spill_dir, "ref-*.npy"))))
        return original(self, *a, **k)
    monkeypatch.setattr(evaluation.DataJudge, "judge", judge)
    _, _, _, report = auto_convert_model(sym, args, {}, eval_data=[x[i:i + 10] for i in range(0, 60, 10)],
                                         workers=1, quiet=True)
    assert [k.name for k in report.kept_fp32] == ["fc_c"] and report.validated
    assert report.criterion == "scale" and report.top1_rows == 60 and report.samples == 60
    assert seen and set(seen) == {6}                        # 6 batches x 1 output on disk
    assert os.listdir(tmp_path) == []


def test_samples_held_are_bounded_by_a_few_batches_not_the_data():
    """However many batches the data has, at most a fixed number of them are alive at once
    (tracked by weak references to the arrays handed out): memory does not grow with N."""
    sym, args, _ = classifier()
    refs = []
    most = []

    class Data:
        def __iter__(self):
            rng = np.random.RandomState(0)      # the same data on every pass
            for _ in range(40):
                most.append(sum(r() is not None for r in refs))
                x = rng.randn(8, 16).astype(np.float32)
                refs.append(weakref.ref(x))
                yield x
    _, _, _, report = auto_convert_model(sym, args, {}, eval_data=Data(), workers=1, quiet=True)
    assert report.samples == 320 and report.batches == 40 and report.validated
    assert max(most) <= 3, max(most)


def test_worker_processes_give_the_decisions_and_figures_of_one():
    sym, args, x2 = cancellation_model()
    x = np.random.RandomState(3).uniform(0, 1, (48, 16)).astype(np.float32)
    data = [x[i:i + 8] for i in range(0, 48, 8)]
    one = auto_convert_model(sym, args, {}, eval_data=data, workers=1, quiet=True)[3]
    two = auto_convert_model(sym, args, {}, eval_data=data, workers=2, quiet=True)[3]
    assert two.workers == 2 and one.workers == 1
    assert two.excluded_sym_names == one.excluded_sym_names == ["fc_c"]
    assert two.relative_error == one.relative_error
    assert [s.to_dict() for s in two.steps] == [s.to_dict() for s in one.steps]


def test_a_dask_cluster_keeps_the_nodes_kept_in_process():
    distributed = pytest.importorskip("distributed")
    sym, args, x2 = cancellation_model()
    x = np.random.RandomState(3).uniform(0, 1, (48, 16)).astype(np.float32)
    data = [x[i:i + 8] for i in range(0, 48, 8)]
    here = auto_convert_model(sym, args, {}, eval_data=data, workers=1, quiet=True)[3]
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        there = auto_convert_model(sym, args, {}, eval_data=data, client=client, quiet=True)[3]
    assert there.workers == 2
    assert there.excluded_sym_names == here.excluded_sym_names == ["fc_c"]
    assert there.relative_error == here.relative_error


def test_npz_folder_batches_are_read_lazily(tmp_path):
    x, y, _ = labelled(n=30)
    for k in range(3):
        np.savez(tmp_path / f"b{k}.npz", data=x[10 * k:10 * k + 10], label=y[10 * k:10 * k + 10])
    source = BatchSource(NpzFolder(tmp_path), ["data"])
    got = list(source)
    assert [b.size for b in got] == [10, 10, 10] and source.samples == 30
    np.testing.assert_array_equal(got[2].labels[0], y[20:])
    sym, args, _ = classifier()
    report = auto_convert_model(sym, args, {}, eval_data=NpzFolder(tmp_path), metric="acc",
                                max_drop=0.01, workers=1, quiet=True)[3]
    assert report.samples == 30


def test_metric_misuse_is_refused_clearly():
    sym, args, _ = classifier()
    x, y, _ = labelled(n=20)
    with pytest.raises(ValueError, match="eval_data"):
        auto_convert_model(sym, args, {}, x, metric=mx.metric.Accuracy(), max_drop=0.01)
    with pytest.raises(ValueError, match="not an MXNet metric name"):
        auto_convert_model(sym, args, {}, eval_data=[(x, y)], metric="no-such-metric", max_drop=0.1)
    with pytest.raises(ValueError, match="callable metric scores one batch"):
        auto_convert_model(sym, args, {}, eval_data=[(x, y)], metric=lambda outs: 1.0, max_drop=0.1)
    with pytest.raises(ValueError, match="metric_inputs"):
        auto_convert_model(sym, args, {}, x, metric_inputs=lambda lab, out: (lab, out))
    assert task_metric(lambda outs: 1.0) is None


def test_a_metric_instance_given_is_never_updated():
    sym, args, _ = classifier()
    x, y, _ = labelled(n=40)
    metric = mx.metric.Accuracy()
    auto_convert_model(sym, args, {}, eval_data=[(x, y)], metric=metric, max_drop=0.01,
                       workers=1, quiet=True)
    assert metric.num_inst == 0


def test_voc07_map_of_a_trained_ssd_through_metric_inputs(tmp_path):
    """gluoncv's VOC07MApMetric takes (boxes, ids, scores, gt boxes, gt ids) where MXNet's
    metrics take (labels, outputs): ``metric_inputs`` maps one to the other. The SSD is
    benchmarks/trained_zoo's ssd_digits on a one-pass recipe (seconds), judged on its whole
    test set: the float32 mAP is the one computed here by the metric itself."""
    pytest.importorskip("gluoncv")
    import zoo_trainers as zt
    from gluoncv.utils.metrics.voc_detection import VOC07MApMetric
    recipe = zt.Recipe("ssd_tiny", "ssd_digits", size=64, copies=1, batch_size=32, task="boxes",
                       kwargs={"size": 64})
    model = zt.train(recipe, str(tmp_path))
    x, labels = model.x_test, model.y_test.astype(np.float32)     # (500, 3, 5): class, box

    def metric_inputs(gt, outputs):
        ids, scores, boxes = outputs
        return boxes, ids, scores, gt[0].slice_axis(axis=-1, begin=1, end=5), \
            gt[0].slice_axis(axis=-1, begin=0, end=1)
    data = [(x[i:i + 100], labels[i:i + 100]) for i in range(0, len(x), 100)]
    expected = VOC07MApMetric(iou_thresh=0.5)
    for xb, yb in data:
        exe = model.sym.bind(mx.cpu(), {**model.arg_params, "data": mx.nd.array(xb)},
                             aux_states=dict(model.aux_params), grad_req="null")
        expected.update(*metric_inputs([mx.nd.array(yb)], exe.forward(is_train=False)))
    _, _, _, report = auto_convert_model(
        model.sym, model.arg_params, model.aux_params, eval_data=data,
        metric=VOC07MApMetric(iou_thresh=0.5), metric_inputs=metric_inputs, max_drop=0.02,
        workers=1, quiet=True)
    assert report.metric["name"] == expected.name and report.samples == len(x) == 500
    assert report.metric["reference"] == pytest.approx(float(np.ravel(expected.get()[1])[-1]), abs=1e-6)
    assert report.metric["reference"] > 0                 # one pass: it detects a little
    assert report.validated and report.metric["drop"] <= 0.02 and report.executions == 3


def test_cli_auto_reads_a_rec_and_a_folder_of_batches(tmp_path, capsys):
    from mxnet_amp.cli.main import main
    from mxnet_amp.mx.io import save_checkpoint
    sym, args = conv_classifier()
    prefix = str(tmp_path / "conv")
    save_checkpoint(prefix, 0, sym, args, {}, progress=None)
    rec = str(tmp_path / "val.rec")
    _write_rec(rec, 20)
    report = str(tmp_path / "auto.json")
    assert main(["auto", prefix, "--eval-data", rec, "--data-shape", "3x8x8", "--batch-size", "6",
                 "--mean-rgb", "127,127,127", "--std-rgb", "64,64,64", "--workers", "1",
                 "--metric", "top1", "--max-drop", "5", "--report", report, "-q"]) == 0
    import json
    auto = json.load(open(report))["extra"]["auto"]
    assert auto["samples"] == 20 and auto["batches"] == 4 and auto["metric"]["name"] == "top1"
    assert 0 <= auto["metric"]["reference"] <= 100                      # in percent
    folder = tmp_path / "batches"
    folder.mkdir()
    x = np.random.RandomState(0).uniform(-1, 1, (12, 3, 8, 8)).astype(np.float32)
    for k in range(3):
        np.savez(folder / f"{k}.npz", data=x[4 * k:4 * k + 4], label=np.arange(4) % 3)
    assert main(["auto", prefix, "--eval-data", str(folder), "--workers", "1", "--metric", "acc",
                 "--max-drop", "0.05", "--report", report, "--out", str(tmp_path / "b"), "-q"]) == 0
    assert json.load(open(report))["extra"]["auto"]["samples"] == 12
    assert main(["auto", prefix, "--eval-data", rec, "--workers", "1"]) == 2
    assert "--data-shape" in capsys.readouterr().err


def test_progress_bars_per_pass_on_a_terminal_only(monkeypatch, capsys):
    """A bar per pass over the data, with its total (samples), its rate and an ETA; never
    into a pipe or a log file (stderr captured here is not a terminal)."""
    import io
    import sys
    sym, args, _ = classifier()
    x, y, _ = labelled()
    it = mx.io.NDArrayIter(x, y, batch_size=50)
    auto_convert_model(sym, args, {}, eval_data=it, metric="acc", max_drop=0.01, workers=1)
    assert "sample" not in capsys.readouterr().err

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    auto_convert_model(sym, args, {}, eval_data=it, metric="acc", max_drop=0.01, workers=1)
    shown = terminal.getvalue()
    assert "auto: float32 reference" in shown and "auto: check" in shown
    assert "/200 " in shown and "sample/s" in shown         # the total known from the start
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    auto_convert_model(sym, args, {}, eval_data=it, metric="acc", max_drop=0.01, workers=1,
                       quiet=True)
    assert "sample" not in terminal.getvalue()


def test_streamed_data_keeps_what_the_in_memory_api_keeps():
    """The same samples streamed (an NDArrayIter, batch by batch) and given whole to the
    in-memory API (one batch of sample_inputs): the same culprit kept, validated both ways."""
    sym, args, _ = cancellation_model()
    x = np.random.RandomState(3).uniform(0, 1, (48, 16)).astype(np.float32)
    whole = auto_convert_model(sym, args, {}, sample_inputs=x, quiet=True)[3]
    streamed = auto_convert_model(sym, args, {}, eval_data=mx.io.NDArrayIter(x, batch_size=8),
                                  attribution_samples=48, workers=1, quiet=True)[3]
    assert streamed.samples == 48 and streamed.batches == 6
    assert whole.excluded_sym_names == streamed.excluded_sym_names == ["fc_c"]
    assert whole.validated and streamed.validated


def _bad_batches(kind):
    """Two or three small batches of ``labelled()`` data, one of them bad as ``kind`` says."""
    x, y, _ = labelled()
    yield x[:4], (y[:4].astype(str) if kind == "text labels" else y[:4])
    if kind == "two shapes":
        yield x[4:8, :8], y[4:8]
    elif kind == "None":
        yield None
    elif kind == "label count":
        yield x[4:8], y[4:7]
    yield x[8:40], y[8:40]


@pytest.mark.parametrize("kind, match", [
    ("two shapes", r"cannot run batch 1 \(data \(4, 8\)\)"),
    ("None", r"batch 1 is None"),
    ("text labels", r"batch 0: label 0 holds <U\d+ values; inputs and labels must be numbers"),
    ("label count", r"batch 1: label 0 has shape \(3,\), expected 4 rows"),
])
def test_bad_eval_data_is_a_typed_error_naming_the_batch_and_leaves_no_folder(
        kind, match, tmp_path, monkeypatch):
    """Batches of two shapes, a None batch, text labels and a wrong label count are each a
    typed error naming the batch (numpy's ValueError, IndexError, KeyError and MXNet's
    ValueError before), and no mxnet-amp-batches-* folder is left (newcomer audit, #42)."""
    from mxnet_amp.errors import AMPError
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sym, args, _ = classifier()
    with pytest.raises(AMPError, match=match):
        auto_convert_model(sym, args, {}, eval_data=_bad_batches(kind), metric="acc",
                           max_drop=0.01, workers=1, quiet=True)
    assert os.listdir(tmp_path) == []


def test_known_batches_counts_what_says_its_size(tmp_path):
    """A list, an NpzFolder, a .rec and one array give their batch count unread; a generator
    and a DataIter do not (the worker count is bounded by it)."""
    from mxnet_amp.auto.batches import known_batches
    x, y, _ = labelled(n=20)
    for k in range(3):
        np.save(tmp_path / f"{k}.npy", x[:4])
    rec = str(tmp_path / "val.rec")
    _write_rec(rec, 20)
    assert known_batches([(x, y)] * 5) == 5 and known_batches(NpzFolder(tmp_path)) == 3
    assert known_batches(RecordBatches(rec, (3, 8, 8), 6)) == 4 and known_batches(x) == 1
    assert known_batches(iter([x])) is None
    assert known_batches(mx.io.NDArrayIter(x, y, batch_size=5)) is None


def test_cli_refuses_an_absurd_worker_count(tmp_path, capsys):
    """``--workers 1000`` is refused naming the flag and the cores, exit 2, nothing spawned."""
    from mxnet_amp.cli.main import main
    from mxnet_amp.mx.io import save_checkpoint
    sym, args, _ = classifier()
    prefix = str(tmp_path / "m")
    save_checkpoint(prefix, 0, sym, args, {}, progress=None)
    folder = tmp_path / "batches"
    folder.mkdir()
    x, _, _ = labelled(n=8)
    np.save(folder / "0.npy", x[:4])
    np.save(folder / "1.npy", x[4:])
    assert main(["auto", prefix, "--eval-data", str(folder), "--workers", "1000", "-q"]) == 2
    assert "--workers 1000: this machine has" in capsys.readouterr().err


def test_a_generator_of_data_batches_is_read_as_a_data_iter_is():
    """A generator yielding ``mx.io.DataBatch`` values (as scripts written for Module do),
    the last one padded: read as the DataIter it came from, its padding rows dropped (an
    IndexError in ``Batch.size`` before)."""
    sym, args, _ = classifier()
    x, y, logits = labelled()

    def data_batches():
        for batch in mx.io.NDArrayIter(x, y, batch_size=32):     # 7 batches, 24 rows padded
            yield mx.io.DataBatch(data=batch.data, label=batch.label, pad=batch.pad)
    report = auto_convert_model(sym, args, {}, eval_data=data_batches(), metric="acc",
                                max_drop=0.01, workers=1, quiet=True)[3]
    assert report.samples == 200 and report.batches == 7
    assert report.metric["reference"] == pytest.approx(float(np.mean(logits.argmax(1) == y)))


def test_eval_source_gives_the_batches_and_the_sample_inputs_ranges_run_on():
    """Without samples of the caller's, the first ``attribution_samples`` samples of the
    data, batches of another shape not joined, with how many those are; with the caller's,
    those (rows None); without data, no source."""
    from mxnet_amp.auto.batches import eval_source
    from mxnet_amp.mx.io import graph_from_symbol
    graph = graph_from_symbol(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc"))
    batches = [(np.full((3, 4), k, "float32"),) for k in range(3)] + [(np.zeros((2, 5), "float32"),)]
    got = eval_source(batches, None, ["data"], graph, attribution_samples=5)
    assert got.rows == 5 and got.source is not None
    assert got.sample_inputs["data"].tolist() == [[0.0] * 4] * 3 + [[1.0] * 4] * 2
    wide = eval_source(batches[:1] + batches[3:], None, ["data"], graph, attribution_samples=8)
    assert wide.rows == 3   # the batch of 5 columns cannot join the first
    mine = {"data": np.ones((1, 4), "float32")}
    given = eval_source(batches, mine, ["data"], graph, attribution_samples=5)
    assert given.sample_inputs is mine and given.rows is None and given.source is not None
    none = eval_source(None, mine, ["data"], graph, attribution_samples=5)
    assert none.source is None and none.sample_inputs is mine and none.rows is None
