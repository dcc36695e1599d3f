"""Local (single-machine) stand-ins for the GKE training workload and its JobSet runner."""
