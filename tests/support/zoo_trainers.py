"""Model zoo architectures trained here on offline data, for accuracy checks of conversion.

Data: scikit-learn's bundled digits (no download) made harder (:func:`hard_digits`): pixels
dropped, upsampled to ``size`` x ``size``, shifted, noisy, three channels. The same split as
``tests/support/trained_models.py`` (1347 training, 450 test images); the training set is corrupted
``copies`` times with different draws, and training makes one pass over them per epoch: fresh
corruptions rather than repeated epochs, since these nets memorise 1347 digits within a few
passes (100% training, 36% test accuracy for mobilenet1.0 after 8 Adam epochs on 2 copies).

A :class:`Recipe` names a gluon / gluoncv zoo constructor (``pretrained=False``,
``classes=10``) and how it trains; :func:`train` trains it on CPU with fixed seeds, or loads
the checkpoint a previous run left in the cache folder under the recipe's hash
(:func:`recipe_hash`: the recipe, the data version and the trainer version), so reruns reuse
trained weights. The cache lives outside git (default ``~/.cache/mxnet-amp/trained_zoo``).

Shared by ``benchmarks/trained_zoo.py`` and ``tests/stories/test_trained_zoo.py``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

DATA_VERSION = "hard-digits-v1"     # bump when hard_digits changes: cached weights go stale
TRAINER_VERSION = "momentum-warmup-cosine-v2"
BATCH = 150                         # test images per forward
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "mxnet-amp", "trained_zoo")
# a flip counts where its float32 margin exceeds this many times the image's rounding floor
# (:func:`unexplained_flips`). Measured on 12 trained CI nets (cifar_resnet20_v1/v2 at 16x16,
# seeds 0-5), float16 and bfloat16, emulated / native / fused Module: of the 126 images ours
# could flip there (twice its logit error >= the margin) every margin was under 4 floors, while
# bfloat16 weights rounded to 2 mantissa bits flipped on each of the 12 an image 8.5-56 floors wide
MARGIN_FLOORS = 6


@dataclass(frozen=True)
class Recipe:
    """How one architecture is built and trained."""

    name: str                      # a label for the row (the zoo name, maybe with a size)
    model: str                     # the zoo constructor's name (gluoncv.model_zoo.get_model)
    size: int = 32                 # input side
    epochs: int = 1                # passes over all the copies
    lr: float = 0.05               # peak learning rate (after the warmup)
    batch_size: int = 64
    copies: int = 24               # corrupted copies of the training set
    optimizer: str = "sgd"         # "sgd" (momentum 0.9) or "adam"
    wd: float = 1e-4               # weight decay
    warmup: float = 0.05           # share of the steps the rate ramps up linearly over
    seed: int = 0
    kwargs: dict = field(default_factory=dict)   # extra constructor arguments
    global_pool_output: bool = False   # fixed-size final pooling replaced by a global one
    task: str = "digits"           # "digits" (hard_digits), "masks" (digit_masks), "majority"
    #                                or "boxes" (zoo_detection.digit_boxes: copies x 1000 canvases)


def recipe_hash(recipe: Recipe) -> str:
    """A short hash of everything that decides the trained weights."""
    fields = dataclasses.asdict(recipe)
    if fields["task"] == "digits":   # added later: the digits recipes keep their cached hashes
        del fields["task"]
    versions = {"data": DATA_VERSION, "trainer": TRAINER_VERSION}
    if fields.get("task") == "boxes":
        import zoo_detection
        versions["boxes"] = zoo_detection.VERSION
    text = json.dumps({"recipe": fields, **versions}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------- data

def _corrupt(images: np.ndarray, size: int, rng: np.random.RandomState, labels=None):
    """Dropped pixels, bilinear upsampling to ``size``, a shift of up to size/8, noise;
    (N, 8, 8) in [0, 1] -> (N, 3, size, size) standardised. With ``labels``, also each
    image's mask (N, size, size): 1 + its label where the clean digit, upsampled and shifted
    alike, exceeds 0.5, else 0 (background); the same random draws either way."""
    from scipy.ndimage import shift as nd_shift, zoom
    kept = images * (rng.rand(*images.shape) > 0.2)            # 20% of the pixels dropped
    big = zoom(kept, (1, size / 8, size / 8), order=1)
    clean = None if labels is None else zoom(images, (1, size / 8, size / 8), order=1)
    reach = max(1, size // 8)
    out = np.empty((len(images), 3, size, size), np.float32)
    masks = np.zeros((len(images), size, size), np.int64)
    for i, img in enumerate(big):
        dy, dx = rng.randint(-reach, reach + 1, 2)
        moved = nd_shift(img, (dy, dx), order=0, mode="constant")
        out[i] = moved[None] + rng.normal(0, 0.25, (3, size, size))
        if clean is not None:
            masks[i][nd_shift(clean[i], (dy, dx), order=0, mode="constant") > 0.5] = 1 + labels[i]
    x = (out - 0.3) / 0.45
    return x if labels is None else (x, masks)


def _digits_split():
    from sklearn.datasets import load_digits
    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    order = np.random.RandomState(0).permutation(len(y))
    return x[order], y[order]


@lru_cache(maxsize=None)
def hard_digits(size: int = 32, copies: int = 2, seed: int = 0):
    """``(x_train, y_train, x_test, y_test)`` of the harder digits task at ``size``."""
    x, y = _digits_split()
    rng = np.random.RandomState(seed + 1)
    x_test = _corrupt(x[1347:], size, rng)
    x_train = np.concatenate([_corrupt(x[:1347], size, rng) for _ in range(copies)])
    return x_train, np.tile(y[:1347], copies), x_test, y[1347:]


@lru_cache(maxsize=None)
def digit_masks(size: int = 64, copies: int = 2, seed: int = 0):
    """The harder digits as a segmentation task: ``(x_train, masks_train, x_test,
    masks_test)``, masks (N, size, size) of 11 classes (0 background, 1 + the digit)."""
    x, y = _digits_split()
    rng = np.random.RandomState(seed + 1)
    x_test, m_test = _corrupt(x[1347:], size, rng, y[1347:])
    train = [_corrupt(x[:1347], size, rng, y[:1347]) for _ in range(copies)]
    return (np.concatenate([t[0] for t in train]), np.concatenate([t[1] for t in train]),
            x_test, m_test)


def task_data(recipe: Recipe):
    """``(x_train, y_train, x_test, y_test)`` of ``recipe``'s task: the harder digits at its
    size and copies, or ``tests/support/trained_models.py``'s majority task (3000 training and 1000
    test sequences of 16 noisy one-hot tokens over 10 symbols; the label occurs 5 times)."""
    if recipe.task == "majority":
        import trained_models as tm
        return tm.majority()
    if recipe.task == "masks":
        return digit_masks(recipe.size, recipe.copies, recipe.seed)
    if recipe.task == "boxes":
        import zoo_detection
        return zoo_detection.digit_boxes(recipe.size, 1000 * recipe.copies, seed=recipe.seed)
    return hard_digits(recipe.size, recipe.copies, recipe.seed)


# -------------------------------------------------------------------------------- models

def bert_encoder(units: int = 64, layers: int = 2, heads: int = 4):
    """A BERT-style encoder on (N, 16, 10) token features: a Dense token embedding, gluonnlp's
    ``BERTEncoder`` (learned positions, post-norm layers of multi-head self-attention through
    MXNet's interleaved-matmul attention ops, GELU feed-forward, LayerNorm), BERT's tanh pooler
    (over the mean token: the task has no [CLS]) and a Dense classifier."""
    import gluonnlp
    import trained_models as tm
    from mxnet.gluon import nn

    class Bert(nn.HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.embed = nn.Dense(units, flatten=False)
                self.encoder = gluonnlp.model.BERTEncoder(
                    num_layers=layers, units=units, hidden_size=2 * units, max_length=tm.SEQ_LEN,
                    num_heads=heads, dropout=0.0, output_attention=False, output_all_encodings=False)
                self.pooler = nn.Dense(units, activation="tanh")
                self.out = nn.Dense(10)

        def hybrid_forward(self, F, x):
            # the encoder reads (length, batch, units), as gluonnlp's BERTModel feeds it
            seq = self.encoder(F.transpose(self.embed(x), axes=(1, 0, 2)))[0]
            return self.out(self.pooler(F.mean(seq, axis=0)))
    return Bert(prefix="bert_")


def fastscnn(size: int = 64):
    """gluoncv's Fast-SCNN (learning-to-downsample, depthwise global feature extractor with
    pyramid pooling, bilinear upsampling), 11 classes for :func:`digit_masks`, sized for
    ``size`` x ``size`` inputs (its pooling is fixed to the input size), no auxiliary head."""
    from gluoncv.model_zoo.fastscnn import FastSCNN
    return FastSCNN(11, aux=False, height=size, width=size)


def ssd_digits(**kwargs):
    """gluoncv's SSD for the box task (:func:`zoo_detection.ssd_digits`)."""
    import zoo_detection
    return zoo_detection.ssd_digits(**kwargs)


