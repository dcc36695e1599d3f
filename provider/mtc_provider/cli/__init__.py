"""The `mtc` command line, in layers with no circle:

- `app` the typer app: the planning commands (size, plan, render, advise), `unlock`, `local`; it adds the others;
- `runs` a run's life from a terminal (list, status, logs, delete);
- `cluster_options` the one connection option set (where a run's JobSets and records are) and the hook it gives;
- `submit` `mtc run`: trigger the training DAG through Airflow's REST API;
- `airflow_api` the few calls of Airflow's REST API the CLI makes;
- `console` the bottom: consoles, exit codes, output formats, reading a run description's file.

Each imports only the ones below it (app -> runs -> cluster_options, submit -> airflow_api, console). Nothing is
imported here, so `import mtc_provider.cli.console` stays light; the entry point is `mtc_provider.cli.app:app`.
"""
