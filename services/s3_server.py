"""An S3 API server on loopback, moto's server mode: the DFS of the crash soak's and the tests' ``s3://`` runs."""

from __future__ import annotations

import logging
from typing import Any

#: moto's test credentials and region: with the endpoint, what boto3 and s3fs read from the environment.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def start_s3_server() -> tuple[Any, dict[str, str]]:
    """moto's S3 server, started on a free loopback port, and the environment that points boto3 and s3fs at it (the
    credentials and ``AWS_ENDPOINT_URL``); the caller stops the server. It needs ``moto[server]`` (the test extra):
    without it, an ImportError."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # not a line per S3 request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, {**CREDENTIALS, "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
