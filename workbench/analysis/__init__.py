"""What the workbench decides and computes for a user, beneath both of its faces (the command line,
``workbench.cli``, and the notebook API, ``workbench.notebook``): which study a name means
(:mod:`.target`), which runs are compared (:mod:`.selection`), the comparison itself
(:mod:`.comparison`), the looks taken at a study (:mod:`.looks`), sequential design rounds
(:mod:`.sequential`), the seeds to plan (:mod:`.seed_plan`), runs × health rules (:mod:`.health_table`),
config lint (:mod:`.lint`) and the stored completions (:mod:`.rollouts`).

Every function returns a typed value and raises the project's own errors
(:class:`workbench.errors.AnalysisError` and the other ``ValueError`` subclasses of ``workbench.errors``);
none prints, and none imports the command line, typer or rich.
"""
