"""The user documents hold together: README.md stays a front door (<= 12 KB) whose commands table
names every console script; every link in README.md and docs/ reaches a file (and a heading,
when it names one), and every repository path they name in backticks exists; every "docs/spec.md sec. N" the package cites is a section of docs/spec.md; and no
commit hash or note on machine load sits in README.md or docs/ (figures name the machine they
were measured on, not how busy it was).

(The commands the pages show are run by tests/test_readme_commands.py.)
"""

from __future__ import annotations

import pathlib
import re
import tomllib
from tests.helpers.paths import REPO_ROOT

REPO = REPO_ROOT
README_LIMIT_BYTES = 12 * 1024
# [text](target) and ![alt](target); the target up to a space or the closing parenthesis.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# "docs/spec.md sec. 5", "docs/spec.md sec. 4, 6", "docs/spec.md sec. 1 and 3", "docs/spec.md
# section 3", across a line break.
_CITATION = re.compile(r"docs/spec\.md\s+sec(?:tions?|s)?\.?\s*(\d+(?:\s*(?:,|and)\s*\d+)*)")
# A citation that does not say where the spec is (the page's old name, "SPEC sec. N").
_BARE_CITATION = re.compile(r"(?<![\w/.])SPEC\s+sec")
_SPEC_SECTION = re.compile(r"^## (\d+)\. ", re.M)
# A commit id: 7 to 40 hex digits with at least one digit and one letter (so neither a number
# nor a word such as "defaced").
_HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
# A repository path a page names in backticks: `socialrm_jax/scoring/README.md`, `tests/test_x.py`.
# A config file's argument string after `.py:` is no part of its path.
_REPO_PATH = re.compile(r"`((?:socialrm_jax|benchmarks|tests|configs|tools|launch|docs)/[^`\s*<>:]*)[^`]*`")
# Named by docs/architecture.md as the module it planted to show the layering test failing.
PLANTED_EXAMPLES = {"socialrm_jax/stray.py"}
_MACHINE_LOAD = re.compile(r"\b(hour|idle|other jobs|machine load|busy|shared the cores|"
                           r"shared machine|slower that|quieter)\b", re.I)


def pages(repo: pathlib.Path = REPO) -> list[pathlib.Path]:
  return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


def prose(markdown: str) -> str:
  """The text outside fenced code blocks (a `# comment` in a bash block is not a heading)."""
  return re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)


