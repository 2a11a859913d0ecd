"""anatomy.viz.modern: the appendix's table and figure show what anatomy.modern computes, and
the lab redraws when a change is switched on."""

import matplotlib.pyplot as plt
import numpy as np
import pytest

from anatomy.modern import CHANGES, design_steps, step_costs
from anatomy.params import GPT2_SMALL
from anatomy.viz.modern import draw_steps, modern_lab, steps_table


def test_table_rows_are_the_step_costs():
    costs = step_costs(design_steps(GPT2_SMALL, h_kv=3), T=1024)
    table = steps_table(costs)
    assert [row[1] for row in table.rows] == ["GPT-2", *CHANGES]
    assert [row[2] for row in table.rows] == [s.params for s in costs]
    assert table.rows[0][3] == "" and table.rows[6][3] == f"{50_257 * 768:+,}"
    assert table.rows[4][5] == "9.0 MiB" and table.rows[3][5] == "36.0 MiB"


def test_bars_are_the_three_costs_and_changes_are_orange():
    costs = step_costs(design_steps(GPT2_SMALL, h_kv=3), T=512)
    fig = draw_steps(costs, T=512)
    params, flops, cache = fig.axes
    np.testing.assert_allclose([b.get_width() for b in params.patches],
                               [s.params / 1e6 for s in costs])
    np.testing.assert_allclose([b.get_width() for b in cache.patches],
                               [s.kv_bytes / 2**20 for s in costs])
    orange = [i for i, b in enumerate(flops.patches)
              if b.get_facecolor() == plt.matplotlib.colors.to_rgba("tab:orange")]
    assert orange == [4]                             # only GQA changes the FLOPs
    assert [t.get_text() for t in params.get_yticklabels()][-1] == "+ untied head"
    assert "T = 512" in fig._suptitle.get_text()
    plt.close(fig)


def test_lab_redraws_when_a_change_is_switched_on(monkeypatch):
    pytest.importorskip("ipywidgets")
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs: shown.extend(objs))
    modern_lab(GPT2_SMALL, h_kv=3)
    (box,) = shown
    first_row, second_row, _, picture, table = box.children
    boxes = [*first_row.children, *second_row.children]
    assert [b.description for b in boxes] == list(CHANGES)
    first = bytes(picture.value)
    assert first.startswith(b"\x89PNG") and "changes: none" in table.value
    boxes[3].value = True                            # GQA
    assert bytes(picture.value) != first and "changes: GQA" in table.value
    assert "9.0 MiB" in table.value and "36.0 MiB" in table.value
    assert plt.get_fignums() == []                   # figures are closed after rendering
