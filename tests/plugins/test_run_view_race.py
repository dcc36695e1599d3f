"""The file route opens a file once, without following links, and serves what it opened: a file under the root
swapped for a link to a secret outside it, again and again while requests hammer the route, never leaks the secret.

Through Airflow's real api-server app (tests/plugins/conftest.py `airflow_api`). A check-then-open route (check the
path, then open it again to send it) leaked here: with a thread swapping the file for the link by rename, the
secret came back dozens of times in a few seconds.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from mtc_provider.links.run_view import PREFIX

SECONDS = 3.0


@pytest.mark.slow
def test_a_file_swapped_for_a_link_out_of_the_root_never_serves_the_secret(home, run_dag, airflow_api):
    client, login = airflow_api
    run_folder = home / "local" / "buckets" / "b" / "e2e"
    secret = home / "simple_auth_manager_passwords.json"
    data = run_folder / "checkpoints" / "10" / "data"
    run_id = run_dag("mtc_planted_xcoms", str(run_folder / "checkpoints"))
    headers = login("alice", "mtc_planted_xcoms")
    url = f"{PREFIX}/runs/mtc_planted_xcoms/{run_id}/files/checkpoints/10/data"
    assert client.get(url, headers=headers).text == "weights"

    plain, link = data.with_name(".plain"), data.with_name(".link")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            plain.write_text("weights")
            os.replace(plain, data)  # a regular file...
            link.unlink(missing_ok=True)
            link.symlink_to(secret)
            os.replace(link, data)  # ...then, atomically, a link to the secret outside the root

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    served = leaked = 0
    try:
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            answer = client.get(url, headers=headers)
            if "s3cret" in answer.text:
                leaked += 1
            elif answer.status_code == 200:
                assert answer.text == "weights"
                served += 1
            else:
                assert answer.status_code == 404, answer.text
    finally:
        stop.set()
        swapper.join(5)
    assert leaked == 0, f"the secret leaked {leaked} times in {SECONDS} s"
    assert served > 0  # the race was run: the file was served whenever it was the file
