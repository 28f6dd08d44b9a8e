"""Small models trained here in seconds, for accuracy checks of low precision conversion.

Data: scikit-learn's bundled handwritten digits (1797 8x8 images, no download), split once
with a fixed permutation into 1347 training and 450 test images, and a synthetic sequence
task (:func:`majority`). Every model trains on CPU with fixed seeds (MXNet and numpy) in a
few seconds and reaches 97-100% test accuracy:

* ``cnn`` (digits): three Convolution + BatchNorm + relu blocks, global pooling, a Dense
  classifier;
* ``transformer`` (majority task): a 2-layer pre-norm transformer encoder (LayerNorm,
  single-head attention written with ``batch_dot`` and softmax, a feed-forward block),
  mean-pooled into a Dense classifier. On digits rows it stalls near 95% within seconds of
  training, hence the synthetic task;
* ``lstm`` (digits, the image as a sequence of its 8 rows): a 2-layer LSTM
  (``gluon.rnn.LSTM``, i.e. the fused ``RNN`` op), its last step into a Dense classifier;
* ``overflow``: pixels in raw units (up to 60000: still a float16 value), a first
  Dense layer whose outputs exceed float16's 65504 in float32, BatchNorm renormalising
  them. Float32 is fine; a plain float16 conversion turns that layer's output into inf.

:func:`train` returns a :class:`Trained` record: the exported float32 model
``(sym, arg_params, aux_params)``, the test inputs and labels. The tests
(``tests/stories/test_trained_models.py``) and ``benchmarks/trained_accuracy.py`` share it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

MODELS = ("cnn", "transformer", "lstm", "overflow")
RAW_SCALE = 60000.0   # the overflow model's input units: a white pixel (16 of 16) -> 60000
N_TRAIN = 1347
SEQ_LEN = 16         # the majority task's sequences


@dataclass(frozen=True)
class Trained:
    """A trained float32 model and its test set."""

    name: str
    sym: object            # mx.sym.Symbol, one input 'data', logits (N, 10)
    arg_params: dict
    aux_params: dict
    x_test: np.ndarray     # float32, the model's input layout
    y_test: np.ndarray     # int labels
    train_seconds: float


@lru_cache(maxsize=None)
def digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_test, y_test)``: pixels in [0, 1], shape (N, 8, 8)."""
    from sklearn.datasets import load_digits
    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    order = np.random.RandomState(0).permutation(len(y))
    x, y = x[order], y[order]
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


@lru_cache(maxsize=None)
def majority(n_train: int = 3000, n_test: int = 1000, seed: int = 0):
    """A synthetic sequence task: ``(x_train, y_train, x_test, y_test)``, x (N, 16, 10).

    Each sequence holds 16 noisy one-hot tokens (noise N(0, 0.25) on every feature) over 10
    symbols; its label symbol occurs 5 times, every other symbol at most twice."""
    rng = np.random.RandomState(seed)
    n = n_train + n_test
    y = rng.randint(0, 10, n)
    symbols = np.empty((n, SEQ_LEN), dtype=np.int64)
    for i, label in enumerate(y):
        others = np.repeat(np.delete(np.arange(10), label), 2)
        seq = np.concatenate([[label] * 5, rng.permutation(others)[:SEQ_LEN - 5]])
        symbols[i] = rng.permutation(seq)
    x = (np.eye(10)[symbols] + rng.normal(0, 0.25, (n, SEQ_LEN, 10))).astype(np.float32)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


# ------------------------------------------------------------------------------- models

def _cnn():
    from mxnet.gluon import nn
    net = nn.HybridSequential(prefix="cnn_")
    with net.name_scope():
        for i, channels in enumerate((16, 32, 32)):
            net.add(nn.Conv2D(channels, 3, padding=1, use_bias=False), nn.BatchNorm(),
                    nn.Activation("relu"))
            if i == 1:
                net.add(nn.MaxPool2D(2))   # 8x8 -> 4x4
        net.add(nn.GlobalAvgPool2D(), nn.Dense(10))
    return net


