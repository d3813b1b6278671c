"""Which trainer runs a run (``engine: workbench | trl``): what each setting becomes in another trainer, or why it
cannot, as data importable without that trainer (:mod:`.trl_mapping`)."""
