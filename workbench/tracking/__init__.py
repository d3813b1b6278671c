"""Writing to MLflow: the store and experiments (``store``), a run's metrics with outage handling
(``writer``), secrets kept out of what is written (``redact``), and a study's resume bookkeeping
(``study_runs``). Reading runs back is :mod:`workbench.results`.
"""
