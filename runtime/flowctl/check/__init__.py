"""``flowctl validate``: the checks table (:mod:`.checks`; graph checks in :mod:`.topology`,
``--import-check`` in :mod:`.callables`), the data-flow analysis (:mod:`.dataflow`, with
:mod:`.edges`, :mod:`.facts`, :mod:`.infer`, :mod:`.shapes`), diagnostics rendering (:mod:`.render`)."""
