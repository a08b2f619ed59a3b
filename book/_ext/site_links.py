"""Sphinx extension of this book: links to the hosted chapters stay inside the site built.

A chapter opened on its own (in Colab, or a copied notebook) has no other chapters beside it,
so its links to them name the hosted book: ``<html.baseurl>book/<chapter>.html``, with
``html.baseurl`` set in ``_config.yml``. In a site built from the repository (a local build,
a preview of a branch) those links should lead to the pages of that same build: this turns
each one into a relative link to the page it names, anchor kept.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes


def _keep_links_inside(app: Any, doctree: nodes.document, docname: str) -> None:
    base = (app.config.html_baseurl or "").rstrip("/") + "/"
    if base == "/":
        return
    for reference in doctree.findall(nodes.reference):
        uri = reference.get("refuri", "")
        if not uri.startswith(base):
            continue
        page, _, anchor = uri[len(base) :].partition("#")
        page = page.removesuffix(".html")
        if page in app.env.found_docs:
            relative = app.builder.get_relative_uri(docname, page)
            reference["refuri"] = relative + (f"#{anchor}" if anchor else "")
            reference["internal"] = True


def setup(app: Any) -> dict[str, Any]:
    app.connect("doctree-resolved", _keep_links_inside)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
