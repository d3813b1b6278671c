"""Reading a study's runs back from MLflow (``reader``: tidy frames of runs and histories; ``readers``:
its backends). The writing side is :mod:`workbench.tracking`; this side never writes a run.
"""
