"""A small detector trained here on a synthetic box task, and how its conversion is judged.

Data (:func:`digit_boxes`): 1-3 of scikit-learn's digits, each made harder as in
``zoo_trainers`` (20% of its pixels dropped, upsampled bilinearly) and pasted at a random
position and scale (:data:`SCALES`, no two overlapping) on a noisy ``size`` x ``size`` canvas; the
class is the digit, the box the square it was pasted into. Training canvases draw from the
1347 training digits, test canvases from the 450 test digits; deterministic by seed.

Model (:func:`ssd_digits`): gluoncv's ``SSD`` on a random-init mobilenet base (0.25 by default;
the benchmark's row, ``benchmarks/trained_zoo.py``, uses mobilenet0.5),
features at strides 8 and 16 plus one appended layer (stride 32), 2 square anchors a location
(168 at 64x64), 10 classes; trained (:func:`fit`) with gluoncv's ``SSDTargetGenerator`` and
``SSDMultiBoxLoss`` (hard negatives 3:1).

Judging: an object is *hit* when a detection of its class with score >= :data:`SCORE_THRESH`
overlaps its box with IoU >= :data:`IOU_THRESH`; :func:`object_margins` gives per object the
signed distance of that decision, ``max over its class's detections of min(score - 0.5,
IoU - 0.5)`` (>= 0: hit), so the classifiers' per-image rule (``zoo_trainers.unexplained_flips``
on rows ``[margin, 0]``) judges objects, against a rounding floor per object
(:meth:`BoxJudge.floor`). The pre-NMS tensors (the foreground probabilities before the score
threshold, the box regressions and anchors before ``box_decode``) are found as the zoo sweep
finds them (``tools/zoo_sweep/checks.py`` ``checked_entries``) and judged by
:func:`pre_nms_errors`.
"""
from __future__ import annotations

import numpy as np

VERSION = "digit-boxes-v2/ssd-fit-v2"   # part of the recipe hash: bump when data or fit change
MAX_OBJECTS = 3
SCALES = (14, 22)       # the pasted digits' sides in pixels, both ends included
SCORE_THRESH = 0.5
IOU_THRESH = 0.5
ANCHOR_THRESH = 0.5     # pre-NMS flips: over anchors whose fp32 top class is this likely


# ---------------------------------------------------------------------------------- data

def _paste_positions(scales, size: int, rng) -> list:
    """Top-left corners for squares of ``scales`` on the canvas, no two overlapping
    (rejection sampling; a square that finds no place after 50 tries is left out: None)."""
    placed, out = [], []
    for s in scales:
        spot = None
        for _ in range(50):
            y, x = rng.randint(0, size - s + 1, 2)
            if all(y + s <= py or py + ps <= y or x + s <= px or px + ps <= x for py, px, ps in placed):
                spot = (y, x)
                break
        if spot is not None:
            placed.append((*spot, s))
        out.append(spot)
    return out


def _canvas(digits, size: int, rng, noise: float):
    """One canvas: ``digits`` (k, 8, 8) in [0, 1], dropped, scaled and pasted; its image
    (3, size, size) with Gaussian ``noise``, standardised, and the pasted squares as (k', 4)
    pixel corners, with the indices of the digits placed."""
    from scipy.ndimage import zoom
    img = np.zeros((size, size), np.float32)
    scales = rng.randint(SCALES[0], SCALES[1] + 1, len(digits))
    boxes, kept = [], []
    for i, (d, s, spot) in enumerate(zip(digits, scales, _paste_positions(scales, size, rng))):
        if spot is None:
            continue
        kept_px = d * (rng.rand(8, 8) > 0.2)
        big = np.clip(zoom(kept_px, s / 8, order=1), 0, 1)[:s, :s]
        y, x = spot
        img[y:y + s, x:x + s] = np.maximum(img[y:y + s, x:x + s], big)
        boxes.append((x, y, x + s, y + s))
        kept.append(i)
    out = img[None] + noise * rng.normal(0, 1, (3, size, size))
    return ((out - 0.3) / 0.45).astype(np.float32), np.array(boxes, np.float32).reshape(-1, 4), kept


