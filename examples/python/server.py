"""An app behind dedupe-proxy that acts exactly once per message.

It records each request's Idempotency-Key under a unique constraint in the
same PostgreSQL transaction as its work (an order row and a customer
balance), so a message the proxy delivers twice — the proxy was killed
after this app answered and before it recorded the key — finds its key and
changes nothing the second time.

    LISTEN_ADDR=127.0.0.1:8080 DATABASE_URL=postgres://postgres@127.0.0.1:5432/test python3 server.py

Standard library plus psycopg2 (Debian: apt-get install python3-psycopg2;
elsewhere: pip install psycopg2-binary).

POST /orders with {"meta": {"id": "..."}, "data": {"customer_id": "c-1", "amount_cents": 1250}}:
  200 once the work is committed, or when the key was already processed (the proxy acks);
  400 for a message that can never succeed (the proxy dead-letters it at once);
  503 when the database failed or is unreachable (the proxy retries; nothing was recorded).
"""

import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg2
import psycopg2.pool

SCHEMA = """
CREATE TABLE IF NOT EXISTS processed_messages (
    idempotency_key text PRIMARY KEY,
    processed_at    timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS orders (
    id              bigserial PRIMARY KEY,
    idempotency_key text NOT NULL,
    customer_id     text NOT NULL,
    amount_cents    bigint NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS balances (
    customer_id  text PRIMARY KEY,
    total_cents  bigint NOT NULL
);
"""

MAX_CONNECTIONS = 10


class Database:
    """A connection pool that waits for a free connection.

    psycopg2's ThreadedConnectionPool raises PoolError when every
    connection is taken; the semaphore makes a request wait instead.
    """

    def __init__(self, dsn):
        self.pool = psycopg2.pool.ThreadedConnectionPool(0, MAX_CONNECTIONS, dsn, connect_timeout=5)
        self.free = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def place_order(self, key, customer_id, amount_cents):
        """Records key and does the work in one transaction.

        When key is already recorded it does nothing. Two requests with one
        key at once are serialised by the primary key: the second INSERT
        waits for the first transaction, then inserts nothing.
        """
        with self.free:
            conn = self.pool.getconn()
            broken = False
            try:
                # "with conn" commits when the block succeeds and rolls back
                # when it raises.
                with conn, conn.cursor() as cur:
                    # Under the proxy's app.timeout (10s by default), so a
                    # request the proxy gave up on rolls back.
                    cur.execute("SET LOCAL statement_timeout = '8s'")
                    cur.execute(
                        "INSERT INTO processed_messages (idempotency_key) VALUES (%s) ON CONFLICT DO NOTHING",
                        (key,),
                    )
                    if cur.rowcount == 0:
                        return {"duplicate": True}
                    cur.execute(
                        "INSERT INTO orders (idempotency_key, customer_id, amount_cents) VALUES (%s, %s, %s) RETURNING id",
                        (key, customer_id, amount_cents),
                    )
                    order_id = cur.fetchone()[0]
                    cur.execute(
                        """INSERT INTO balances (customer_id, total_cents) VALUES (%s, %s)
                           ON CONFLICT (customer_id) DO UPDATE SET total_cents = balances.total_cents + EXCLUDED.total_cents""",
                        (customer_id, amount_cents),
                    )
                return {"duplicate": False, "order_id": order_id}
            except Exception:
                # A connection that failed mid-transaction is closed, not reused.
                broken = True
                raise
            finally:
                self.pool.putconn(conn, close=broken)

    def migrate(self):
        conn = self.pool.getconn()
        try:
            with conn, conn.cursor() as cur:
                cur.execute(SCHEMA)
        finally:
            self.pool.putconn(conn)


class BadMessage(Exception):
    pass


def parse_order(body):
    try:
        msg = json.loads(body)
    except ValueError as e:
        raise BadMessage(f"body is not a JSON order: {e}") from None
    data = msg.get("data") if isinstance(msg, dict) else None
    if not isinstance(data, dict):
        data = {}
    customer, amount = data.get("customer_id"), data.get("amount_cents")
    if not isinstance(customer, str) or not customer or type(amount) is not int or amount <= 0:
        raise BadMessage("data.customer_id (non-empty) and data.amount_cents (> 0) are required")
    return customer, amount


# Requests being handled, so that SIGTERM can wait for them.
IN_FLIGHT = threading.Condition()
IN_FLIGHT.count = 0


class Handler(BaseHTTPRequestHandler):
    # Keep-alive: the proxy reuses its connections.
    protocol_version = "HTTP/1.1"
    db = None

    def do_POST(self):
        with IN_FLIGHT:
            IN_FLIGHT.count += 1
        try:
            self.post()
        finally:
            with IN_FLIGHT:
                IN_FLIGHT.count -= 1
                IN_FLIGHT.notify_all()

    def post(self):
        if self.path.split("?")[0] != "/orders":
            return self.reply(404, {"error": f"no route POST {self.path}"})
        length = int(self.headers.get("Content-Length") or 0)
        if length > 1 << 20:
            self.close_connection = True
            return self.reply(400, {"error": "body over 1 MiB"})
        body = self.rfile.read(length)
        key = self.headers.get("Idempotency-Key")
        if not key:
            # The proxy forwards a message it found no key in without one.
            # Acting on it could not be made safe, so it goes to the dead letter.
            return self.reply(400, {"error": "no Idempotency-Key header"})
        try:
            customer, amount = parse_order(body)
        except BadMessage as e:
            return self.reply(400, {"error": str(e)})
        try:
            result = self.db.place_order(key, customer, amount)
        except (psycopg2.Error, psycopg2.pool.PoolError) as e:
            # Whatever failed, the transaction did not commit (or, if COMMIT
            # itself failed, a retry finds the key): retrying is safe.
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print(f"order {key!r}: {msg}", file=sys.stderr, flush=True)
            return self.reply(503, {"error": f"database: {msg}"})
        self.reply(200, result)

    def do_GET(self):
        if self.path.split("?")[0] == "/healthz":
            # The process is up; a database outage is answered per message (503).
            return self.reply(200, {"ok": True})
        self.reply(404, {"error": f"no route GET {self.path}"})

    def reply(self, status, body):
        data = (json.dumps(body) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt, *args):
        pass  # one line per failure (above), not one per request


def main():
    host, _, port = os.environ.get("LISTEN_ADDR", "127.0.0.1:8080").rpartition(":")
    dsn = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
    Handler.db = Database(dsn)
    Handler.db.migrate()
    server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"listening on {host}:{port}", flush=True)
    server.serve_forever()
    server.server_close()
    # Let requests in flight commit or roll back before exiting (idle
    # keep-alive connections are just closed): the proxy retries whatever
    # gets no answer.
    with IN_FLIGHT:
        IN_FLIGHT.wait_for(lambda: IN_FLIGHT.count == 0, timeout=20)


if __name__ == "__main__":
    main()
