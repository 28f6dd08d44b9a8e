"""mxnet_amp.warn: package warnings name the caller's line, not the package's."""
import inspect
import os
import warnings

import mxnet_amp
from mxnet_amp.warn import warn_user


def _recorded(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return caught


def test_a_direct_call_names_the_callers_line():
    """Called from outside the package, the warning's file and line are the caller's."""
    line = inspect.currentframe().f_lineno + 1
    caught = _recorded(lambda: warn_user("careful"))
    assert len(caught) == 1
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)
    assert caught[0].category is UserWarning and str(caught[0].message) == "careful"


def test_package_frames_are_skipped():
    """A warning raised by code whose file lies in the package (a frame made here with such
    a file name) names the first frame outside it: this test's line."""
    inside = os.path.join(os.path.dirname(mxnet_amp.__file__), "deep_module.py")
    code = compile("def deep():\n    warn_user('deep')\n", inside, "exec")
    scope = {"warn_user": warn_user}
    exec(code, scope)
    line = inspect.currentframe().f_lineno + 1
    caught = _recorded(lambda: scope["deep"]())
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)


def test_the_category_is_kept():
    """The category given is the category raised."""
    caught = _recorded(lambda: warn_user("old", DeprecationWarning))
    assert caught[0].category is DeprecationWarning
