"""What a run shows: the training-run page (run_page), goodput accounting (goodput) and the checkpoint-period
advisor that reads the same measurements (advisor).

May import: core.basics, core.measure, core.definition, core.attempt (the top floor: nothing in the core imports it).
No names are re-exported here: import the module.
"""
