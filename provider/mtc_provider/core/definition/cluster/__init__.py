"""What the run asks of a cluster: readiness, whether the installed configuration matches, IAM, and how long a start may take.

No names are re-exported here: import the module."""
