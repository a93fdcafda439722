// Signs events with the senders' own libraries and POSTs them to the
// listener under test, the way each sender does: Svix with its svix-*
// headers, a Standard Webhooks sender with webhook-* headers. A tampered
// case signs one body and sends another. Prints one JSON line per case:
// {"name", "id", "status"}.
//
// usage: node send.mjs <url> <whsec_ secret>
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const svix = require("svix");
const standard = require("standardwebhooks");

const [url, secret] = process.argv.slice(2);
if (!url || !secret) {
  console.error("usage: node send.mjs <url> <whsec_ secret>");
  process.exit(2);
}

const signers = {
  svix: { lib: new svix.Webhook(secret), prefix: "svix" },
  standardwebhooks: { lib: new standard.Webhook(secret), prefix: "webhook" },
};

async function send(name, signer, tamper) {
  const id = `msg_${name}_${tamper ? "tampered" : "ok"}_${Date.now()}`;
  const payload = JSON.stringify({ type: "invoice.paid", data: { id, amount: 4200 } });
  const now = new Date();
  const signature = signer.lib.sign(id, now, payload);
  const body = tamper ? payload.replace("4200", "4201") : payload;
  const res = await fetch(url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      [`${signer.prefix}-id`]: id,
      [`${signer.prefix}-timestamp`]: String(Math.floor(now.getTime() / 1000)),
      [`${signer.prefix}-signature`]: signature,
    },
    body,
  });
  await res.text();
  console.log(JSON.stringify({ name: tamper ? `${name}-tampered` : name, id, status: res.status }));
}

for (const [name, signer] of Object.entries(signers)) {
  await send(name, signer, false);
  await send(name, signer, true);
}