def _canvases(x, y, n: int, size: int, rng, noise: float):
    images = np.empty((n, 3, size, size), np.float32)
    labels = np.full((n, MAX_OBJECTS, 5), -1, np.float32)   # [class, x0, y0, x1, y1], -1 padded
    for i in range(n):
        pick = rng.randint(0, len(y), rng.randint(1, MAX_OBJECTS + 1))
        images[i], boxes, kept = _canvas(x[pick], size, rng, noise)
        labels[i, :len(kept), 0] = y[pick][kept]
        labels[i, :len(kept), 1:] = boxes
    return images, labels


def digit_boxes(size: int = 64, n_train: int = 3000, n_test: int = 500, seed: int = 0,
                noise: float = 0.25):
    """``(x_train, labels_train, x_test, labels_test)``: canvases (N, 3, size, size) and
    labels (N, 3, 5) = [class, x0, y0, x1, y1] in pixels, rows of -1 where fewer objects.
    ``noise``: the canvas noise's sigma (0: the digits alone, on the same draws)."""
    from zoo_trainers import _digits_split
    x, y = _digits_split()
    rng = np.random.RandomState(seed + 7)
    test = _canvases(x[1347:], y[1347:], n_test, size, rng, noise)
    train = _canvases(x[:1347], y[:1347], n_train, size, rng, noise)
    return train[0], train[1], test[0], test[1]


# -------------------------------------------------------------------------------- model

