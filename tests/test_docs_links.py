"""docs/check_links.py, the link check of the built documentation site that CI runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

CHECKER = Path(__file__).resolve().parents[1] / "docs" / "check_links.py"


@pytest.fixture(scope="module")
def check_links():
    spec = importlib.util.spec_from_file_location("check_links", CHECKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _site(root: Path) -> Path:
    """A tiny built site: a page with one good link of each kind and one dead link."""
    (root / "guide").mkdir(parents=True)
    (root / "results" / "scale").mkdir(parents=True)
    (root / "results" / "scale" / "index.html").write_text("<p>scale</p>")
    (root / "results" / "scale" / "scale.png").write_bytes(b"\x89PNG")
    (root / "index.html").write_text("<a href='guide/'>guide</a>")
    (root / "guide" / "index.html").write_text(
        '<link href="../css/missing.css" rel="stylesheet">'
        '<a href="../results/scale/#table">a folder with its index.html, a fragment</a>'
        '<img src="../results/scale/scale.png?v=1" alt="a file, a query">'
        '<a href="#top">this page</a> <a href="https://example.org/x">another site</a>'
        '<a href="mailto:a@b.c">mail</a>')
    return root


def test_reports_exactly_the_dead_link(check_links, tmp_path):
    site = _site(tmp_path / "site")
    assert check_links.dead_links(site) == [("guide/index.html", "../css/missing.css")]


def test_main_lists_the_dead_link_and_fails(check_links, tmp_path, capsys):
    site = _site(tmp_path / "site")
    assert check_links.main([str(site)]) == 1
    assert capsys.readouterr().out == "guide/index.html: ../css/missing.css\n"
    (site / "css").mkdir()
    (site / "css" / "missing.css").write_text("")
    assert check_links.main([str(site)]) == 0


def test_links_out_of_the_site_and_folders_without_an_index_are_dead(check_links, tmp_path):
    site = tmp_path / "site"
    (site / "results" / "plan").mkdir(parents=True)
    (tmp_path / "outside.html").write_text("")
    (site / "index.html").write_text('<a href="../outside.html">x</a><a href="results/plan/">y</a>')
    assert check_links.dead_links(site) == [("index.html", "../outside.html"),
                                            ("index.html", "results/plan/")]