def _attention_layer(prefix: str, dim: int):
    from mxnet.gluon import nn

    class EncoderLayer(nn.HybridBlock):
        """Pre-norm encoder layer: x + attn(LN(x)), then x + ffn(LN(x))."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.ln1 = nn.LayerNorm()
                self.qkv = nn.Dense(3 * dim, flatten=False)
                self.proj = nn.Dense(dim, flatten=False)
                self.ln2 = nn.LayerNorm()
                self.ff1 = nn.Dense(2 * dim, flatten=False, activation="relu")
                self.ff2 = nn.Dense(dim, flatten=False)

        def hybrid_forward(self, F, x):
            qkv = self.qkv(self.ln1(x))
            q = F.slice_axis(qkv, axis=2, begin=0, end=dim)
            k = F.slice_axis(qkv, axis=2, begin=dim, end=2 * dim)
            v = F.slice_axis(qkv, axis=2, begin=2 * dim, end=3 * dim)
            scores = F.batch_dot(q, k, transpose_b=True) / float(np.sqrt(dim))
            x = x + self.proj(F.batch_dot(F.softmax(scores, axis=-1), v))
            return x + self.ff2(self.ff1(self.ln2(x)))

    return EncoderLayer(prefix=prefix)


def _transformer(dim: int = 32):
    from mxnet.gluon import nn

    class Encoder(nn.HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.embed = nn.Dense(dim, flatten=False)
                self.pos = self.params.get("pos", shape=(1, SEQ_LEN, dim), init="normal")
                self.layers = nn.HybridSequential()
                self.layers.add(_attention_layer("layer0_", dim), _attention_layer("layer1_", dim))
                self.ln = nn.LayerNorm()
                self.out = nn.Dense(10)

        def hybrid_forward(self, F, x, pos):
            h = self.layers(F.broadcast_add(self.embed(x), pos))
            return self.out(F.mean(self.ln(h), axis=1))

    return Encoder(prefix="tf_")


def _lstm():
    from mxnet.gluon import nn, rnn

    class Recurrent(nn.HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.lstm = rnn.LSTM(64, num_layers=2, layout="NTC")
                self.out = nn.Dense(10)

        def hybrid_forward(self, F, x):
            h = self.lstm(x)
            return self.out(F.squeeze(F.slice_axis(h, axis=1, begin=-1, end=None), axis=1))

    return Recurrent(prefix="lstm_")


def _overflow():
    import mxnet as mx
    from mxnet.gluon import nn
    net = nn.HybridSequential(prefix="raw_")
    with net.name_scope():
        # weights ~0.3 on inputs of order 1e4: outputs reach ~1e5; BatchNorm rescales
        net.add(nn.Flatten(), nn.Dense(64, use_bias=False, weight_initializer=mx.init.Normal(0.3)),
                nn.BatchNorm(),
                nn.Activation("relu"), nn.Dense(10))
    return net


# name: (builder, input transform, epochs, learning rate)
_SPECS = {
    "cnn": (_cnn, lambda x: x[:, None], 15, 3e-3),
    "transformer": (_transformer, lambda x: x, 8, 1e-2),
    "lstm": (_lstm, lambda x: x, 25, 1e-2),
    "overflow": (_overflow, lambda x: x * RAW_SCALE, 15, 3e-3),
}


def train_inputs(name: str, n: int) -> np.ndarray:
    """The first ``n`` training inputs of model ``name``, in its input layout (a sample
    batch for the automatic mode that is not part of the test set)."""
    x_train = (majority() if name == "transformer" else digits())[0][:n]
    return _SPECS[name][1](x_train).astype(np.float32)


def train(name: str, seed: int = 0, batch_size: int = 64) -> Trained:
    """Train model ``name`` (one of :data:`MODELS`) from scratch; deterministic for a seed."""
    import time
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet_amp.gluon.model import block_model
    build, prepare, epochs, lr = _SPECS[name]
    x_train, y_train, x_test, y_test = majority() if name == "transformer" else digits()
    x_train, x_test = prepare(x_train), prepare(x_test)
    start = time.perf_counter()
    mx.random.seed(seed)
    rng = np.random.RandomState(seed)
    net = build()
    net.initialize(mx.init.Xavier(magnitude=2.0))
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": lr})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for epoch in range(epochs):
        trainer.set_learning_rate(lr * (1 - epoch / epochs))   # linear decay: settles faster
        order = rng.permutation(len(y_train))
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            xb, yb = mx.nd.array(x_train[idx]), mx.nd.array(y_train[idx])
            with autograd.record():
                loss = loss_fn(net(xb), yb)
            loss.backward()
            trainer.step(len(idx))
    mx.nd.waitall()
    seconds = time.perf_counter() - start
    sym, arg_params, aux_params, names = block_model(net, ["data"])
    return Trained(name, sym, arg_params, aux_params, x_test.astype(np.float32), y_test, seconds)


# ------------------------------------------------------------------------------- running

def predict(sym, arg_params, aux_params, x: np.ndarray) -> np.ndarray:
    """Logits of ``sym`` on ``x`` (float32 numpy). Runs through a CachedOp, as Gluon does:
    unfused, so native bfloat16 is not skewed by oneDNN's conv+BN fusion."""
    import mxnet as mx
    values = {**arg_params, **aux_params, "data": mx.nd.array(x)}
    op = mx.nd.CachedOp(sym)
    with mx.autograd.pause(train_mode=False):
        out = op(*[values[n] for n in sym.list_inputs()])
    out = out[0] if isinstance(out, (list, tuple)) else out
    return out.astype("float32").asnumpy()


def converted_logits(model: Trained, target_dtype: str, execution: str, converter=None,
                     **convert_kwargs) -> np.ndarray:
    """Logits of the converted model on the test set, run ``'native'`` or ``'emulated'``.

    ``converter(sym, arg_params, aux_params, target_dtype=..., **convert_kwargs)`` returns
    the converted ``(sym, arg_params, aux_params)``; default :func:`mxnet_amp.convert_model`."""
    from mxnet_amp import convert_model
    convert = converter or convert_model
    sym, args, auxs = convert(model.sym, model.arg_params, model.aux_params,
                              target_dtype=target_dtype, **convert_kwargs)
    return logits_of(sym, args, auxs, model.x_test, execution)


def logits_of(sym, args, auxs, x: np.ndarray, execution: str) -> np.ndarray:
    """Logits of a converted model on ``x``, run ``'native'`` or ``'emulated'``."""
    from mxnet_amp.emulation import emulate_model
    if execution == "emulated":
        sym, args, auxs = emulate_model(sym, args, auxs)
    else:
        # float32 params the conversion passed through are the caller's arrays; oneDNN
        # reorders arrays a float32 run used in place, so bind copies (emulation_and_auto.md)
        args = {k: v.copy() for k, v in args.items()}
        auxs = {k: v.copy() for k, v in auxs.items()}
    return predict(sym, args, auxs, x)


def accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy, in [0, 1]."""
    return float(np.mean(np.argmax(logits, axis=1) == labels))


def flips(logits: np.ndarray, reference: np.ndarray) -> int:
    """Test images whose top-1 class differs from the reference logits' (non-finite rows count)."""
    bad = ~np.isfinite(logits).all(axis=1)
    return int(np.count_nonzero((np.argmax(logits, axis=1) != np.argmax(reference, axis=1)) | bad))
