"""Figures and interactive labs for the chapters.

matplotlib and ipywidgets are imported here and nowhere else in the library, so the numerical
modules stay importable with NumPy alone. Each lab draws with the same function as the static
figure beside it, so the web page and the live widget cannot disagree.
"""
