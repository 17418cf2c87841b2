"""report.html in a real browser (Debian's chromium, headless; `make test` installs it): its headline
numbers equal metrics.json, filtering by a dataset hides the other datasets' rows and blocks, a
worst pair unfolds to its prompt and responses, and a screenshot is taken.

The page is opened as a user opens it, from its file, with a filter or a pair to open in the URL's
fragment (the page's own script reads it, as it reads the filter bar); chromium's `--dump-dom`
returns the DOM after the script ran, which is parsed here. The report is the metrics of two
models (random rewards, seeded) on CrowS-Pairs, XSTest and a RewardBench 2-shaped file; set
SOCIALRM_REPORT_DIR to an audit's output folder (the demo's, `runs/demo`) to check that one, and
SOCIALRM_SCREENSHOT to where its screenshot goes (the README's is docs/report_html.png):

  SOCIALRM_REPORT_DIR=runs/demo SOCIALRM_SCREENSHOT=docs/report_html.png \\
      python -m pytest -q tests/analysis/test_report_html.py
"""

from __future__ import annotations

import html.parser
import json
import os
import pathlib
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

from socialrm_jax.analysis import evaluate, runner
from socialrm_jax.base import tables
from socialrm_jax.orchestrators import audit as audit_lib
from socialrm_jax.orchestrators import convert as convert_lib
from tests.helpers import preference_fixtures as pf

BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync")
BROWSER_TIMEOUT_S = 120
WINDOW = "--window-size=1400,1800"
MODELS = ("model-a", "model-b")
N_RESAMPLES = 50
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


def browser() -> str:
  found = shutil.which("chromium") or shutil.which("chromium-browser")
  if found is None:
    pytest.fail("chromium is not installed: sudo apt-get install -y chromium (make test installs "
                "it where it may, tools/need_chromium.sh)")
  return found


def open_page(page: pathlib.Path, fragment: str = "", *action: str) -> str:
  """Runs headless chromium on the page (`action`: --dump-dom, --screenshot=PATH); stdout."""
  with tempfile.TemporaryDirectory(prefix="socialrm-chromium-") as profile:
    done = subprocess.run(
        [browser(), *BROWSER_FLAGS, f"--user-data-dir={profile}", WINDOW, *action,
         page.resolve().as_uri() + (f"#{fragment}" if fragment else "")],
        capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S)
  assert done.returncode == 0, done.stderr[-2000:]
  return done.stdout


class Element:
  def __init__(self, tag: str, attrs: dict, parent: "Element | None"):
    self.tag, self.attrs, self.parent = tag, attrs, parent
    self.text: list[str] = []

  @property
  def hidden(self) -> bool:
    """Hidden itself or inside a hidden element."""
    node = self
    while node is not None:
      if "hidden" in node.attrs:
        return True
      node = node.parent
    return False

  def content(self) -> str:
    return "".join(self.text)

  def tag_of(self, name: str) -> str | None:
    """Its own or its nearest tagged ancestor's `data-<name>`."""
    node = self
    while node is not None and f"data-{name}" not in node.attrs:
      node = node.parent
    return None if node is None else node.attrs[f"data-{name}"]


class Dom(html.parser.HTMLParser):
  """The dumped DOM's elements, each with its attributes, parent and text (its own and its
  descendants')."""

  def __init__(self, text: str):
    super().__init__()
    self.elements: list[Element] = []
    self._open: list[Element] = []
    self.feed(text)

  def handle_starttag(self, tag, attrs):
    element = Element(tag, dict(attrs), self._open[-1] if self._open else None)
    self.elements.append(element)
    if tag not in VOID:
      self._open.append(element)

  def handle_endtag(self, tag):
    while self._open:
      if self._open.pop().tag == tag:
        break

  def handle_data(self, data):
    for element in self._open:
      element.text.append(data)

  def find(self, tag: str | None = None, **attrs: str | None) -> list[Element]:
    """Elements with `tag` whose attributes have these values (None: present with any value)."""
    return [e for e in self.elements if (tag is None or e.tag == tag) and all(
        name in e.attrs and (value is None or e.attrs[name] == value)
        for name, value in ((k.replace("_", "-"), v) for k, v in attrs.items()))]


