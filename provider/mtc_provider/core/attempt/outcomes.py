"""An attempt's outcome, as the launch operator and the trigger record it in the run lock and goodput reads it.

A module of its own, free of imports, because the launch operator (loaded when a DAG file is parsed) needs the
names and the goodput machinery must not be paid on every parse.
"""

FINISHED, DISRUPTED, FAILED_OUTCOME = "finished", "disrupted", "failed"
OUTCOMES = (FINISHED, DISRUPTED, FAILED_OUTCOME)
