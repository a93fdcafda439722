"""A BabelQueue producer on redis-py: each file's bytes, unchanged, are
RPUSHed (mode list) or XADDed as field body with bq-message-id = its
meta.id (mode stream) to its key, every file twice.

    python3 produce.py list|stream redis://host:port key1 file1 [key2 file2 ...]
"""
import json
import sys

import redis


def main(argv):
    if len(argv) < 4 or argv[0] not in ("list", "stream") or len(argv[2:]) % 2:
        print("usage: produce.py list|stream redis://host:port key file [key file ...]", file=sys.stderr)
        return 2
    mode, url, pairs = argv[0], argv[1], argv[2:]
    client = redis.Redis.from_url(url)
    n = 0
    for _ in range(2):
        for key, path in zip(pairs[0::2], pairs[1::2]):
            with open(path, "rb") as f:
                body = f.read()  # bytes, sent as they are
            if mode == "list":
                client.rpush(key, body)
            else:
                mid = json.loads(body.decode("utf-8"))["meta"]["id"]
                client.xadd(key, {"body": body, "bq-message-id": str(mid)})
            n += 1
    client.close()
    print(f"pushed {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
