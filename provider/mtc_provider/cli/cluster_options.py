"""The one connection option set of the commands that follow a run (cli.runs): where its JobSets are (a kubeconfig,
a GKE cluster, a local home, or any installed target) and where its records are (--base), and the hook a command
asks the cluster through. A read never starts a cluster: the local target's is asked only when it already runs.
"""

from __future__ import annotations

import functools
import inspect
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from mtc_provider.cli.console import USAGE_ERROR, fail
from mtc_provider.core.basics.errors import SpecError

BASE_ENV = "MTC_BASE_OUTPUT_DIRECTORY"


@dataclass(frozen=True)
class ClusterOptions:
    """Where the run's JobSets are (one of a kubeconfig, a GKE cluster, a local home) and where its records are."""

    namespace: str = "default"
    kubeconfig: Optional[Path] = None
    context: Optional[str] = None
    project: Optional[str] = None
    location: Optional[str] = None
    cluster: Optional[str] = None
    gcp_conn_id: str = "google_cloud_default"
    local_home: Optional[Path] = None
    target: Optional[str] = None
    base: Optional[str] = None

    @property
    def cluster_given(self) -> bool:
        return bool(self.kubeconfig or self.project or self.location or self.cluster or self.local_home
                    or self.target or os.environ.get("KUBECONFIG"))

    def target_dict(self) -> dict[str, Any]:
        """--target as a dict: inline JSON or YAML, or @FILE; SpecError naming --target when it is neither a mapping
        with a `kind` nor a kind the registry has (targets.kinds(): the built-in ones and those of entry points)."""
        import yaml

        from mtc_provider import targets

        text = str(self.target)
        if text.startswith("@"):
            try:
                text = Path(text[1:]).expanduser().read_text()
            except OSError as exc:
                raise SpecError("--target", self.target, f"@FILE naming a readable file ({exc.strerror})") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            data = None
        if not isinstance(data, dict) or not data.get("kind"):
            raise SpecError("--target", self.target, 'a target as a JSON or YAML mapping with its kind, e.g. '
                            '\'{"kind": "local", "home": "~/.mtc-local"}\', or @FILE holding one')
        if data["kind"] not in targets.kinds():
            raise SpecError("--target", data["kind"], "an installed target kind: " + " or ".join(targets.kinds()))
        return data

    def hook(self) -> Any:
        """The MtcJobSetHook for these options; SpecError naming the option when they do not fit together."""
        from mtc_provider.hooks.jobset import MtcJobSetHook

        gke = [value for value in (self.project, self.location, self.cluster) if value]
        if gke and len(gke) < 3:
            raise SpecError("--project/--location/--cluster", gke, "all three, to read the run from a GKE cluster")
        if sum(bool(x) for x in (gke, self.kubeconfig, self.local_home, self.target)) > 1:
            raise SpecError("--kubeconfig", str(self.kubeconfig), "one of --kubeconfig, --project/--location/--cluster, "
                            "--local-home or --target")
        if self.target:  # any installed kind, a kind registered by an entry point included
            return MtcJobSetHook(target={"namespace": self.namespace, **self.target_dict()})
        if gke:
            return MtcJobSetHook(target={"kind": "gke", "project_id": self.project, "location": self.location,
                                         "cluster_name": self.cluster, "gcp_conn_id": self.gcp_conn_id,
                                         "namespace": self.namespace})
        if self.local_home:
            return MtcJobSetHook(target={"kind": "local", "home": str(self.local_home), "namespace": self.namespace})
        path = self.kubeconfig or Path(os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
                                       or Path.home() / ".kube" / "config")
        if not path.is_file():
            raise SpecError("--kubeconfig", str(path), "an existing kubeconfig file, or --project/--location/"
                            "--cluster, or --local-home")
        return MtcJobSetHook(kubeconfig=str(path), context=self.context,
                             target={"kind": "local", "namespace": self.namespace})

    def bases(self) -> list[str]:
        """Where run records are looked for: --base (or $MTC_BASE_OUTPUT_DIRECTORY); with --local-home and no base,
        each of the home's bucket folders (where the training DAG puts a local run: <home>/buckets/<bucket>)."""
        if self.base:
            return [self.base]
        if self.local_home:
            buckets = Path(self.local_home).expanduser() / "buckets"
            return sorted(str(p) for p in buckets.iterdir() if p.is_dir()) if buckets.is_dir() else []
        return []

    def absolute(self) -> "ClusterOptions":
        """The options with --local-home and a local --base made absolute (relative to the current directory, `~`
        expanded), as every reader below needs them; SpecError naming --base for a URL no reader takes."""
        base = self.base
        if base and "://" not in base:
            base = str(Path(base).expanduser().resolve())
        elif base and not base.startswith(("gs://", "file:///")):
            raise SpecError("--base", base, "gs://BUCKET/PATH, or a local path (absolute, or relative to the current "
                            f"directory); also read from ${BASE_ENV}")
        home = Path(self.local_home).expanduser().resolve() if self.local_home else None
        return replace(self, base=base, local_home=home)


