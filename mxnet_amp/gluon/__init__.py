"""Gluon: a ``HybridBlock`` converted (adapter), the ``SymbolBlock`` it becomes (block) and the
symbol and params read out of a block (model). Imports convert and what is below it.

The package's public face is the Gluon part of ``mxnet_amp``'s API, so that
``from mxnet_amp.gluon import convert_hybrid_block`` keeps working; each name's home is the
module it comes from.
"""
from __future__ import annotations

from .adapter import convert_block, convert_hybrid_block, emulate_block
from .model import export_block

__all__ = ["convert_block", "convert_hybrid_block", "emulate_block", "export_block"]
