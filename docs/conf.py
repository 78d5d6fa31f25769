"""Sphinx configuration of the airflow-provider-crew documentation site.

Build it with ``bash scripts/docs.sh`` (warnings are errors). Markdown pages are read by MyST;
code on the quick start and the how-to pages is the code of ``example_dags/`` between
``[START howto_…]`` and ``[END howto_…]`` markers, copied into the pages as literal blocks by
``scripts/howto_snippets.py`` (so GitHub shows it too), and the parameter tables are generated from
the code (``_ext/crew_reference.py``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

# Importing the provider imports Airflow: give it a throwaway home, so a build never touches a
# real AIRFLOW_HOME (or creates ~/airflow) and never reads a deployment's configuration.
os.environ.setdefault("AIRFLOW_HOME", str(DOCS / "_build" / "airflow-home"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from airflow_provider_crew import __version__  # noqa: E402

project = "airflow-provider-crew"
author = "airflow-provider-crew maintainers"
copyright = "the airflow-provider-crew maintainers"
release = __version__
version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "crew_reference",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "show-inheritance": True}
# The signatures name Airflow's and the standard library's types; do not try to resolve every one.
nitpicky = False

html_theme = "furo"
html_title = f"airflow-provider-crew {release}"
html_static_path = ["_static"]
html_css_files = ["crew.css"]
