"""On PYTHONPATH only for `python -m benchmarks.resubmission_e2e --profile`: span recording (benchmarks/spans.py) in
every Airflow process it starts (the task processes are forked from them), when MTC_BENCH_SPANS names the file."""

import os

if os.environ.get("MTC_BENCH_SPANS"):
    from benchmarks.spans import install

    install(os.environ["MTC_BENCH_SPANS"])
