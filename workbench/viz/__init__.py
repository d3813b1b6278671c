"""Plotly figures and dashboards from :mod:`workbench.compare` data (drawing only).

Public surface::

    from workbench.viz import load_spec, find_spec, render_dashboard, DashboardData, SpecError
    from workbench.viz import curve_figure, summary_figure, health_matrix_figure, html_page, Section

    spec = load_spec(find_spec("health"))                   # dashboards/health.yaml, validated
    rendered = render_dashboard(spec, DashboardData(history, runs, health_events=events))
    open("health.html", "w").write(rendered.to_html())      # self-contained (plotly.js inlined)

Modules: ``style`` (colours, dashes), ``figures`` (trace and figure builders), ``spec`` (the
dashboard spec's models), ``spec_loader`` (finding and reading spec files, with file:line errors),
``dashboard`` (rendering a spec), ``html`` (pages with one inlined plotly.js), ``saved_view``
(MLflow saved views). Every number drawn comes from :mod:`workbench.compare` (panel data:
:mod:`workbench.compare.panels`); nothing here computes a statistic.
"""

from .dashboard import DashboardData, RenderedDashboard, render_dashboard
from .figures import curve_figure, health_matrix_figure, summary_figure
from .html import Section, df_table_html, html_page
from .spec import DashboardSpec, PanelSpec, SpecError
from .spec_loader import find_spec, list_specs, load_spec, parse_spec
from .style import variant_colors

__all__ = [
    "DashboardData",
    "DashboardSpec",
    "PanelSpec",
    "RenderedDashboard",
    "Section",
    "SpecError",
    "curve_figure",
    "df_table_html",
    "find_spec",
    "health_matrix_figure",
    "html_page",
    "list_specs",
    "load_spec",
    "parse_spec",
    "render_dashboard",
    "summary_figure",
    "variant_colors",
]
