// An app behind dedupe-proxy that acts exactly once per message: it records
// each request's Idempotency-Key under a unique constraint in the same
// PostgreSQL transaction as its work (an order row and a customer
// balance), so a message the proxy delivers twice — the proxy was killed
// after this app answered and before it recorded the key — finds its key
// and changes nothing the second time.
//
//   LISTEN_ADDR=127.0.0.1:8080 DATABASE_URL=postgres://postgres@127.0.0.1:5432/test node server.js
//
// POST /orders with {"meta": {"id": "..."}, "data": {"customer_id": "c-1", "amount_cents": 1250}}:
//   200 once the work is committed, or when the key was already processed (the proxy acks);
//   400 for a message that can never succeed (the proxy dead-letters it at once);
//   503 when the database failed or is unreachable (the proxy retries; nothing was recorded).
'use strict';

const http = require('node:http');
const { Pool } = require('pg');

const SCHEMA = `
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
);`;

const [host, port] = splitAddr(process.env.LISTEN_ADDR || '127.0.0.1:8080');
const pool = new Pool({
  connectionString: process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test',
  max: 10,
  connectionTimeoutMillis: 5000,
  // Keep a request's work under the proxy's app.timeout (10s by default),
  // so a request the proxy gave up on rolls back rather than commits unseen.
  statement_timeout: 8000,
});
// An idle connection the database dropped must not crash the process: the
// pool discards it, and the next request gets a new one.
pool.on('error', (err) => console.error(`idle database connection: ${err.message}`));

class BadMessage extends Error {}

function parseOrder(body) {
  let msg;
  try {
    msg = JSON.parse(body);
  } catch (err) {
    throw new BadMessage(`body is not a JSON order: ${err.message}`);
  }
  const data = msg && msg.data;
  if (!data || typeof data.customer_id !== 'string' || data.customer_id === '' ||
      !Number.isSafeInteger(data.amount_cents) || data.amount_cents <= 0) {
    throw new BadMessage('data.customer_id (non-empty) and data.amount_cents (> 0) are required');
  }
  return { customerId: data.customer_id, amountCents: data.amount_cents };
}

// placeOrder records key and does the work in one transaction; when key is
// already recorded it does nothing. Two requests with one key at once are
// serialised by the primary key: the second INSERT waits for the first
// transaction, then inserts nothing.
async function placeOrder(key, { customerId, amountCents }) {
  const client = await pool.connect();
  // A checked-out client whose connection drops emits 'error' besides
  // failing its query; unheard, that event would crash the process.
  let broken;
  const onError = (err) => { broken = err; };
  client.on('error', onError);
  try {
    await client.query('BEGIN');
    const rec = await client.query(
      'INSERT INTO processed_messages (idempotency_key) VALUES ($1) ON CONFLICT DO NOTHING', [key]);
    if (rec.rowCount === 0) {
      await client.query('ROLLBACK');
      return { duplicate: true };
    }
    const ins = await client.query(
      'INSERT INTO orders (idempotency_key, customer_id, amount_cents) VALUES ($1, $2, $3) RETURNING id',
      [key, customerId, amountCents]);
    await client.query(
      `INSERT INTO balances (customer_id, total_cents) VALUES ($1, $2)
       ON CONFLICT (customer_id) DO UPDATE SET total_cents = balances.total_cents + EXCLUDED.total_cents`,
      [customerId, amountCents]);
    await client.query('COMMIT');
    return { duplicate: false, order_id: Number(ins.rows[0].id) };
  } catch (err) {
    broken = err;
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.off('error', onError);
    // A connection that failed mid-transaction is closed, not reused.
    client.release(broken);
  }
}

function reply(res, status, body) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body) + '\n');
}

async function handleOrder(req, res) {
  const key = req.headers['idempotency-key'];
  if (!key) {
    // The proxy forwards a message it found no key in without one. Acting
    // on it could not be made safe, so it goes to the dead letter.
    return reply(res, 400, { error: 'no Idempotency-Key header' });
  }
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 1 << 20) return reply(res, 400, { error: 'body over 1 MiB' });
    chunks.push(chunk);
  }
  let order;
  try {
    order = parseOrder(Buffer.concat(chunks).toString('utf8'));
  } catch (err) {
    return reply(res, 400, { error: err.message });
  }
  try {
    reply(res, 200, await placeOrder(key, order));
  } catch (err) {
    // Whatever failed, the transaction did not commit (or, if COMMIT itself
    // failed, a retry finds the key): retrying is safe.
    console.error(`order ${JSON.stringify(key)}: ${err.message}`);
    reply(res, 503, { error: `database: ${err.message}` });
  }
}

// Requests being handled, so that SIGTERM can wait for them and no longer.
let inFlight = 0;
let stopping = false;

const server = http.createServer((req, res) => {
  inFlight++;
  res.on('close', () => {
    inFlight--;
    if (stopping) closeWhenDrained();
  });
  const path = req.url.split('?')[0];
  if (req.method === 'POST' && path === '/orders') {
    handleOrder(req, res).catch((err) => reply(res, 503, { error: err.message }));
  } else if (req.method === 'GET' && path === '/healthz') {
    // The process is up; a database outage is answered per message (503).
    res.end('ok\n');
  } else {
    reply(res, 404, { error: `no route ${req.method} ${path}` });
  }
});

function splitAddr(addr) {
  const i = addr.lastIndexOf(':');
  return [addr.slice(0, i) || '0.0.0.0', Number(addr.slice(i + 1))];
}

async function main() {
  await pool.query(SCHEMA);
  server.listen(port, host, () => console.log(`listening on ${host}:${port}`));
  // Let requests in flight commit or roll back before exiting: the proxy
  // retries whatever gets no answer.
  process.on('SIGTERM', () => {
    stopping = true;
    server.close(() => pool.end().then(() => process.exit(0)));
    closeWhenDrained();
  });
}

// server.close() waits for every open connection, and a client may hold
// one it has not sent a request on yet (Go's HTTP client dials ahead), which
// Node does not count as idle: once no request is in flight, close them all.
function closeWhenDrained() {
  if (inFlight === 0) server.closeAllConnections();
}

main().catch((err) => {
  console.error(`start: ${err.message}`);
  process.exit(1);
});