def anchor(heading: str) -> str:
  """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces made
  hyphens (`## Your own preference data` is `#your-own-preference-data`)."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
  return {anchor(h) for h in re.findall(r"^#{1,6} (.+)$", prose(markdown), re.M)}


def link_problems(page: pathlib.Path, repo: pathlib.Path = REPO) -> list[str]:
  """Each relative link of `page` that reaches no file, or no heading of the file it names."""
  problems = []
  for target in _LINK.findall(prose(page.read_text(encoding="utf-8"))):
    if re.match(r"[a-z]+:", target):  # https:, mailto:
      continue
    path, _, fragment = target.partition("#")
    linked = (page.parent / path).resolve() if path else page
    where = f"{page.relative_to(repo)}: link {target}"
    if not linked.exists():
      problems.append(f"{where}: no {path}")
    elif repo.resolve() not in (linked, *linked.parents):
      problems.append(f"{where}: outside the repository")
    elif fragment and linked.suffix == ".md" and fragment not in anchors(
        linked.read_text(encoding="utf-8")):
      problems.append(f"{where}: {path or page.name} has no heading #{fragment}")
  return problems


def cited_sections(text: str) -> list[int]:
  return [int(n) for group in _CITATION.findall(text) for n in re.findall(r"\d+", group)]


def spec_sections(spec: str) -> set[int]:
  return {int(n) for n in _SPEC_SECTION.findall(spec)}


def citation_problems(package: pathlib.Path, spec: str) -> list[str]:
  sections = spec_sections(spec)
  problems = []
  for path in sorted(package.rglob("*")):
    if path.suffix not in (".py", ".md") or "bundled" in path.parts:
      continue
    text = path.read_text(encoding="utf-8")
    for n in cited_sections(text):
      if n not in sections:
        problems.append(f"{path.relative_to(package.parent)} cites docs/spec.md sec. {n}, which "
                        f"docs/spec.md does not have (it has {sorted(sections)})")
    if _BARE_CITATION.search(text):
      problems.append(f"{path.relative_to(package.parent)} cites SPEC sec.: write "
                      "docs/spec.md sec. N, so a reader knows where to look")
  return problems


def test_the_readme_is_a_front_door():
  size = (REPO / "README.md").stat().st_size
  assert size <= README_LIMIT_BYTES, f"README.md is {size} bytes; move detail to docs/"


def test_the_readme_commands_table_names_every_console_script():
  with open(REPO / "pyproject.toml", "rb") as f:
    scripts = tomllib.load(f)["project"]["scripts"]
  readme = (REPO / "README.md").read_text(encoding="utf-8")
  rows = re.findall(r"^\| `(socialrm-[\w-]+)` \|", readme, re.M)
  assert sorted(scripts) == sorted(rows), (
      f"missing from the README's commands table: {sorted(set(scripts) - set(rows))}; "
      f"not a console script: {sorted(set(rows) - set(scripts))}")


def test_every_link_in_the_readme_and_docs_reaches_its_target():
  linked = [t for p in pages() for t in _LINK.findall(prose(p.read_text(encoding="utf-8")))]
  assert len(linked) >= 20, linked
  problems = [p for page in pages() for p in link_problems(page)]
  assert not problems, "\n".join(problems)
  # Every docs page is reached from the README, directly or through another page.
  reached, frontier = set(), [REPO / "README.md"]
  while frontier:
    page = frontier.pop()
    for target in _LINK.findall(prose(page.read_text(encoding="utf-8"))):
      path = (page.parent / target.partition("#")[0]).resolve()
      if path.suffix == ".md" and path.parent == (REPO / "docs").resolve() and path not in reached:
        reached.add(path)
        frontier.append(path)
  unreached = sorted(p.name for p in (REPO / "docs").glob("*.md") if p.resolve() not in reached)
  assert not unreached, f"docs pages no link from README.md reaches: {unreached}"


def path_problems(page: pathlib.Path, repo: pathlib.Path = REPO) -> list[str]:
  """Each repository path `page` names in backticks that the checkout does not hold."""
  named = set(_REPO_PATH.findall(page.read_text(encoding="utf-8"))) - PLANTED_EXAMPLES
  return [f"{page.relative_to(repo)}: names {path}, which does not exist"
          for path in sorted(named) if not (repo / path).exists()]


def test_every_repository_path_the_pages_name_exists():
  named = [p for page in pages() for p in _REPO_PATH.findall(page.read_text(encoding="utf-8"))]
  assert len(named) >= 20, named
  problems = [p for page in pages() for p in path_problems(page)]
  assert not problems, "\n".join(problems)


def test_a_planted_broken_link_fails(tmp_path):
  (tmp_path / "docs").mkdir()
  (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Its part\n\nText.\n")
  page = tmp_path / "README.md"
  page.write_text("[ok](docs/a.md) [ok too](docs/a.md#its-part)\n"
                  "```bash\n# [not a link](docs/nothing.md)\n```\n"
                  "[gone](docs/b.md) [no part](docs/a.md#other-part) [up](../../etc/passwd)\n")
  problems = link_problems(page, tmp_path)
  assert len(problems) == 3, problems
  assert "no docs/b.md" in problems[0] and "no heading #other-part" in problems[1]
  page.write_text("`docs/a.md` and `tests/test_moved_away.py`, `socialrm_jax/stray.py`\n")
  assert path_problems(page, tmp_path) == [
      "README.md: names tests/test_moved_away.py, which does not exist"]


def test_every_spec_section_the_package_cites_exists_in_docs_spec():
  spec = (REPO / "docs" / "spec.md").read_text(encoding="utf-8")
  cited = [n for path in (REPO / "socialrm_jax").rglob("*.py")
           for n in cited_sections(path.read_text(encoding="utf-8"))]
  assert len(cited) >= 25 and set(cited) >= {1, 2, 3, 4, 5, 6}, cited
  problems = citation_problems(REPO / "socialrm_jax", spec)
  assert not problems, "\n".join(problems)


def test_a_citation_of_a_missing_section_fails(tmp_path):
  assert cited_sections("(docs/spec.md sec. 4, 6) and docs/spec.md\nsec. 1 and 3; "
                        "docs/spec.md section 2") == [4, 6, 1, 3, 2]
  package = tmp_path / "pkg"
  package.mkdir()
  (package / "m.py").write_text('"""Metrics (docs/spec.md sec. 5, 7)."""\n')
  (package / "n.py").write_text('"""Bias (SPEC sec. 5)."""\n')
  problems = citation_problems(package, "# Spec\n\n## 5. Metrics\n")
  assert len(problems) == 2, problems
  assert problems[0].startswith("pkg/m.py cites docs/spec.md sec. 7,"), problems
  assert problems[1].startswith("pkg/n.py cites SPEC sec.: write docs/spec.md sec. N"), problems


def test_no_commit_hash_and_no_machine_load_note_in_user_documents():
  problems = []
  for page in pages():
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
      where = f"{page.relative_to(REPO)}:{number}"
      problems += [f"{where}: commit-like id {h!r}" for h in _HASH.findall(line)]
      problems += [f"{where}: a note on machine load ({m!r})" for m in _MACHINE_LOAD.findall(line)]
  assert not problems, "\n".join(problems)
  assert _HASH.findall("at 29dad45, then a3c4b24") == ["29dad45", "a3c4b24"]
  assert not _HASH.findall("1523712 tokens, defaced, 0x1f")
  assert _MACHINE_LOAD.search("the machine ran 2.7x slower that hour")
