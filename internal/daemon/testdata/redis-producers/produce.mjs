// A BabelQueue producer on node-redis: each file's bytes, unchanged, are
// RPUSHed (mode list) or XADDed as field body with bq-message-id = its
// meta.id (mode stream) to its key, every file twice.
//
//   node produce.mjs list|stream redis://host:port key1 file1 [key2 file2 ...]
import { readFileSync } from 'node:fs';
import { createClient } from 'redis';

const [mode, url, ...pairs] = process.argv.slice(2);
if (!['list', 'stream'].includes(mode) || !url || pairs.length === 0 || pairs.length % 2) {
  console.error('usage: produce.mjs list|stream redis://host:port key file [key file ...]');
  process.exit(2);
}
const client = createClient({ url });
client.on('error', (err) => { console.error(err); process.exit(1); });
await client.connect();
let n = 0;
for (let round = 0; round < 2; round++) {
  for (let i = 0; i < pairs.length; i += 2) {
    const [key, file] = [pairs[i], pairs[i + 1]];
    const body = readFileSync(file); // a Buffer: the bytes, not a re-encoded string
    if (mode === 'list') {
      await client.rPush(key, body);
    } else {
      const id = JSON.parse(body.toString('utf8')).meta.id;
      await client.xAdd(key, '*', { body, 'bq-message-id': String(id) });
    }
    n++;
  }
}
await client.close();
console.log(`pushed ${n}`);
