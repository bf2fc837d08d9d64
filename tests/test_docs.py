"""The README and the manual's pages: every relative link resolves (a file, and a heading
for an anchor, as mkdocs and GitHub make them), every page is in `mkdocs.yml`'s nav, and the
README stays short."""

from __future__ import annotations

import argparse
import itertools
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """A heading's anchor as Python-Markdown's `toc` (mkdocs) and GitHub make it."""
    text = unicodedata.normalize("NFKD", heading).replace("`", "")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(line.lstrip("#").strip()) for line in text.splitlines() if line.startswith("#")}


def _links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    return [a or b for a, b in LINK.findall(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in _links(page):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:: not ours to check offline
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(target)
    assert broken == []


def test_every_page_is_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text()
    listed = set(re.findall(r"([\w-]+\.md)", config))
    assert {p.name for p in DOCS.glob("*.md")} == listed


def test_the_readme_is_short_and_starts_with_what_to_run():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250
    first = "\n".join(lines[:100])
    for command in ("pip install", "emitter-filter demo", ".venv/bin/python -m pytest"):
        assert command in first, command


def _cli_commands(parser=None, prefix=()):
    """(words, parser) of every command of `emitter-filter`, read from the parser itself, so
    that a command or flag added later must be documented too."""
    import argparse

    from emitter_filter import cli

    parser = parser or cli._build_parser()
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _cli_commands(sub, (*prefix, name))


def _flags(parser) -> list[tuple[str, ...]]:
    """Its options as --help lists them (each with its other spellings), but -h and -v, said
    once in errors.md, and the old spellings --help hides (errors.md's renamed options)."""
    return [
        tuple(action.option_strings)
        for action in parser._actions
        if action.option_strings
        and action.help != argparse.SUPPRESS
        and not {"-h", "-v"} & set(action.option_strings)
    ]


@pytest.mark.parametrize(
    "words, parser",
    list(_cli_commands()),
    ids=lambda w: " ".join(w) if isinstance(w, tuple) else "",
)
def test_every_command_and_flag_in_help_is_on_a_page_about_it(words, parser):
    command = " ".join(("emitter-filter", *words))
    pages = [p.read_text() for p in DOCS.glob("*.md")]
    about = [text for text in pages if command in text]
    assert about, f"no page of docs/ shows `{command}`"
    missing = [
        flags[-1]
        for flags in _flags(parser)
        if not any(
            re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)
            for flag in flags
            for text in about
        )
    ]
    assert missing == [], f"{command}: not on a page that shows it: {missing}"


def test_the_site_is_browsable_from_disk_and_fetches_nothing():
    config = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^use_directory_urls: false$", config, re.M)  # page.html, not page/
    assert re.search(r"^  highlightjs: false$", config, re.M)  # the theme loads it from a CDN
    # mkdocs' search runs in a web worker that reads its index: refused from file://.
    assert re.search(r"^plugins: \[\]$", config, re.M)
    assert re.search(r"^hooks:\n  - mkdocs_hooks.py$", config, re.M)


def test_the_404_page_links_relative_to_where_it_is():
    """mkdocs writes 404.html with root-absolute links; the hook makes them relative."""
    import mkdocs_hooks

    built = (
        '<link href="/css/base.css" rel="stylesheet"><a href="/install.html">'
        '<script src="/js/base.js"></script><a href="https://example.org/">'
        '<script>var base_url = "/",</script>'
    )
    assert mkdocs_hooks.on_post_template(built, "404.html", None) == (
        '<link href="css/base.css" rel="stylesheet"><a href="install.html">'
        '<script src="js/base.js"></script><a href="https://example.org/">'
        '<script>var base_url = ".",</script>'
    )
    assert mkdocs_hooks.on_post_template(built, "sitemap.xml", None) == built


def test_the_built_site_links_pages_as_files_and_loads_nothing_from_the_network(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    import subprocess
    import sys

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=ROOT,
        check=True,
    )
    index = (site / "index.html").read_text()
    assert 'href="install.html"' in index
    fetched = [
        m
        for page in site.rglob("*.html")
        for m in re.findall(
            r'<(?:script|img|link)[^>]*(?:src|href)="(https?:[^"]+)"', page.read_text()
        )
    ]
    assert fetched == []
    root_absolute = [
        (page.name, m)
        for page in site.rglob("*.html")
        for m in re.findall(r'(?:src|href)="(/[^/"][^"]*)"', page.read_text())
    ]
    assert root_absolute == []  # 404.html too: every page opens from disk
    assert not (site / "search").exists()
    assert not [p.name for p in site.rglob("*.html") if "mkdocs-search-query" in p.read_text()]


def _documented_invocations():
    """(page, words, flags) of every `emitter-filter COMMAND ...` a page shows, up to the end
    of its line or code span; errors.md, which lists the old spellings, aside."""
    commands = {words: parser for words, parser in _cli_commands() if words}
    for page in PAGES:
        if page.name == "errors.md":
            continue
        for match in re.finditer(r"emitter-filter ([^`\n|]*)", page.read_text()):
            tokens = match[1].split()
            words = next((tuple(tokens[:n]) for n in (2, 1) if tuple(tokens[:n]) in commands), None)
            if words is None:
                continue
            rest = tokens[len(words) :]
            if words == ("run",):  # what follows the script or -m MODULE is the script's
                rest = rest[
                    : next((i for i, t in enumerate(rest) if t == "-m" or ".py" in t), None)
                ]
            flags = re.findall(r"(?<![\w-])(--[a-z][\w-]*)", " ".join(rest))
            yield page.name, words, commands[words], flags


def test_every_flag_the_pages_give_a_command_is_one_its_help_lists():
    wrong = sorted(
        {
            (page, " ".join(words), flag)
            for page, words, parser, flags in _documented_invocations()
            for flag in flags
            if flag not in {"--help", "--verbose", *(f for fs in _flags(parser) for f in fs)}
        }
    )
    assert wrong == []


def test_the_pages_name_the_old_ptd_option_only_where_they_send_to_its_renaming():
    """`--ptd` was the input data file (now `--data`) and an output (now `--ptd-out`)."""
    stale = [
        (page.name, line)
        for page in PAGES
        if page.name != "errors.md"
        for line, after in itertools.pairwise([*page.read_text().splitlines(), ""])
        if re.search(r"--ptd(?![\w-])", line) and "errors.md#renamed-options" not in line + after
    ]
    assert stale == []


def _nav_pages() -> list[str]:
    return re.findall(r"^  - [^:]+: ([\w-]+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M)


def test_the_readme_and_the_index_list_every_page_of_the_nav():
    readme = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", (ROOT / "README.md").read_text()))
    index = set(re.findall(r"\]\(([\w-]+\.md)\)", (DOCS / "index.md").read_text()))
    pages = set(_nav_pages()) - {"index.md"}
    assert (pages - readme, pages - index) == (set(), set())


def test_the_readme_names_every_pre_commit_hook_and_every_python_ci_runs():
    readme = " ".join((ROOT / "README.md").read_text().split())
    hooks = re.findall(r"^- id: (\S+)$", (ROOT / ".pre-commit-hooks.yaml").read_text(), re.M)
    assert [hook for hook in hooks if f"`{hook}`" not in readme] == []
    tested = re.search(r"Python 3\.10 or newer \(tested: ([^)]*)\)", readme)
    assert tested, "the README says which Pythons are tested"
    pythons = set(re.findall(r"python(3\.\d+)", (ROOT / ".ci" / "run").read_text()))
    assert [v for v in sorted(pythons) if v not in tested[1]] == []


def _synopses():
    """(page, words, text) of each synopsis a page gives: an indented `emitter-filter COMMAND`
    line and the indented `[...]` lines under it."""
    commands = {words for words, _ in _cli_commands() if words}
    for page in sorted(DOCS.glob("*.md")):
        lines = page.read_text().splitlines()
        for n, line in enumerate(lines):
            match = re.match(r"^    emitter-filter ((?:[a-z]+ ?){1,2})", line)
            if not match:
                continue
            tokens = tuple(match[1].split())
            words = next((tokens[:k] for k in (2, 1) if tokens[:k] in commands), None)
            if words is None:
                continue
            block = [line]
            for more in lines[n + 1 :]:
                if not re.match(r"^ {8,}\[", more):
                    break
                block.append(more)
            yield page.name, words, "\n".join(block)


def test_each_synopsis_lists_every_option_of_its_commands_help():
    parsers = dict(_cli_commands())
    seen = list(_synopses())
    assert seen, "the pages give synopses"
    differ = {}
    for page, words, text in seen:
        given = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", text))
        listed = {flags[-1] for flags in _flags(parsers[words])}
        spelled = {f for flags in _flags(parsers[words]) for f in flags}
        missing = {f for f in listed if not any(s in given for s in _spellings(parsers[words], f))}
        unknown = given - spelled - {"-v"}
        if missing or unknown:
            differ[f"{page}: {' '.join(words)}"] = (sorted(missing), sorted(unknown))
    assert differ == {}


def _spellings(parser, flag: str) -> tuple[str, ...]:
    return next(flags for flags in _flags(parser) if flag in flags)