def value_at(tree: dict, path: str):
  node = tree
  for part in path.split("."):
    node = node[part]
  return node


def headline_mismatches(dom: Dom, metrics: dict[str, dict]) -> list[str]:
  """Headline cells whose value or shown number is not metrics.json's; [] when all agree."""
  cells = dom.find("td", data_path=None)
  wrong = [] if cells else ["no headline cells"]
  for cell in cells:
    expected = value_at(metrics[cell.attrs["data-model"]], cell.attrs["data-path"])
    shown = cell.content().split()[0]
    if expected is None:
      if cell.attrs["data-value"] != "" or shown != "null":
        wrong.append(f"{cell.attrs['data-path']}: expected null, got {shown}")
    elif float(cell.attrs["data-value"]) != expected or shown != f"{expected:.3f}":
      wrong.append(f"{cell.attrs['data-model']} {cell.attrs['data-path']}: metrics.json "
                   f"{expected}, page {cell.attrs['data-value']} shown {shown}")
  return wrong


@pytest.fixture(scope="module")
def audit(tmp_path_factory) -> tuple[pathlib.Path, dict[str, dict]]:
  """(the folder holding report.html, {model: metrics.json})."""
  given = os.environ.get("SOCIALRM_REPORT_DIR")
  if given:
    folder = pathlib.Path(given)
  else:
    root = tmp_path_factory.mktemp("report_browser")
    source = pf.write_jsonl(root / "rb2.jsonl", pf.rewardbench2_rows())
    convert_lib.convert_to(root / "converted", audit_lib.BUNDLED_DATA,
                           f"crows_pairs,xstest,preference:{source}:name=rb2", "jsonl")
    items = tables.read_rows(root / "converted", "items")
    paths = []
    for seed, name in enumerate(MODELS):
      rng = np.random.default_rng(seed)
      tables.write_rows(root / "scores" / name / "scores.jsonl", [
          {"item_id": item["item_id"], "candidate": k, "reward": float(rng.normal())}
          for item in items for k in range(len(item["candidates"]))])
      paths.append(str(root / "scores" / name))
    folder = root / "report"
    runner.evaluate_all(str(root / "converted"), paths, str(folder), list(MODELS),
                        evaluate.Options(n_resamples=N_RESAMPLES))
  names = json.loads((folder / "comparisons.json").read_text())["models"]
  return folder, {name: json.loads((folder / name / "metrics.json").read_text())
                  for name in names}


@pytest.fixture(scope="module")
def dumped(audit):
  """page fragment -> the DOM chromium shows for it, each opened once (a launch takes seconds)."""
  found: dict[str, Dom] = {}

  def dom(fragment: str = "") -> Dom:
    if fragment not in found:
      found[fragment] = Dom(open_page(audit[0] / "report.html", fragment, "--dump-dom"))
    return found[fragment]
  return dom


def first_worst_pair(metrics: dict[str, dict]) -> tuple[str, str, dict]:
  """(the id of the first model's first worst pair in the page, its dataset, the pair)."""
  model, tree = next(iter(metrics.items()))
  dataset, node = next((d, n) for d, n in tree["datasets"].items() if n.get("worst_pairs"))
  return f"pair-{model}-{dataset}-1", dataset, node["worst_pairs"][0]


