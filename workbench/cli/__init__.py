"""The ``workbench`` command line, one module per job.

* ``main``: the Typer app, ``plan``/``run``/``worker``/``metrics``/``ui`` and the registration of the rest;
* ``report_commands``: registers ``health``, ``compare``, ``dashboard`` (``health``, ``report``);
* ``search``: ``tune``; ``importers``: ``import``; ``algorithms``: ``algorithms`` (presets and citations);
* ``common``: what the report commands share (a study's runs, read back); ``lint``: ``plan``'s advice;
* ``errors``: unexpected errors as one line; ``output``: the consoles and ``fail``; ``console``: rich tables.

Only this package talks to the terminal; everything below it returns values or raises.
"""
