"""gluonnlp 0.10 models (the MXNet 1.x NLP toolkit) convert, both dtypes, both paths
(issue 21, item 16). Skipped without the ``nlp`` extra.

Small configurations of the real model classes (``hparam_allow_override``: 2 layers,
width 64), random weights (no downloads): BERT, RoBERTa and DistilBERT from
``gluonnlp.model.get_model`` and the transformer NMT encoder from
``get_transformer_encoder_decoder`` (what ``transformer_en_de_512`` builds), each
hybridized and run once as users do. Each converts through ``convert_hybrid_block`` and
through an exported checkpoint and ``convert_model``; bfloat16 runs natively where the CPU
can (``hardware.bf16_runs_natively()``), else emulated; float16 is emulated (MXNet runs no
float16 on a CPU). gluonnlp 0.10's pip package has no GPT-2 (it lives in the repository's
``scripts/``), so GPT-2 is not covered.
"""
from __future__ import annotations

import functools

import mxnet as mx
import numpy as np
import pytest

import mxnet_amp as amp
from mxnet_amp.mx.hardware import bf16_runs_natively

from helpers import rel_error, run

nlp = pytest.importorskip("gluonnlp")

SMALL = dict(num_layers=2, units=64, hidden_size=128, num_heads=4, max_length=32, embed_size=64)
DTYPES = ["float16", "bfloat16"]
# max |error| / max |fp32 output| of a 2-layer, width-64 model with random weights
TOLERANCE = {"float16": 0.01, "bfloat16": 0.05}


@functools.lru_cache(maxsize=None)
def _bert_like(name: str):
    """``(block, arguments of a call, the arrays among them)``: gluonnlp's ``name`` model,
    small, run once hybridized (built once: converting does not modify it)."""
    vocab = nlp.vocab.BERTVocab(nlp.data.count_tokens([f"w{i}" for i in range(50)]))
    kwargs = {"bert_12_768_12": dict(use_decoder=False, use_classifier=False),
              "roberta_12_768_12": dict(use_decoder=False), "distilbert_6_768_12": {}}[name]
    mx.random.seed(0)
    net, _ = nlp.model.get_model(name, dataset_name=None, vocab=vocab, pretrained=False,
                                 hparam_allow_override=True, **kwargs, **SMALL)
    net.initialize(mx.init.Normal(0.05))
    net.hybridize()
    rng = np.random.default_rng(0)
    tokens = mx.nd.array(rng.integers(0, 50, (2, 8)))
    valid = mx.nd.array([8, 5])
    inputs = (tokens, mx.nd.zeros((2, 8)), valid) if name == "bert_12_768_12" else (tokens, valid)
    net(*inputs)
    return net, inputs, inputs


@functools.lru_cache(maxsize=None)
def _nmt_encoder():
    from gluonnlp.model.transformer import get_transformer_encoder_decoder
    mx.random.seed(0)
    encoder, _, _ = get_transformer_encoder_decoder(num_layers=2, num_heads=4, units=64,
                                                    hidden_size=128)
    encoder.initialize(mx.init.Normal(0.05))
    encoder.hybridize()
    x = mx.nd.array(np.random.default_rng(0).uniform(-1, 1, (2, 8, 64)))
    valid = mx.nd.array([8, 5])
    encoder(x, None, valid)   # (inputs, states, valid_length), as NMTModel calls it
    return encoder, (x, None, valid), (x, valid)


MODELS = {"bert": lambda: _bert_like("bert_12_768_12"),
          "roberta": lambda: _bert_like("roberta_12_768_12"),
          "distilbert": lambda: _bert_like("distilbert_6_768_12"),
          "nmt_transformer_encoder": _nmt_encoder}


def _arrays(out) -> list:
    out = out if isinstance(out, (list, tuple)) else [out]
    return [o.astype("float32").asnumpy() for o in out if isinstance(o, mx.nd.NDArray)]


def _native(dtype: str) -> bool:
    return dtype == "bfloat16" and bf16_runs_natively()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", sorted(MODELS))
def test_convert_hybrid_block(model, dtype):
    net, call, inputs = MODELS[model]()
    ref = _arrays(net(*call))
    converted = amp.convert_hybrid_block(net, dtype)
    # called with the arrays alone: None / empty-list arguments hold no input
    runner = converted if _native(dtype) else amp.emulate_block(converted)
    got = _arrays(runner(*inputs))
    assert [g.shape for g in got] == [r.shape for r in ref]
    for g, r in zip(got, ref):
        assert rel_error(g, r) < TOLERANCE[dtype]
    low = {p.dtype for p in converted.collect_params().values()}
    assert len(low) == 2   # weights stored low (cast_optional_params), LayerNorm's float32


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", sorted(MODELS))
def test_exported_checkpoint_converts(model, dtype, tmp_path):
    net, call, inputs = MODELS[model]()
    ref = _arrays(net(*call))
    net.export(str(tmp_path / "m"))
    sym, args, auxs = mx.model.load_checkpoint(str(tmp_path / "m"), 0)
    new = amp.convert_model(sym, args, auxs, target_dtype=dtype)
    feed = {f"data{k}": x.asnumpy() for k, x in enumerate(inputs)}
    got = run(*new, feed) if _native(dtype) else run(*amp.emulate_model(*new), feed)
    assert [g.shape for g in got] == [r.shape for r in ref]
    for g, r in zip(got, ref):
        assert rel_error(g, r) < TOLERANCE[dtype]
