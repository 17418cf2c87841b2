"""Columns of few distinct strings as codes (`Categorical`), read like arrays of strings."""

import numpy as np
import pytest

from socialrm_jax.analysis.tables.categorical import Categorical, Coder


def test_a_categorical_reads_like_an_array_of_strings():
  coder = Coder()
  column = coder.finish([coder.codes(["b", "a", "b", "c"])])
  assert column.codes.dtype == np.int8 and column.categories.tolist() == ["b", "a", "c"]
  assert (column == "b").tolist() == [True, False, True, False]
  assert (column != "zz").all() and column[3] == "c" and list(column[[0, 1]]) == ["b", "a"]
  assert column.distinct() == ["b", "a", "c"] and column[2:].distinct() == ["b", "c"]
  with pytest.raises(TypeError):
    column == np.asarray(["b", "a", "b", "c"])  # pylint: disable=expression-not-assigned


def test_batches_coded_apart_share_one_set_of_categories():
  coder = Coder()
  first, second = coder.codes(["x", "y"]), coder.codes([["y", "z"], ["x", "x"]])
  column = coder.finish([first])
  grid = coder.finish([second])
  assert column.tolist() == ["x", "y"] and grid.tolist() == [["y", "z"], ["x", "x"]]
  assert grid[0, 1] == "z" and grid.shape == (2, 2)
