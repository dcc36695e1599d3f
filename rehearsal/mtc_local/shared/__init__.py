"""What the local cluster (mtc_local.cluster: API server, store, controller) and the local runner
(mtc_local.runner: processes, faults) share about a home: its files and their atomic reads and writes (state.py) and
who may talk to its servers (auth.py: the home's token and private folders; clients read the token through
mtc_local.token). Both rooms import this one; neither imports the other's internals back (the supervisor,
mtc_local.supervisor, is the one process that puts them together)."""
