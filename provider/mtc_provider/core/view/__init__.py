"""What a run shows: the training-run page (run_page, with its checkpoints and interruptions in run_tiers; its row
in the runs list, run_list), goodput accounting (goodput: fine-grained timelines; run_goodput: a run's intervals,
from its ledger or its attempts) and the checkpoint-period advisor that reads the same measurements (advisor).

May import: core.basics, core.measure, core.definition, core.attempt (the top floor: nothing in the core imports it).
No names are re-exported here: import the module.
"""