def test_the_page_is_one_file_that_fetches_nothing(audit):
  page = (audit[0] / "report.html").read_text()
  assert "<script src" not in page and "<link" not in page and "http://" not in page.split(
      "<main>")[0]
  assert 'src="data:image/png;base64,' in page  # the figures are inline
  assert "default-src 'none'" in page


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_headline_numbers_equal_metrics_json(audit, dumped, tmp_path):
  folder, metrics = audit
  dom = dumped()
  assert headline_mismatches(dom, metrics) == []
  assert {c.attrs["data-model"] for c in dom.find("td", data_path=None)} == set(metrics)
  # A page with one wrong number in it is caught: the check can fail.
  page = (folder / "report.html").read_text()
  cell = next(c for c in dom.find("td", data_path=None) if c.attrs["data-value"])
  value = value_at(metrics[cell.attrs["data-model"]], cell.attrs["data-path"])
  planted = page.replace(f'data-value="{value!r}">{value:.3f}',
                         f'data-value="{value + 0.01!r}">{value + 0.01:.3f}', 1)
  assert planted != page
  (tmp_path / "report.html").write_text(planted)
  wrong = headline_mismatches(Dom(open_page(tmp_path / "report.html", "", "--dump-dom")),
                              metrics)
  assert len(wrong) == 1 and cell.attrs["data-path"] in wrong[0]


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_filtering_by_a_dataset_hides_the_other_datasets_rows(audit, dumped):
  _, metrics = audit
  datasets = list(next(iter(metrics.values()))["datasets"])
  pair_id, wanted, _ = first_worst_pair(metrics)
  dom = dumped(f"dataset={wanted}&open={pair_id}")
  others = [e for e in dom.find(data_dataset=None) if e.attrs["data-dataset"] != wanted]
  mine = [e for e in dom.find(data_dataset=None) if e.attrs["data-dataset"] == wanted]
  assert {e.attrs["data-dataset"] for e in others} == set(datasets) - {wanted}
  assert others and all(e.hidden for e in others)
  assert mine and not any(e.hidden for e in mine)
  # Every table row about another dataset (tagged itself or inside a tagged block) is hidden.
  rows = [(row, row.tag_of("dataset")) for row in dom.find("tr")]
  assert all(row.hidden for row, dataset in rows if dataset not in (None, wanted))
  assert not any(row.hidden for row, dataset in rows if dataset == wanted)
  assert {d for _, d in rows} >= set(datasets)
  assert not any(e.hidden for e in dumped().find(data_dataset=None))  # unfiltered: all shown


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_a_worst_pair_unfolds_to_its_prompt_and_responses(audit, dumped):
  pair_id, dataset, pair = first_worst_pair(audit[1])
  folded = dumped()
  assert folded.find("details", id=pair_id) and not folded.find("details", open=None)
  dom = dumped(f"dataset={dataset}&open={pair_id}")
  (details,) = dom.find("details", id=pair_id)
  assert "open" in details.attrs and len(dom.find("details", open=None)) == 1
  assert not details.hidden
  text = " ".join(details.content().split())
  assert pair["item_id"] in text
  for role in ("prompt", "chosen", "rejected"):
    assert " ".join(pair[role].split()) in text, role


@pytest.mark.slow  # a subprocess; more than a few seconds
def test_a_screenshot_of_the_page(audit, tmp_path):
  folder, _ = audit
  target = pathlib.Path(os.environ.get("SOCIALRM_SCREENSHOT", tmp_path / "report_html.png"))
  target.parent.mkdir(parents=True, exist_ok=True)
  open_page(folder / "report.html", "", f"--screenshot={target.resolve()}")
  assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and target.stat().st_size > 10_000


def test_text_from_users_files_stays_text(tmp_path):
  """A subset name or id holding HTML is shown, never run: the report's markdown is rendered
  without raw HTML, and the worst pairs' texts are escaped by the template."""
  from socialrm_jax.analysis.outputs import report_html
  names = report_html.Names({"m": {"datasets": {"d": {}}}})
  (section,) = report_html._blocks("## s\n\n| metric | m |\n|---|---|\n| <script>x()</script> | 1 |",
                                   names, tmp_path)
  html = section["parts"][0]["html"]
  assert "<script>" not in html and "&lt;script&gt;x()&lt;/script&gt;" in html
  assert 'data-model="m"' in html
