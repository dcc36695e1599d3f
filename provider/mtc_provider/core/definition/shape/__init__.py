"""The shapes and sizes a run needs: TPU topologies, slices and hosts, the ramdisk's and the bucket's sizes, node pools, placement and reservations.

No names are re-exported here: import the module."""
