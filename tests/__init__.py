"""The tests, laid out as the package: the tests of `socialrm_jax/<layer>/<module>.py` are in
`tests/<layer>/test_<module>.py` (or `test_<module>_<aspect>.py` where one module has several
files of tests, e.g. `scoring/test_engine_resume.py`). Commands run end to end, through several
layers, are in `end_to_end/`; whole-package checks (`test_layering.py`, `test_readme_commands.py`)
stay here. Helper code is the `tests.helpers` package (import it as `from tests.helpers import
scoring_fixtures as fx`); shared pytest fixtures are in `conftest.py` files. A test that starts a
subprocess is marked `@pytest.mark.slow` when it takes more than a few seconds."""
