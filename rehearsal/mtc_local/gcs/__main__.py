"""`python -m mtc_local.gcs up --home HOME [--idle-seconds N]` prints the endpoint of the home's local GCS,
started in the background when it is not running; `down --home HOME` stops it. The provider starts the local GCS
this way, as a process, so nothing outside `mtc_local` imports the local target."""

from __future__ import annotations

import argparse

from mtc_local.gcs.lifecycle import ensure_running, stop


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mtc_local.gcs", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--home", required=True)
    parser.add_argument("--idle-seconds", type=float, default=0.0,
                        help="up: a server started now exits after this long without a request (0: until down)")
    args = parser.parse_args(argv)
    if args.action == "up":
        print(ensure_running(args.home, idle_seconds=args.idle_seconds), flush=True)
    else:
        print("stopped" if stop(args.home) else "not running", flush=True)


if __name__ == "__main__":
    main()