def ssd_digits(size: int = 64, base: str = "mobilenet0.25"):
    """gluoncv's SSD on a random-init ``base`` (features at strides 8 and 16 and one appended
    128-channel layer), 2 square anchors a location, 10 classes, for ``size`` inputs."""
    from gluoncv.model_zoo.ssd import SSD
    # square anchors (the boxes are square) of 14 and 19 px at stride 8, where every digit
    # size finds one within IoU 0.5 wherever it lies; 26-48 px at strides 16 and 32
    net = SSD(base, size, features=["relu10_fwd", "relu22_fwd"], num_filters=[128],
              sizes=[14, 26, 36, 48], ratios=[[1]] * 3, steps=[8, 16, 32],
              classes=[str(i) for i in range(10)], pretrained=False, nms_thresh=0.45,
              nms_topk=100, post_nms=20, anchor_alloc_size=size // 8)
    # the appended layers' vectors have no initializer of their own: the trainer's Xavier
    # (zoo_trainers.train) would refuse them
    for name, p in net.collect_params().items():
        if p.init is None and name.endswith(("gamma", "running_var", "moving_var")):
            p.init = "ones"
        elif p.init is None and name.endswith(("beta", "bias", "running_mean", "moving_mean")):
            p.init = "zeros"
    return net


def targets(net, x_shape, labels: np.ndarray):
    """gluoncv's SSD training targets for each image: ``(cls_targets (N, A), box_targets
    (N, A, 4))``; the anchors come from the net in training mode."""
    import mxnet as mx
    from mxnet import autograd
    from gluoncv.model_zoo.ssd.target import SSDTargetGenerator
    with autograd.train_mode():
        _, _, anchors = net(mx.nd.zeros((1,) + tuple(x_shape)))
    gen = SSDTargetGenerator(iou_thresh=0.5, stds=(0.1, 0.1, 0.2, 0.2), negative_mining_ratio=-1)
    cls_t, box_t = [], []
    for lab in labels:
        obj = lab[lab[:, 0] >= 0]
        c, b, _ = gen(anchors, None, mx.nd.array(obj[None, :, 1:]), mx.nd.array(obj[None, :, :1]))
        cls_t.append(c.asnumpy()[0])
        box_t.append(b.asnumpy()[0])
    return np.stack(cls_t), np.stack(box_t)


def fit(net, recipe, x_train, labels) -> float:
    """``recipe``'s optimizer and schedule (``zoo_trainers.learning_rate``) on the SSD loss;
    returns the class accuracy over the positive anchors in the last quarter of the steps."""
    import mxnet as mx
    from mxnet import autograd
    from gluoncv.loss import SSDMultiBoxLoss
    from zoo_trainers import batch_steps, make_trainer
    cls_t, box_t = targets(net, x_train.shape[1:], labels)
    trainer = make_trainer(net, recipe)
    loss_fn = SSDMultiBoxLoss()
    correct = seen = 0
    for idx, counted in batch_steps(recipe, len(x_train), trainer):
        with autograd.record():
            cls_p, box_p, _ = net(mx.nd.array(x_train[idx]))
            loss, _, _ = loss_fn(cls_p, box_p, mx.nd.array(cls_t[idx]), mx.nd.array(box_t[idx]))
        autograd.backward(loss)
        trainer.step(1)   # SSDMultiBoxLoss is already normalised by the positive anchors
        if counted:
            pos = cls_t[idx] > 0
            correct += int((cls_p.argmax(axis=-1).asnumpy()[pos] == cls_t[idx][pos]).sum())
            seen += int(pos.sum())
    # the graph hybridize traced under autograd.record is SSD's training graph (class and
    # box predictions, anchors): trace it again for inference (detections after NMS)
    net.hybridize()
    net(mx.nd.array(x_train[:1]))
    return correct / max(1, seen)


# ------------------------------------------------------------------------------- running

def _checks():
    """The zoo sweep's graph checks (tools/zoo_sweep/checks.py), loaded as the tests load it."""
    from helpers import load_tool
    load_tool("zoo_sweep")
    from zoo_sweep import checks
    return checks


def pre_nms_entries(sym) -> list:
    """The tensors the zoo sweep judges before a detector's first boundary op (box decoding,
    score thresholds, NMS), as ``(node name, occurrence, output)``: here the class
    probabilities (N, anchors, 11) and the box regressions (N, anchors, 4)."""
    from mxnet_amp.ir.graph import ANY_CAST_OPS
    from mxnet_amp.mx.io import graph_from_symbol
    checks = _checks()
    g = graph_from_symbol(sym)
    _, _, extra = checks.checked_entries(g)
    where = {i: key for key, i in checks._named(g).items()}
    out = []
    for e in extra:
        # gluoncv's box decoder reads through an amp_multicast, which a saved checkpoint
        # no longer holds (MXNet strips amp casts on save): name the tensor it casts
        while g.nodes[e.node].op in ANY_CAST_OPS:
            e = g.nodes[e.node].inputs[e.output if g.nodes[e.node].op == "amp_multicast" else 0]
        out.append((*where[e.node], e.output))
    return out


def probe(sym, entries):
    """``sym`` with ``entries`` (:func:`pre_nms_entries`) as extra outputs, as the sweep's
    ``_Model.probe`` (an emulated graph's low precision entries read rounded)."""
    return _checks()._with_heads(sym, entries)


# ------------------------------------------------------------------------------ judging

def iou(boxes: np.ndarray, box: np.ndarray) -> np.ndarray:
    """IoU of each of ``boxes`` (K, 4) with ``box`` (4,), corners in pixels."""
    w = np.clip(np.minimum(boxes[:, 2], box[2]) - np.maximum(boxes[:, 0], box[0]), 0, None)
    h = np.clip(np.minimum(boxes[:, 3], box[3]) - np.maximum(boxes[:, 1], box[1]), 0, None)
    def area(b):
        return np.clip(b[..., 2] - b[..., 0], 0, None) * np.clip(b[..., 3] - b[..., 1], 0, None)
    union = area(boxes) + area(box) - w * h
    return np.where(union > 0, w * h / np.where(union > 0, union, 1), 0.0)


def object_margins(ids: np.ndarray, scores: np.ndarray, boxes: np.ndarray,
                   labels: np.ndarray) -> np.ndarray:
    """Per ground-truth object (images in order, their objects in order), the signed margin
    of its hit: ``max over the detections of its class of min(score - SCORE_THRESH, IoU -
    IOU_THRESH)``; >= 0 where the object is hit, -1 where no detection has its class, NaN
    where its image's detections are not finite. ``ids``, ``scores`` (N, D, 1) and
    ``boxes`` (N, D, 4) are the SSD's outputs after NMS (id -1: no detection)."""
    out = []
    for i, lab in enumerate(labels):
        valid = ids[i, :, 0] >= 0
        finite = np.isfinite(scores[i][valid]).all() and np.isfinite(boxes[i][valid]).all()
        for obj in lab[lab[:, 0] >= 0]:
            mine = valid & (np.round(ids[i, :, 0]) == obj[0])
            if not finite:
                out.append(np.nan)
            elif not mine.any():
                out.append(-1.0)
            else:
                q = np.minimum(scores[i, mine, 0] - SCORE_THRESH, iou(boxes[i, mine], obj[1:]) - IOU_THRESH)
                out.append(float(q.max()))
    return np.array(out, np.float64)


def object_images(labels: np.ndarray) -> np.ndarray:
    """The image of each object, in :func:`object_margins`' order."""
    return np.repeat(np.arange(len(labels)), (labels[:, :, 0] >= 0).sum(axis=1))


def judged_rows(margins: np.ndarray) -> np.ndarray:
    """Objects as two-class rows ``[margin, 0]``: argmax 0 is a hit, and
    ``zoo_trainers.margins`` / ``unexplained_flips`` judge them as they judge a classifier's
    images (a flip: an object changing hit / miss; a NaN margin: non-finite)."""
    return np.stack([margins, np.zeros_like(margins)], axis=1)


def hit_rate(margins: np.ndarray) -> float:
    """Share of the objects hit (a non-finite margin is a miss)."""
    return float(np.mean(np.nan_to_num(margins, nan=-1.0) >= 0))


def false_positives(ids: np.ndarray, scores: np.ndarray, boxes: np.ndarray,
                    labels: np.ndarray) -> int:
    """Detections with score >= SCORE_THRESH that overlap no object of their class with IoU
    >= IOU_THRESH."""
    n = 0
    for i, lab in enumerate(labels):
        objs = lab[lab[:, 0] >= 0]
        for d in np.flatnonzero((ids[i, :, 0] >= 0) & (scores[i, :, 0] >= SCORE_THRESH)):
            same = objs[np.round(objs[:, 0]) == np.round(ids[i, d, 0])]
            n += not (len(same) and (iou(same[:, 1:], boxes[i, d]) >= IOU_THRESH).any())
    return n


def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    """``max|got - ref| / max|ref|``; inf where ``got`` is not finite."""
    if not np.isfinite(got).all():
        return float("inf")
    return float(np.abs(got - ref).max() / max(float(np.abs(ref).max()), 1e-30))


def pre_nms_errors(got: list, ref: list) -> dict:
    """The pre-NMS tensors (``[foreground probabilities (N, A, 10), box regressions (N, A, 4),
    anchors]``, :func:`pre_nms_entries`' order) against float32: the relative error of each,
    the non-finite anchors, and ``anchor_flips``: anchors whose fp32 top class is at least
    :data:`ANCHOR_THRESH` likely and whose top class changes (of ``confident_anchors``)."""
    probs, ref_probs = got[0], ref[0]
    confident = ref_probs.max(axis=-1) >= ANCHOR_THRESH
    flipped = confident & (probs.argmax(axis=-1) != ref_probs.argmax(axis=-1))
    bad = ~np.isfinite(probs).all(axis=-1) | ~np.isfinite(got[1]).all(axis=-1)
    return {"score_error": rel_error(probs, ref_probs), "box_error": rel_error(got[1], ref[1]),
            "anchor_error": rel_error(got[2], ref[2]), "anchor_flips": int(flipped.sum()),
            "confident_anchors": int(confident.sum()), "nonfinite_anchors": int(bad.sum())}


def measure(outs: list, ref: list, labels: np.ndarray) -> dict:
    """A converted detector's outputs ``[ids, scores, boxes, *pre-NMS tensors]`` against the
    float32 model's: the benchmark's row fields (``accuracy``: the hit rate; ``flips``:
    objects that change hit / miss; ``rel_error``: over the pre-NMS tensors; ``nonfinite``:
    objects in images with non-finite detections, or over non-finite anchors) and the
    pre-NMS figures beside them."""
    m, m_ref = object_margins(*outs[:3], labels), object_margins(*ref[:3], labels)
    pre = pre_nms_errors(outs[3:], ref[3:])
    flips = int(((np.nan_to_num(m, nan=-1.0) >= 0) != (m_ref >= 0)).sum())
    return {"accuracy": hit_rate(m), "flips": flips,
            "rel_error": max(pre["score_error"], pre["box_error"], pre["anchor_error"]),
            "nonfinite": int(np.isnan(m).sum()) + pre["nonfinite_anchors"],
            "false_positives": false_positives(*outs[:3], labels), "pre_nms": pre}


class BoxJudge:
    """How ``benchmarks/trained_zoo.py`` runs and judges the trained detector ``model``
    (a ``zoo_trainers.TrainedZoo`` whose ``y_test`` are :func:`digit_boxes` labels): every
    run reads the detections and the pre-NMS tensors (:func:`probe`)."""

    def __init__(self, model):
        self.model = model
        self.entries = pre_nms_entries(model.sym)

    def run(self, path: str, sym, args, auxs, folder: str | None = None, x=None) -> list:
        """``[ids, scores, boxes, *pre-NMS tensors]`` on ``path``: ``'fp32'`` (unfused, the
        graph as it is), ``'emulated'``, ``'module'`` (fused) or ``'symbolblock'``."""
        import mxnet as mx
        import zoo_trainers as zt
        x = self.model.x_test if x is None else x
        if path == "emulated":
            from mxnet_amp.emulation import emulate_model
            sym, args, auxs = emulate_model(sym, args, auxs)
        probed = probe(sym, self.entries)
        if path == "module":
            return zt.module_logits(probed, args, auxs, x, every_output=True)
        if path == "symbolblock":
            return zt.symbolblock_logits(probed, args, auxs, x, folder, every_output=True)
        checks = _checks()
        # copies: oneDNN reorders in place the float32 arrays a run binds (trained_models.logits_of)
        args, auxs = checks._copies(args), checks._copies(auxs)
        return zt.batches(lambda xb: checks._bind_forward(probed, args, auxs, {"data": mx.nd.array(xb)}), x)

    def reference(self) -> list:
        return self.run("fp32", self.model.sym, self.model.arg_params, self.model.aux_params)

    def measure(self, outs: list, ref: list) -> dict:
        return measure(outs, ref, self.model.y_test)

    def rows(self, outs: list) -> np.ndarray:
        """The judged rows: one ``[margin, 0]`` per object (:func:`judged_rows`)."""
        return judged_rows(object_margins(*outs[:3], self.model.y_test))

    def floor(self, dtype: str) -> np.ndarray:
        """Per object, how far rounding moves it: running the float32 detector on input and
        parameters merely rounded to ``dtype`` (``zoo_trainers.rounding_floor``), the larger
        of its margin's change and the largest change of any foreground probability of its
        image before NMS. The image's probabilities, as a classifier's floor takes the
        largest change of any logit of the image: an object's margin alone is one number,
        which rounding may leave by chance (measured: 2e-5 on an object whose detection score
        bfloat16 moves by 0.007-0.015 either way)."""
        import zoo_trainers as zt

        def judged(sym, a, b, x):
            outs = self.run("fp32", sym, a, b, x=x)
            probs = outs[3].reshape(len(outs[3]), -1)[object_images(self.model.y_test)]
            return np.concatenate([self.rows(outs)[:, :1], probs], axis=1)
        return zt.rounding_floor(self.model, dtype, judged)

    def fp32_accuracy(self, ref: list) -> float:
        return hit_rate(object_margins(*ref[:3], self.model.y_test))
