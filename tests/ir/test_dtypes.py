"""mxnet_amp.ir.dtypes: dtype names, MXNet type codes and array dtypes (bfloat16 included)."""
import mxnet as mx
import numpy as np
import pytest

from mxnet_amp.ir.dtypes import (array_dtype, array_nbytes, bfloat16_np, dtype_name, dtype_of_code,
                                 is_float, np_dtype, widest)


def test_dtype_name_accepts_names_aliases_codes_and_numpy_types():
    """Aliases, MXNet type codes, numpy types and MXNet's bf16 stand-in all give plain names."""
    assert dtype_name("fp16") == "float16"
    assert dtype_name(" BF16 ") == "bfloat16"
    assert dtype_name(np.float32) == "float32"
    assert dtype_name(bfloat16_np) == "bfloat16"
    assert dtype_name(0) == "float32"   # MXNet's type code 0


def test_dtype_name_rejects_what_is_not_an_mxnet_dtype():
    """A non-dtype and a numpy dtype MXNet has no code for are ValueErrors."""
    with pytest.raises(ValueError, match="not a dtype"):
        dtype_name(object())
    with pytest.raises(ValueError, match="no MXNet type code"):
        dtype_name(np.complex64)


def test_dtype_of_code_reads_a_dtype_attribute():
    """'__dtype__' text: a known code gives its name; unknown, missing or non-numeric gives None."""
    assert dtype_of_code("2") == "float16"
    assert dtype_of_code("12") == "bfloat16"
    assert dtype_of_code(None) is None
    assert dtype_of_code("abc") is None
    assert dtype_of_code("999") is None


def test_widest_and_is_float_follow_amp_multicast():
    """widest picks float32 over both low precision dtypes; is_float rejects ints and None."""
    assert widest(["float16", "float32", "bfloat16"]) == "float32"
    assert widest(["bfloat16"]) == "bfloat16"
    assert is_float("bfloat16") and not is_float("int32") and not is_float(None)


def test_array_dtype_and_nbytes_count_bfloat16_as_two_bytes():
    """A bf16 NDArray is named 'bfloat16' and takes 2 bytes per element."""
    a = mx.nd.ones((3, 4)).astype(np_dtype("bfloat16"))
    assert array_dtype(a) == "bfloat16"
    assert array_nbytes(a) == 24
    assert array_nbytes(mx.nd.ones((3, 4), dtype="float32")) == 48
