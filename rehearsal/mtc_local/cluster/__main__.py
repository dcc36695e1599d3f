"""`python -m mtc_local.cluster up|down --home DIR [--stay]`: start (and wait for) or stop a home's local
cluster. The provider and `mtc local` run this as a process, so nothing outside the local target imports it."""

from __future__ import annotations

import argparse
import sys

from mtc_local.cluster.lifecycle import ClusterUnavailable, ensure_running, stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtc_local.cluster")
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("--home", required=True)
    parser.add_argument("--stay", action="store_true", help="up: stay up when idle, until down")
    args = parser.parse_args(argv)
    if args.action == "down":
        print(f"stopped the local cluster of {args.home}" if stop(args.home)
              else f"no local cluster runs for {args.home}")
        return 0
    try:
        print(f"kubeconfig: {ensure_running(args.home, stay=args.stay)}")
    except ClusterUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
