"""Sphinx extension: show each chapter's measured execution time.

``make record`` times every chapter as it re-executes it and writes ``_data/runtimes.json``;
this extension reads that file at build time, so no runtime is ever typed by hand. It adds

- a badge line under the title of every chapter page, and
- the ``runtimes-table`` directive, a table of every chapter's time (the Runtimes page).

A chapter with no recorded time is a build warning (and so, with ``-W``, an error).
"""

from __future__ import annotations

import json
from pathlib import Path

from docutils import nodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)
DATA = Path("_data") / "runtimes.json"


def _load(app) -> dict:
    path = Path(app.srcdir) / DATA
    return json.loads(path.read_text()) if path.exists() else {"machine": "", "seconds": {}}


def _describe(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


class runtimes_placeholder(nodes.General, nodes.Element):
    """Replaced by the table once every page's title is known."""


class RuntimesTable(SphinxDirective):
    def run(self):
        return [runtimes_placeholder()]


def add_badge(app, doctree) -> None:
    docname = app.env.docname
    if not docname.startswith("chapters/"):
        return
    data = _load(app)
    seconds = data["seconds"].get(Path(docname).name)
    if seconds is None:
        logger.warning(f"{docname}: no recorded runtime in {DATA} (run `make record`)",
                       location=docname)
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        return
    badge = nodes.paragraph(classes=["runtime-badge"])
    badge += nodes.emphasis(text=f"Runs top to bottom in about {_describe(seconds)} on "
                                 f"{data['machine']}, as measured by make record.")
    section.insert(1, badge)


def fill_tables(app, doctree, docname) -> None:
    data = _load(app)
    for placeholder in doctree.findall(runtimes_placeholder):
        table = nodes.table(classes=["runtimes"])
        group = nodes.tgroup(cols=2)
        table += group
        group += [nodes.colspec(colwidth=4), nodes.colspec(colwidth=1)]
        head, body = nodes.thead(), nodes.tbody()
        group += [head, body]
        head += _row("Chapter", "Time on CPU")
        for stem, seconds in data["seconds"].items():
            title = app.env.titles.get(f"chapters/{stem}")
            # The title's own nodes, not its text: chapter 2's title holds math.
            body += _row(title.deepcopy().children if title else [nodes.Text(stem)],
                         _describe(seconds))
        total = sum(data["seconds"].values())
        body += _row("Whole book", _describe(total))
        caption = nodes.paragraph(text=f"Measured on {data['machine']}.")
        placeholder.replace_self([table, caption])


def _row(*cells) -> nodes.row:
    """A table row; each cell is a string or a list of inline nodes."""
    row = nodes.row()
    for cell in cells:
        entry = nodes.entry()
        entry += nodes.paragraph("", "", *([nodes.Text(cell)] if isinstance(cell, str) else cell))
        row += entry
    return row


def setup(app):
    app.add_node(runtimes_placeholder)
    app.add_directive("runtimes-table", RuntimesTable)
    app.connect("doctree-read", add_badge)
    app.connect("doctree-resolved", fill_tables)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