_OPTIONS: list[tuple[str, Any, Any]] = [
    ("namespace", str, typer.Option("default", "--namespace", "-n", help="The JobSets' namespace.")),
    ("kubeconfig", Optional[Path], typer.Option(None, "--kubeconfig", help="A kubeconfig file (e.g. from gcloud "
                                                "container clusters get-credentials); default: $KUBECONFIG or "
                                                "~/.kube/config.")),
    ("context", Optional[str], typer.Option(None, "--context", help="The kubeconfig context (default: its current "
                                            "context).")),
    ("project", Optional[str], typer.Option(None, "--project", help="GKE instead of a kubeconfig: the cluster's "
                                            "project.")),
    ("location", Optional[str], typer.Option(None, "--location", help="GKE: the cluster's region or zone.")),
    ("cluster", Optional[str], typer.Option(None, "--cluster", help="GKE: the cluster's name.")),
    ("gcp_conn_id", str, typer.Option("google_cloud_default", "--gcp-conn-id", help="GKE and GCS: the Airflow "
                                      "connection.")),
    ("local_home", Optional[Path], typer.Option(None, "--local-home", help="The local target's home instead of a "
                                                "cluster.")),
    ("target", Optional[str], typer.Option(None, "--target", help="Any installed target kind (one registered by an "
                                           "entry point included): the target as the DAG gives it, JSON or YAML "
                                           "inline or @FILE, e.g. '{\"kind\": \"local\", \"home\": \"/srv/mtc\"}'.")),
]
_BASE = ("base", Optional[str], typer.Option(None, "--base", envvar=BASE_ENV, help="The runs' "
                                             "base_output_directory (gs://BUCKET/PATH or a local path), where "
                                             "each run's record is kept: <base>/<run_name>/mtc-attempts.json; "
                                             "default: $MTC_BASE_OUTPUT_DIRECTORY; with --local-home, its buckets."))


def cluster_options(records: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the connection options (and --base when `records`) to a command; it receives them as `options`."""
    extra = _OPTIONS + ([_BASE] if records else [])

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command)
        own = [p for p in signature.parameters.values() if p.name != "options"]
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
                 for name, kind, option in extra]

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                options = ClusterOptions(**{name: kwargs.pop(name) for name, _, _ in extra}).absolute()
            except SpecError as exc:
                fail(str(exc), USAGE_ERROR)
            return command(*args, options=options, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=own + added)  # what typer reads
        hints = {p.name: p.annotation for p in own}
        wrapper.__annotations__ = {**hints, **{name: kind for name, kind, _ in extra}}
        return wrapper

    return decorate


def guarded_hook(options: ClusterOptions) -> Any:
    try:
        return options.hook()
    except SpecError as exc:
        fail(str(exc), USAGE_ERROR)


def running_local_kubeconfig(home: Path) -> Path | None:
    """The kubeconfig of the local target's cluster when its API server answers, else None: a read never starts
    the cluster (`mtc local up` does; a stopped cluster has no live JobSet, and its runs' records are files)."""
    import socket
    from urllib.parse import urlparse

    import yaml

    path = Path(home) / "kubeconfig"
    try:
        url = urlparse(yaml.safe_load(path.read_text())["clusters"][0]["cluster"]["server"])
        with socket.create_connection((url.hostname, url.port or 443), timeout=2):
            return path
    except (OSError, KeyError, IndexError, TypeError, ValueError, yaml.YAMLError):
        return None


def reader_hook(options: ClusterOptions) -> Any:
    """The hook a read asks the cluster through, or None when there is nothing running to ask: with --local-home,
    the home's cluster through its kubeconfig when it runs (never started by a read); else as `_hook_if_cluster`."""
    if options.local_home:
        kubeconfig = running_local_kubeconfig(options.local_home)
        return guarded_hook(replace(options, local_home=None, kubeconfig=kubeconfig)) if kubeconfig else None
    return _hook_if_cluster(options)


def _hook_if_cluster(options: ClusterOptions) -> Any:
    """The hook when a cluster is named (or no base is: then the default kubeconfig is the cluster)."""
    if options.cluster_given or not options.bases():
        return guarded_hook(options)
    return None
