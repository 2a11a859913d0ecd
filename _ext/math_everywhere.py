"""Sphinx extension: load MathJax on every page, not only on pages that contain math.

Chapter titles hold math (chapter 2 is "Scaling by $\\sqrt{d_k}$"), and those titles appear in
the navigation of every page; without MathJax a page with no math of its own would show them
as raw TeX.
"""


def setup(app):
    app.set_html_assets_policy("always")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