CUSTOM = {"bert_encoder": bert_encoder, "fastscnn": fastscnn,   # beside the zoo's (Recipe.model)
          "ssd_digits": ssd_digits}


def build(recipe: Recipe):
    """The zoo net of ``recipe`` (or one of :data:`CUSTOM`), not initialised."""
    from gluoncv.model_zoo import get_model
    if recipe.model in CUSTOM:
        return CUSTOM[recipe.model](**recipe.kwargs)
    kw = {"pretrained": False, "classes": 10, **recipe.kwargs}
    net = get_model(recipe.model, **kw)
    if recipe.global_pool_output:
        # densenet / squeezenet / googlenet end in a pooling window sized for 224 px inputs
        for part in ("features", "output"):
            seq = getattr(net, part, None)
            if seq is not None:
                setattr(net, part, _global_pooled(seq))
    return net


def _global_pooled(seq):
    """A copy of the HybridSequential ``seq`` with each AvgPool2D of a window >= 7 made
    global (the same blocks, hence the same parameters)."""
    from mxnet.gluon import nn
    blocks = list(seq._children.values())
    if not any(isinstance(b, nn.AvgPool2D) and b._kwargs["kernel"][0] >= 7 for b in blocks):
        return seq
    new = nn.HybridSequential(prefix=seq.prefix)
    for b in blocks:
        big = isinstance(b, nn.AvgPool2D) and b._kwargs["kernel"][0] >= 7
        new.add(nn.GlobalAvgPool2D() if big else b)
    return new


