"""The documentation site: it builds strictly, its params.yaml reference covers
every key of params.yaml, the presets and the schema, development.md's code
layout matches the tree, every figure the README and the home page quote is
the figure of the docs page they cite, and the first screens stay short: no
large table on the README's first screen or the home page, the result pages
under 300 lines, the lab out of the navigation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from zeroloop.pipeline.params.reference import MARKER, fill_reference
from zeroloop.pipeline.params.schema import FloatRange, IntRange, Params

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "zeroloop"
PARAMS_FILES = [ROOT / "params.yaml", *sorted((ROOT / "presets").glob("*.yaml"))]


def reference() -> str:
    """docs/params.md as the site shows it (the hook's own call)."""
    page = (ROOT / "docs" / "params.md").read_text()
    return fill_reference(page, yaml.safe_load((ROOT / "params.yaml").read_text()))


def reference_rows(markdown: str) -> dict[str, list[str]]:
    """``key -> [type, default, allowed, params.yaml, meaning]`` for every table row."""
    rows = {}
    for line in markdown.splitlines():
        m = re.match(r"^\| `([^`]+)` \|(.*)\|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in re.split(r"(?<!\\)\|", m.group(2))]
    return rows


def yaml_keys(data: dict, prefix: str = "") -> list[str]:
    """Every leaf key of a params file, dotted (``gate.sprt.alpha``)."""
    out = []
    for k, v in data.items():
        key = f"{prefix}{k}"
        out += yaml_keys(v, key + ".") if isinstance(v, dict) and v else [key]
    return out


def missing_keys(markdown: str, data: dict) -> list[str]:
    """The keys of ``data`` the reference does not list. A generation number
    reads as ``<g>``; a key inside a tuning range (``tune.c_puct.low``) is
    covered by the range's row."""
    rows = reference_rows(markdown)
    missing = []
    for key in yaml_keys(data):
        key = ".".join("<g>" if part.isdigit() else part for part in key.split("."))
        parent = key.rpartition(".")[0]
        if key not in rows and not (parent in rows and rows[parent][0].startswith("range")):
            missing.append(key)
    return missing


def schema_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key the schema accepts, walked from the pydantic models."""
    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel) and ann not in (FloatRange, IntRange):
            out += schema_keys(ann, f"{prefix}{name}.")
        elif get_origin(ann) is dict:
            out += schema_keys(get_args(ann)[1], f"{prefix}{name}.<g>.")
        else:
            out.append(prefix + name)
    return out


def test_the_site_builds_strictly(tmp_path):
    """`mkdocs build --strict`, in-process (the hook's import of zeroloop is
    then shared with the suite): a broken link or anchor, a page missing from
    the nav or from docs/, or a failing hook stops the build."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    site = tmp_path / "site"
    build(load_config(str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(site)))
    page = (site / "params" / "index.html").read_text()
    assert "mcts.simulations" in page and "params-reference" not in page


@pytest.mark.parametrize("path", PARAMS_FILES, ids=lambda p: p.name)
def test_the_params_reference_lists_every_key_of_a_params_file(path):
    """params.yaml, and the params.yaml each preset writes (`make preset`)."""
    from zeroloop.pipeline.params.presets import preset_params

    data = (yaml.safe_load(path.read_text()) if path.name == "params.yaml"
            else preset_params(path.stem, path.parent)[0].to_yaml_data())
    assert missing_keys(reference(), data) == []


def test_the_params_reference_lists_every_schema_key_with_its_meaning():
    rows = reference_rows(reference())
    keys = schema_keys(Params)
    assert sorted(set(keys) - set(rows)) == [], "keys the reference leaves out"
    assert sorted(set(rows) - set(keys)) == [], "rows for keys the schema does not have"
    no_meaning = [k for k in keys if not rows[k][4]]
    assert no_meaning == [], ("keys with no meaning written in the code: give each a Field description "
                              "or a `name: text` line in its config's docstring")


def test_a_key_left_out_of_the_reference_is_caught():
    markdown = reference()
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    nested = next(k for k in yaml_keys(data) if k.count(".") == 2 and f"| `{k}` |" in markdown)
    cut = "\n".join(line for line in markdown.splitlines() if not line.startswith(f"| `{nested}` |"))
    assert missing_keys(cut, data) == [nested]


def test_the_params_page_has_its_marker():
    assert MARKER in (ROOT / "docs" / "params.md").read_text()
    with pytest.raises(ValueError, match="marker"):
        fill_reference("# no marker here", {})


def layout_paths() -> list[str]:
    """The paths in the first column of development.md's code-layout tables."""
    text = (ROOT / "docs" / "development.md").read_text()
    section = text.split("\n## Code layout\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)


def test_the_code_layout_lists_exactly_the_tree():
    """Every path listed exists (``x/`` a folder, else a file), every module
    but ``__init__.py`` is listed, and so is every package (as ``x/``)."""
    listed = layout_paths()
    assert len(listed) == len(set(listed)), "a path listed twice"
    absent = [p for p in listed
              if not ((PACKAGE / p).is_dir() if p.endswith("/") else (PACKAGE / p).is_file())]
    assert absent == [], "listed in docs/development.md but not in src/zeroloop"
    modules = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
               if p.name != "__init__.py" and "__pycache__" not in p.parts}
    packages = {p.parent.relative_to(PACKAGE).as_posix() + "/" for p in PACKAGE.rglob("__init__.py")
                if p.parent != PACKAGE and p.parent.parent != PACKAGE}
    unlisted = sorted((modules | packages) - set(listed))
    assert unlisted == [], "in src/zeroloop but not in docs/development.md's code layout"


# The figures the README (and the site's home page) quote, against the pages they cite.

def figures(text: str) -> set[str]:
    """The figures in a piece of markdown: every number (``48.6``, ``2026``,
    ``4.2``) outside code spans, and every commit named in one (``eedbc89``)."""
    spans = re.findall(r"`([^`]*)`", text)
    commits = {s for s in spans if re.fullmatch(r"[0-9a-f]{7,40}", s) and re.search(r"\d", s)}
    return set(re.findall(r"\d+(?:\.\d+)?", re.sub(r"`[^`]*`", " ", text))) | commits


def section(markdown: str, heading: str) -> str:
    """The text under ``heading`` (a whole heading line) up to the next heading
    of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = markdown.splitlines()
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines))
                if re.match(rf"^#{{1,{level}}} ", lines[i])), len(lines))
    return "\n".join(lines[start:end])


def table(markdown: str, header: str) -> list[str]:
    """The body rows of the first table whose header row starts with ``header``."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def tables(lines: list[str]) -> list[list[str]]:
    """Every markdown table in ``lines`` outside code blocks, as its body rows."""
    found, fenced, i = [], False, 0
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            fenced = not fenced
        elif (not fenced and lines[i].startswith("|") and i + 1 < len(lines)
              and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip())):
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            found.append(rows)
            continue
        i += 1
    return found


def first_cell(row: str) -> str:
    return row.split("|")[1].strip()


def misquoted_rows(quoting: list[str], cited: list[str]) -> list[str]:
    """The quoting rows whose figures are not all in a cited row of the same
    first cell (the row, with the figures the cited page lacks)."""
    wrong = []
    for row in quoting:
        candidates = [figures(c) for c in cited if first_cell(c) == first_cell(row)]
        missing = min((figures(row) - c for c in candidates), key=len, default=None)
        if missing is None:
            wrong.append(f"{row}: no row '{first_cell(row)}' on the cited page")
        elif missing:
            wrong.append(f"{row}: {sorted(missing)} not in the cited row")
    return wrong


def paragraph_with(markdown: str, link: str) -> str:
    """The paragraph that holds ``link``."""
    return next(p for p in markdown.split("\n\n") if link in p)


def sentence_with(markdown: str, link: str) -> str:
    """The sentence that holds ``link`` (a sentence ends at a full stop before a capital)."""
    return next(s for s in re.split(r"(?<=\.)\s+(?=[A-Z])", paragraph_with(markdown, link)) if link in s)


#: the cited pages' result sections: what `make repro` takes, and what its champion reaches
RESULTS = {"speed.md#the-results": "docs/speed.md", "strength.md#the-results": "docs/strength.md"}


def misquoted(page: str, docs: str) -> list[str]:
    """Every figure of ``page``'s opening (the README's or the home page's) that
    the page it cites does not give: the sentence on how long `make repro`
    takes against speed.md's results, the one on its champion against
    strength.md's. ``docs`` is the prefix of a docs link on that page."""
    wrong = []
    for link, path in RESULTS.items():
        cited = section((ROOT / path).read_text(), "## The results")
        line = sentence_with(page, f"({docs}{link})")
        lacking = figures(line) - figures(cited)
        if lacking:
            wrong.append(f"{line!r}: {sorted(lacking)} not in {path}'s results")
    return wrong


def test_the_readme_quotes_the_figures_of_the_pages_it_cites():
    readme = (ROOT / "README.md").read_text()
    assert misquoted(readme, "docs/") == []
    presets = (ROOT / "docs" / "presets.md").read_text()
    assert "(docs/presets.md)" in section(readme, "## Presets")
    assert misquoted_rows(table(section(readme, "## Presets"), "| preset |"),
                          table(presets, "| preset |")) == []


def test_the_home_page_quotes_the_figures_of_the_pages_it_cites():
    assert misquoted((ROOT / "docs" / "index.md").read_text(), "") == []


def test_a_figure_changed_in_the_readme_is_caught():
    readme = (ROOT / "README.md").read_text()
    for link, old, new in [("(docs/speed.md#the-results)", "45-70", "45-75"),
                           ("(docs/strength.md#the-results)", "2.5%", "2.6%")]:
        line = sentence_with(readme, link)
        assert old in line
        assert len(misquoted(readme.replace(line, line.replace(old, new)), "docs/")) == 1
    row = table(section(readme, "## Presets"), "| preset |")[0]
    number = sorted(figures(row))[0]
    changed = readme.replace(row, row.replace(number, number + "1", 1))
    presets = table((ROOT / "docs" / "presets.md").read_text(), "| preset |")
    assert len(misquoted_rows(table(section(changed, "## Presets"), "| preset |"), presets)) == 1


def test_the_readme_links_into_the_docs_at_headings_that_exist():
    """mkdocs checks the site's anchors; the README is not in the site."""
    from markdown.extensions.toc import slugify

    links = re.findall(r"\]\(docs/([\w/-]+\.md)#([^)]+)\)", (ROOT / "README.md").read_text())
    assert links, "the README links to no heading"
    for page, anchor in links:
        headings = re.findall(r"^#+ (.+)$", (ROOT / "docs" / page).read_text(), flags=re.M)
        assert anchor in {slugify(h.replace("`", ""), "-") for h in headings}, f"docs/{page}#{anchor}"


# The first screens: a newcomer reads the product, the lab is one link away.

def test_the_first_screens_hold_no_large_table():
    """No table of more than 4 rows in the README's first 45 lines or on the
    docs' home page (a table of machines belongs in the lab)."""
    readme = (ROOT / "README.md").read_text().splitlines()[:45]
    home = (ROOT / "docs" / "index.md").read_text().splitlines()
    for name, lines in [("README.md", readme), ("docs/index.md", home)]:
        large = [rows for rows in tables(lines) if len(rows) > 4]
        assert large == [], f"{name}: a table of {len(large[0])} rows on the first screen"


def test_a_large_table_on_the_first_screen_is_caught():
    lines = ["# x", "", "| a | b |", "|---|---|", *[f"| {i} | {i} |" for i in range(5)], "", "```",
             "| not | a table |", "```"]
    assert [len(rows) for rows in tables(lines)] == [5]


@pytest.mark.parametrize("page", ["speed.md", "strength.md", "development.md"])
def test_a_result_page_stays_short_and_opens_with_its_results(page):
    text = (ROOT / "docs" / page).read_text()
    assert len(text.splitlines()) < 300, f"docs/{page}: the rest belongs in docs/lab/"
    first = re.findall(r"^## (.+)$", text, flags=re.M)[0]
    assert first == {"development.md": "Three layers"}.get(page, "The results")


def test_the_lab_is_one_line_from_the_home_page_and_out_of_the_navigation():
    home = (ROOT / "docs" / "index.md").read_text().splitlines()
    assert len([line for line in home if "](lab/" in line]) == 1
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert "lab/" in config["not_in_nav"].split()
    assert "lab/" not in yaml.safe_dump(config["nav"])
    assert (ROOT / "docs" / "lab" / "notebook.md").is_file()
