"""Sphinx configuration of the documentation site (MyST Markdown pages, API reference from docstrings).

    python -m sphinx -b html -W --keep-going docs docs/_build/html

The API pages import torch_xla: the build runs on JAX's CPU platform, so it needs no accelerator.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("PJRT_DEVICE", "CPU")

project = "torch_xla on JAX"
author = "torch_xla on JAX contributors"
copyright = "the torch_xla on JAX contributors"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"

# data/: the inputs of the generated pages
exclude_patterns = ["_build", "data", "**/.ipynb_checkpoints"]

# Markdown: `[text](other.md)` and `[text](other.md#a-heading)` resolve across pages
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# API reference: each module's own members (re-exports are documented where they are defined)
autodoc_default_options = {
    "members": True,
    "ignore-module-all": True,
    "show-inheritance": True,
    "member-order": "bysource",
}
autodoc_typehints = "description"
autodoc_preserve_defaults = True
autodoc_inherit_docstrings = False   # torch.autograd.Function.forward's docstring cross-references torch's own docs
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

nitpicky = False

html_theme = "alabaster"
html_title = "torch_xla on JAX"
html_static_path = ["_static"]
html_theme_options = {
    "description": "The PyTorch/XLA user API on JAX's XLA compiler and PJRT runtime",
    "fixed_sidebar": True,
    "show_relbars": True,
}
html_sidebars = {"**": ["about.html", "navigation.html", "relations.html", "searchbox.html"]}
