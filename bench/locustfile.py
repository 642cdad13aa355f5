"""Locust load test of sshapi's study route, POST /sshapi/v2/{name}, as the SSH-API study ran it.

    make bench-locust-deps
    SSHAPI_TOKEN=... SSHAPI_SYSTEM=hpc bench/.venv/bin/locust -f bench/locustfile.py \
        --host http://127.0.0.1:8080 --headless --users 90 --spawn-rate 30 --run-time 60s

Each simulated user sends SSHAPI_USER_RATE requests per second (default 1), so --users 90 offers
about 90 requests/s. Environment: SSHAPI_TOKEN (required), SSHAPI_SYSTEM (the named credential,
default "hpc"), SSHAPI_COMMAND (default "uptime").

Locust users are closed loops: a user waits for its response before sending again, so a slow
server lowers the offered rate and its queueing does not show in the percentiles (coordinated
omission). `sshapi bench commands` schedules requests open loop and times them from their
scheduled send; prefer it for numbers, and use this file to compare with the study's method.
"""

import os

from locust import HttpUser, constant_throughput, task

TOKEN = os.environ.get("SSHAPI_TOKEN", "")
NAME = os.environ.get("SSHAPI_SYSTEM", "hpc")
COMMAND = os.environ.get("SSHAPI_COMMAND", "uptime")
USER_RATE = float(os.environ.get("SSHAPI_USER_RATE", "1"))


class StudyUser(HttpUser):
    """One gateway user running COMMAND through the study's route at USER_RATE per second."""

    wait_time = constant_throughput(USER_RATE)

    def on_start(self):
        if not TOKEN:
            raise RuntimeError("set SSHAPI_TOKEN to a bearer token (sshapi token --user NAME)")
        self.client.headers["Authorization"] = "Bearer " + TOKEN

    @task
    def run_command(self):
        with self.client.post("/sshapi/v2/" + NAME, json={"command": COMMAND}, name="/sshapi/v2/{name}",
                              catch_response=True) as resp:
            if resp.status_code != 200:
                resp.failure("HTTP %d" % resp.status_code)
                return
            status = resp.json().get("exit_status")
            if status != 0:
                resp.failure("exit %s" % status)
