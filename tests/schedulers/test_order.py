"""The packed-key ranking gives exactly NumPy's stable descending argsort."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from crawler.schedulers._order import descending_order


def stable_reference(values: np.ndarray) -> np.ndarray:
    return np.argsort(-values, kind="stable")


# a few distinct values, so that ties are common, with both zeros and both infinities
FEW = st.sampled_from([0.0, -0.0, 1.0, 0.5, -0.5, 0.96, -3.25, 1e-30, -1e-30, np.inf, -np.inf])


@given(arrays(np.float32, st.integers(0, 300), elements=FEW))
def test_ties_zeros_and_infinities_keep_position_order(values: np.ndarray) -> None:
    assert descending_order(values).tolist() == stable_reference(values).tolist()


@given(arrays(np.float32, st.integers(0, 300), elements=st.floats(-2, 2, width=32)))
def test_any_finite_credits(values: np.ndarray) -> None:
    assert descending_order(values).tolist() == stable_reference(values).tolist()


def test_a_slots_worth_of_credits() -> None:
    rng = np.random.default_rng(3)
    values = rng.random(20_000).astype(np.float32)
    values[rng.choice(20_000, 2_000)] = np.float32(0.96875)  # the ceiling of waiting rows
    order = descending_order(values)
    assert order.dtype == np.intp
    assert np.array_equal(order, stable_reference(values))


def test_nan_and_other_types_take_numpys_sort() -> None:
    with_nan = np.array([0.5, np.nan, 1.0, 0.5], dtype=np.float32)
    assert descending_order(with_nan).tolist() == stable_reference(with_nan).tolist()
    wide = np.array([0.25, 1.0, 0.25, -1.0])
    assert descending_order(wide).tolist() == [1, 0, 2, 3]
