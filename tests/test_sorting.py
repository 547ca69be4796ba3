"""The kernels' stable argsort: NumPy's stable order (ties in input order, NaN last)."""

from __future__ import annotations

import numpy as np
import pytest

from streamfit.sorting import RUN, stable_argsort


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float64])
def test_stable_argsort_is_numpys_stable_order(dtype):
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, RUN - 1, RUN, RUN + 1, 2 * RUN + 1, 4 * RUN + 3, 1000):
        keys = rng.integers(0, max(1, n // 3), n).astype(dtype)  # many ties
        if dtype is np.float64 and n > 3:
            keys[rng.integers(0, n, n // 5)] = np.nan
            keys = -keys  # -0.0 and 0.0 tie as well
        order = stable_argsort(keys)
        assert order.dtype == np.int64
        np.testing.assert_array_equal(order, np.argsort(keys, kind="stable"))
