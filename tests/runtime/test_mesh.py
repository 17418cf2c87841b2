"""The mesh: its `--mesh` spec parsed, and its devices laid on a TPU slice's physical topology
(the same scores over several meshes: tests/scoring/test_engine_meshes.py)."""

import dataclasses
import random

import pytest


def test_mesh_spec_parsing():
  from socialrm_jax.base.errors import InputError
  from socialrm_jax.runtime import mesh as mesh_lib
  assert mesh_lib.parse_mesh_spec(None, 8) == {"data": 8, "model": 1}
  assert mesh_lib.parse_mesh_spec("data:4,model:2", 8) == {"data": 4, "model": 2}
  assert mesh_lib.parse_mesh_spec("model:2", 2) == {"data": 1, "model": 2}
  assert mesh_lib.parse_mesh_spec("data:-1,model:2", 8) == {"data": 4, "model": 2}
  with pytest.raises(InputError, match="multiply"):
    mesh_lib.parse_mesh_spec("data:8,model:2", 8)
  with pytest.raises(InputError, match="NAME:SIZE"):
    mesh_lib.parse_mesh_spec("rows:8", 8)
  mesh = mesh_lib.make_mesh()
  assert mesh.axis_names == ("data", "model")


@dataclasses.dataclass(frozen=True)
class FakeChip:
  """What JAX's mesh layout reads of a TPU device."""
  id: int
  coords: tuple[int, int, int]
  device_kind: str = "TPU v4"
  platform: str = "tpu"
  core_on_chip: int = 0
  process_index: int = 0


def _neighbours(a: FakeChip, b: FakeChip) -> bool:
  return sum(abs(i - j) for i, j in zip(a.coords, b.coords)) == 1


def test_the_model_axis_runs_along_neighbouring_chips_of_the_slice():
  from socialrm_jax.runtime import mesh as mesh_lib
  chips = [FakeChip(i, (i % 4, i // 4, 0)) for i in range(16)]  # a 4x4 slice
  random.Random(0).shuffle(chips)  # the order the devices come in says nothing of the topology
  grid = mesh_lib.device_grid((4, 4), chips)
  assert sorted(c.id for c in grid.flat) == list(range(16))
  for row in grid:  # each model group: a line of four chips, each beside the next
    assert all(_neighbours(a, b) for a, b in zip(row, row[1:])), [c.coords for c in row]
  reshaped = [chips[i:i + 4] for i in range(0, 16, 4)]  # what the mesh was: the list reshaped
  assert not all(_neighbours(a, b) for row in reshaped for a, b in zip(row, row[1:]))


def test_devices_that_form_no_cuboid_keep_their_order_with_a_warning(caplog):
  from socialrm_jax.runtime import mesh as mesh_lib
  chips = [FakeChip(i, xy + (0,)) for i, xy in enumerate([(0, 0), (2, 2), (1, 3), (3, 1)])]
  grid = mesh_lib.device_grid((2, 2), chips)
  assert [c.id for c in grid.flat] == [0, 1, 2, 3]
  assert "not laid on their topology" in caplog.text


def test_a_cpu_mesh_keeps_jaxs_device_order_and_axes():
  import jax
  from socialrm_jax.runtime import mesh as mesh_lib
  mesh = mesh_lib.make_mesh("data:1,model:1")
  assert list(mesh.devices.flat) == jax.devices()[:1]
  assert mesh.axis_types == (jax.sharding.AxisType.Auto,) * 2
