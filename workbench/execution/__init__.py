"""Executing runs, one level per module: a ``run`` (preflight, one MLflow run, the RL loop), a
``study`` (its runs, resumably, under one parent run), the local process ``pool`` (``--parallel N``),
a ``worker`` (one of several processes, on any machine, sharing a study's queue), the study ``lock``,
progress (``run_progress``, ``study_progress``) and the torch ``threads`` each process gets.
"""
