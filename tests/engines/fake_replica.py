"""A stand-in for a vLLM replica or the router in tests/engines/test_cluster.py: answers /health and
/v1/models on 127.0.0.1:PORT and keeps a child process (``sleep MARK``), as vLLM's API server keeps
its engine core. SIGTERM ends the child and the server, unless ``--stubborn`` (then only SIGKILL).

Usage: python fake_replica.py PORT MARK [--stubborn]
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

port, mark = int(sys.argv[1]), sys.argv[2]
child = subprocess.Popen(["sleep", mark])


def stop(signum: int, frame: object) -> None:
    child.terminate()
    child.wait()
    sys.exit(0)


signal.signal(signal.SIGTERM, signal.SIG_IGN if "--stubborn" in sys.argv else stop)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "k3", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


HTTPServer(("127.0.0.1", port), Handler).serve_forever()
