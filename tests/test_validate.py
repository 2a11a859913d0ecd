"""anatomy._validate: the shape-spec language every module's errors are written in."""

import numpy as np
import pytest

from anatomy._validate import (
    check_ids,
    check_keys,
    check_positive_int,
    check_shape,
    resolve,
    shape_error,
)


def test_check_shape_binds_letters_and_allows_leading_axes():
    assert check_shape(np.zeros((2, 3, 5, 8)), "x", "[..., T, d]") == {"T": 5, "d": 8}
    assert check_shape(np.zeros((8, 24)), "W", "[d, 3d]") == {"d": 8}
    assert check_shape(np.zeros((4, 4)), "m", "[T, T]") == {"T": 4}
    assert check_shape(np.zeros(3), "v", "[3]") == {}


def test_check_shape_rejects_rank_repeats_multiples_and_pinned_sizes():
    with pytest.raises(ValueError, match=r"^x: expected shape \[T, d\], got \(2, 3, 4\)$"):
        check_shape(np.zeros((2, 3, 4)), "x", "[T, d]")
    with pytest.raises(ValueError, match=r"^m: expected shape \[T, T\] = \(4, 4\), "
                                         r"got \(4, 5\)$"):
        check_shape(np.zeros((4, 5)), "m", "[T, T]")
    with pytest.raises(ValueError, match=r"^W: expected shape \[d, 3d\] = \(8, 24\), "
                                         r"got \(8, 12\)$"):
        check_shape(np.zeros((8, 12)), "W", "[d, 3d]")
    with pytest.raises(ValueError, match=r"^g: expected shape \[d\] = \(6,\), got \(5,\)$"):
        check_shape(np.zeros(5), "g", "[d]", d=6)


def test_resolve_and_shape_error_notes():
    assert resolve("[d, 3d]", d=8) == (8, 24)
    assert resolve("[V, d]", V=65, d=64) == (65, 64)
    err = shape_error("x", "[..., T, d]", (5, 7), note="with d even")
    assert str(err) == "x: expected shape [..., T, d] with d even, got (5, 7)"


def test_scalar_and_id_checks():
    assert check_positive_int(np.int64(3), "h") == 3
    for bad in (0, -2, 2.0, True, "4"):
        with pytest.raises(ValueError, match="h: expected a positive integer"):
            check_positive_int(bad, "h")
    np.testing.assert_array_equal(check_ids([[0, 64]], 65, 8), [[0, 64]])
    with pytest.raises(TypeError, match=r"ids: expected integers .* got dtype bool"):
        check_ids(np.array([True]), 65)


def test_check_keys_names_the_first_problem():
    check_keys({"a": 1, "c": 2}, "p", ["a"], ["c"])
    with pytest.raises(ValueError, match=r"p: missing key 'b' \(expected keys: a, b, c\)"):
        check_keys({"a": 1}, "p", ["a", "b"], ["c"])
    with pytest.raises(ValueError, match=r"p: unknown key 'z'"):
        check_keys({"a": 1, "z": 0}, "p", ["a"])
