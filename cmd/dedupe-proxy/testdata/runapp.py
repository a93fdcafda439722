"""The app of the `run -- APP` tests: a stdlib HTTP server that writes what
happens to it, one line each, to the file RUNAPP_LOG names.

RUNAPP_ADDR    host:port to listen on
RUNAPP_EXIT    exit at once with this status, before listening
RUNAPP_HEALTH  the status GET /healthz answers (default 200)
RUNAPP_DIE     seconds after which it exits with status 4 by itself
On SIGTERM or SIGINT it writes "signal N", takes 0.3 s, writes "exited"
and exits 0, so a test can see that the signal came and was waited for.
"""

import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = os.environ["RUNAPP_LOG"]
lock = threading.Lock()


def log(line):
    with lock, open(LOG, "a") as f:
        f.write(line + "\n")


if "RUNAPP_EXIT" in os.environ:
    print("runapp: exiting at once", flush=True)
    sys.exit(int(os.environ["RUNAPP_EXIT"]))

HEALTH = int(os.environ.get("RUNAPP_HEALTH", "200"))


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(HEALTH if self.path == "/healthz" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        log("POST %s %s" % (self.path, self.headers.get("Idempotency-Key")))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def stop(signum, frame):
    log("signal %d" % signum)
    time.sleep(0.3)
    log("exited")
    os._exit(0)


def die():
    log("dying")
    os._exit(4)


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
if "RUNAPP_DIE" in os.environ:
    threading.Timer(float(os.environ["RUNAPP_DIE"]), die).start()
host, port = os.environ["RUNAPP_ADDR"].rsplit(":", 1)
server = ThreadingHTTPServer((host, int(port)), Handler)
log("started %d" % os.getpid())
print("runapp: listening on %s" % os.environ["RUNAPP_ADDR"], flush=True)
server.serve_forever()
