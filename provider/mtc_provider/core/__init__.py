"""The pure core: plain dataclasses and functions. No Airflow, Kubernetes client or network imports.

Split by concern into sub-packages, each importing only those below it (type-only imports under TYPE_CHECKING
excepted; tests/test_layout.py checks it):

    basics <- measure <- definition <- attempt <- view

- basics: errors, vocabulary, names, labels (what every part shares);
- measure: how progress is measured (checkpoints, steps, the stall limit);
- definition: what the run is (the run description, its checks, sizes and manifests, the plan);
- attempt: what one try does and decides (status, resubmission, ownership, the attempt record);
- view: what a run shows (the run page, goodput, the advisor).

No module names a target kind: a kind's rules are its registry record's (core.basics.kind_rules.rules_for asks the
target registry when called; the rehearsal's faults are mtc_local.faults, reached through the local kind).

A test (tests/core/test_purity.py) imports every module here with Airflow and the clients blocked.
"""
