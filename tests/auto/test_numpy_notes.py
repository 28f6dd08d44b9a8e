"""mxnet_amp.auto.numpy_notes: numpy floating point warnings become report notes."""
import numpy as np

from mxnet_amp.auto.numpy_notes import numpy_warnings_noted
from mxnet_amp.auto.records import SearchStep


def _divide_by_zero():
    return np.array([1.0]) / np.array([0.0])


def test_a_division_by_zero_is_noted_with_the_step_and_the_code():
    """One note per kind and place: the count, the step under way and the calling function."""
    steps = [SearchStep("reference", 0, None, None, None)]
    notes: list[str] = []
    with numpy_warnings_noted(steps, notes):
        _divide_by_zero()
        _divide_by_zero()
    assert len(notes) == 1
    assert notes[0].startswith("numpy met 'divide by zero' 2 times during step 2 (the final conversion)")
    assert "_divide_by_zero (test_numpy_notes.py:" in notes[0]


def test_the_step_is_named_by_its_kind_once_recorded():
    """An error while the first step is under way, then recorded as 'reference', names it."""
    steps: list[SearchStep] = []
    notes: list[str] = []
    with numpy_warnings_noted(steps, notes):
        _divide_by_zero()
        steps.append(SearchStep("reference", 0, None, None, None))
    assert "during step 1 (the reference run)" in notes[0]


def test_code_that_silences_numpy_stays_silent_and_state_is_restored():
    """An np.errstate(divide='ignore') inside the block records nothing; after the block
    numpy's own settings are back."""
    before = np.geterr()
    notes: list[str] = []
    with numpy_warnings_noted([], notes):
        with np.errstate(divide="ignore"):
            _divide_by_zero()
    assert notes == [] and np.geterr() == before
