"""The pure core: plain dataclasses and functions. No Airflow, Kubernetes client or network imports.

Split by concern into sub-packages, each importing only those below it (type-only imports under TYPE_CHECKING
excepted; tests/test_layout.py checks it):

    basics <- measure <- definition <- attempt <- view

- basics: errors, vocabulary, names, labels (what every part shares);
- measure: how progress is measured (checkpoints, steps, the stall limit);
- definition: what the run is (the run description, its checks, sizes and manifests, the plan);
- attempt: what one try does and decides (status, resubmission, ownership, the attempt record);
- view: what a run shows (the run page, goodput, the advisor).

fault_plan, fault_fields and fault_report (the rehearsal's faults) still stand here, on their way to mtc_local.

A test (tests/core/test_purity.py) imports every module here with Airflow and the clients blocked.
"""
