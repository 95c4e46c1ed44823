"""A small autoheal for the tests, run in the python test image with the engine socket mounted.

Like willfarrell/autoheal it watches the containers labelled ``$AUTOHEAL_CONTAINER_LABEL=true``
through the engine socket; it restarts those that are unhealthy or have exited, so a container
that drains and exits while this sidecar still runs is resurrected.
"""

import http.client
import json
import os
import socket
import sys
import time
import urllib.parse

SOCK = os.environ.get("DOCKER_SOCK", "/var/run/docker.sock")
LABEL = os.environ.get("AUTOHEAL_CONTAINER_LABEL", "autoheal")
INTERVAL = float(os.environ.get("AUTOHEAL_INTERVAL", "1"))


class UnixConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(SOCK)


def call(method: str, path: str) -> object:
    conn = UnixConnection("engine")
    conn.request(method, path)
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return json.loads(body) if body.strip() else None


filters = urllib.parse.quote(json.dumps({"label": [f"{LABEL}=true"]}))
while True:
    try:
        for c in call("GET", f"/containers/json?all=1&filters={filters}") or []:
            status = c.get("Status", "")
            if c.get("State") == "exited" or "(unhealthy)" in status:
                print("restarting", c["Names"][0], status, flush=True)
                call("POST", f"/containers/{c['Id']}/restart?t=0")
    except OSError as exc:
        print("engine error:", exc, file=sys.stderr, flush=True)
    time.sleep(INTERVAL)
