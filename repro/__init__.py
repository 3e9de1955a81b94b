"""Library and CLI of the reproduction suite: timing, rooflines, results with provenance,
paper data, plots. Suites (``suites/``) are built from these pieces."""

__version__ = "0.1.0"