@dataclass(frozen=True)
class TrainedZoo:
    """A trained float32 zoo model and its test set."""

    recipe: Recipe
    sym: object
    arg_params: dict
    aux_params: dict
    x_test: np.ndarray
    y_test: np.ndarray
    train_seconds: float
    cached: bool
    train_accuracy: float


def learning_rate(recipe: Recipe, step: int, total: int) -> float:
    """The rate at ``step`` of ``total``: a linear warmup (the usual guard for nets trained
    from scratch at a high rate), then a cosine decay to 0."""
    warm = max(1, int(recipe.warmup * total))
    if step < warm:
        return recipe.lr * (step + 1) / warm
    return recipe.lr * 0.5 * (1 + np.cos(np.pi * (step - warm) / max(1, total - warm)))


def make_trainer(net, recipe: Recipe):
    """A gluon Trainer with ``recipe``'s optimizer: SGD with momentum 0.9, or Adam."""
    from mxnet import gluon
    opt = {"learning_rate": recipe.lr, "wd": recipe.wd}
    if recipe.optimizer == "sgd":
        opt["momentum"] = 0.9
    return gluon.Trainer(net.collect_params(), recipe.optimizer, opt)


def batch_steps(recipe: Recipe, n: int, trainer):
    """For each training step: ``(indices of its batch, whether it is in the last quarter of
    the steps)``, a fresh permutation of the ``n`` samples each epoch, ``trainer``'s rate set
    (:func:`learning_rate`) before the step."""
    rng = np.random.RandomState(recipe.seed)
    per_epoch = n // recipe.batch_size
    total = recipe.epochs * per_epoch
    step = 0
    for _ in range(recipe.epochs):
        order = rng.permutation(n)
        for i in range(per_epoch):
            trainer.set_learning_rate(learning_rate(recipe, step, total))
            step += 1
            yield order[i * recipe.batch_size:(i + 1) * recipe.batch_size], step > total - max(1, total // 4)


def _fit(net, recipe: Recipe, x_train, y_train) -> float:
    """SGD with momentum (or Adam), warmup and cosine decay, per step; returns the training
    accuracy over the last quarter of the steps."""
    import mxnet as mx
    from mxnet import autograd, gluon
    trainer = make_trainer(net, recipe)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss(axis=1)   # (N, C) logits or (N, C, H, W) masks
    correct = seen = 0
    for idx, counted in batch_steps(recipe, len(y_train), trainer):
        xb, yb = mx.nd.array(x_train[idx]), mx.nd.array(y_train[idx])
        with autograd.record():
            out = net(xb)
            out = out[0] if isinstance(out, (list, tuple)) else out   # a segmentation net's list
            loss = loss_fn(out, yb)
        loss.backward()
        trainer.step(len(idx))
        if counted:
            correct += int((out.argmax(axis=1).asnumpy() == y_train[idx]).sum())
            seen += y_train[idx].size
    return correct / max(1, seen)


def train(recipe: Recipe, cache_dir: str | None = None, retrain: bool = False) -> TrainedZoo:
    """Train ``recipe`` (or load it from ``cache_dir``/<hash>/, where it is then saved)."""
    import mxnet as mx
    from mxnet_amp.gluon.model import block_model
    x_train, y_train, x_test, y_test = task_data(recipe)
    folder = os.path.join(cache_dir or DEFAULT_CACHE, recipe_hash(recipe))
    prefix = os.path.join(folder, "model")
    meta_file = os.path.join(folder, "meta.json")
    if not retrain and os.path.exists(meta_file):
        with open(meta_file) as f:
            meta = json.load(f)
        sym, args, auxs = mx.model.load_checkpoint(prefix, 0)
        return TrainedZoo(recipe, sym, args, auxs, x_test, y_test, meta["train_seconds"], True,
                          meta["train_accuracy"])
    mx.random.seed(recipe.seed)
    net = build(recipe)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    net.hybridize()
    start = time.perf_counter()
    if recipe.task == "boxes":
        import zoo_detection
        train_acc = zoo_detection.fit(net, recipe, x_train, y_train)
    else:
        train_acc = _fit(net, recipe, x_train, y_train)
    mx.nd.waitall()
    seconds = time.perf_counter() - start
    sym, args, auxs, _ = block_model(net, ["data"])
    os.makedirs(folder, exist_ok=True)
    mx.model.save_checkpoint(prefix, 0, sym, args, auxs)
    with open(meta_file + ".tmp", "w") as f:
        json.dump({"recipe": dataclasses.asdict(recipe), "data": DATA_VERSION,
                   "trainer": TRAINER_VERSION, "train_seconds": seconds,
                   "train_accuracy": train_acc}, f, indent=1)
    os.replace(meta_file + ".tmp", meta_file)      # the meta file marks a complete entry
    # the model as saved, as a cached run loads it: saving strips amp casts (gluoncv's
    # amp_multicast before box_decode), and contrib converts the two graphs differently
    sym, args, auxs = mx.model.load_checkpoint(prefix, 0)
    return TrainedZoo(recipe, sym, args, auxs, x_test, y_test, seconds, False, train_acc)


# ------------------------------------------------------------------------------- running

def batches(run, x: np.ndarray):
    """``run`` over ``x`` in batches of :data:`BATCH`, the outputs concatenated (where
    ``run`` returns a list, a list of each output concatenated)."""
    got = [run(x[i:i + BATCH]) for i in range(0, len(x), BATCH)]
    if isinstance(got[0], list):
        return [np.concatenate(parts) for parts in zip(*got)]
    return np.concatenate(got)


def module_logits(sym, args, auxs, x: np.ndarray, every_output: bool = False):
    """Logits through ``mx.mod.Module`` bound for inference (oneDNN subgraph fusion on, as
    MXNet does by default); with ``every_output``, a list of all the outputs (a detector's)."""
    import mxnet as mx
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", (BATCH,) + x.shape[1:])], for_training=False, grad_req="null")
    mod.set_params({k: v.copy() for k, v in args.items()}, {k: v.copy() for k, v in auxs.items()})

    def run(xb):
        n = len(xb)
        if n < BATCH:   # the module is bound for BATCH images: pad the last batch
            xb = np.concatenate([xb, np.zeros((BATCH - n,) + xb.shape[1:], xb.dtype)])
        mod.forward(mx.io.DataBatch([mx.nd.array(xb)]), is_train=False)
        outs = [o.astype("float32").asnumpy()[:n] for o in mod.get_outputs()]
        return outs if every_output else outs[0]
    return batches(run, x)


def symbolblock_logits(sym, args, auxs, x: np.ndarray, folder: str, every_output: bool = False):
    """Logits through ``SymbolBlock.imports`` of the model saved with its casts (in
    ``folder``), hybridized; with ``every_output``, a list of all the outputs."""
    import mxnet as mx
    from mxnet_amp.mx.io import save_checkpoint
    prefix = os.path.join(folder, "deploy")
    save_checkpoint(prefix, 0, sym, args, auxs)   # with its casts, as a converted model is saved
    net = mx.gluon.SymbolBlock.imports(prefix + "-symbol.json", ["data"], prefix + "-0000.params")
    net.hybridize(static_alloc=True, static_shape=True)

    def run(xb):
        out = net(mx.nd.array(xb))
        outs = [o.astype("float32").asnumpy() for o in (out if isinstance(out, (list, tuple)) else [out])]
        return outs if every_output else outs[0]
    return batches(run, x)


# ------------------------------------------------------------------------------ judging

def rows(logits: np.ndarray) -> np.ndarray:
    """Logits as (predictions, classes): a segmentation net's (N, C, H, W) as one row per pixel."""
    if logits.ndim == 2:
        return logits
    return np.moveaxis(logits, 1, -1).reshape(-1, logits.shape[1])


def margins(logits: np.ndarray) -> np.ndarray:
    """Per row: the top logit minus the runner-up (how far rounding must move it to flip)."""
    top = np.sort(logits, axis=1)
    return top[:, -1] - top[:, -2]


def rounding_floor(model: TrainedZoo, dtype: str, judged=None) -> np.ndarray:
    """Per test image (pixel, for a segmentation net), the largest logit change of the float32 model run on its input and
    parameters merely rounded to ``dtype``: the image's rounding floor, what any conversion to
    ``dtype`` costs at least (the zoo sweep's criterion scales by the same floor).
    ``judged(sym, args, auxs, x)``: the rows judged (default: :func:`rows` of the logits; a
    detector's, one per object: ``zoo_detection.BoxJudge.judged``)."""
    import mxnet as mx
    import trained_models as tm
    from mxnet_amp.emulation import round_numpy
    judged = judged or (lambda *a: rows(tm.predict(*a)))

    def rounded(params):
        return {k: mx.nd.array(round_numpy(v.asnumpy(), dtype)) for k, v in params.items()}
    ref = judged(model.sym, model.arg_params, model.aux_params, model.x_test)
    low = judged(model.sym, rounded(model.arg_params), rounded(model.aux_params),
                 round_numpy(model.x_test, dtype))
    return np.abs(low - ref).max(axis=1)


def unexplained_flips(logits: np.ndarray, contrib: np.ndarray, ref: np.ndarray,
                      floor: np.ndarray) -> np.ndarray:
    """Test images whose prediction ``logits`` flip (against the float32 ``ref``) where
    ``contrib``'s logits keep it, and whose float32 margin is wider than
    ``MARGIN_FLOORS * floor`` (``floor``: :func:`rounding_floor`, per image). A non-finite row
    of ``logits`` always counts.

    A near tie flips or not by chance in either conversion (a trained net has a few margins
    under 0.01 logit among 450 images; bfloat16 moves logits by ~0.05), so comparing flip
    counts per model is a coin toss; this compares image by image and leaves out the ties."""
    top = np.argmax(ref, axis=1)
    flipped = np.argmax(logits, axis=1) != top
    kept = np.argmax(contrib, axis=1) == top
    wide = margins(ref) > MARGIN_FLOORS * np.asarray(floor)
    bad = ~np.isfinite(logits).all(axis=1)
    return np.flatnonzero((flipped & kept & wide) | bad)
