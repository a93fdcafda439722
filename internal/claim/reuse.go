package claim

import "github.com/dedupe-proxy/dedupe-proxy/internal/seenset"

// What a source does with a message whose key is done for another body
// (seenset.Reused): its key_reuse setting, the same for the pipeline and
// the webhook handler.
const (
	// KeyReuseWarn acks it as a duplicate, logs and counts it.
	KeyReuseWarn = "warn"
	// KeyReuseDeadLetter dead-letters it (a webhook: 422, nothing stored).
	KeyReuseDeadLetter = "dead_letter"
	// KeyReuseForward sends it to the app marked with ReusedHeader.
	KeyReuseForward = "forward"
)

// ReasonKeyReused is the dead letter's reason under key_reuse: dead_letter.
const ReasonKeyReused = "key reused with a different body"

// ReusedHeader marks a message forwarded under key_reuse: forward.
const ReusedHeader = "X-Dedupe-Key-Reused"

// ReuseKey is the stored key under which the body with digest d of a
// reused key is claimed and committed when it is forwarded (key_reuse:
// forward). The key's own done mark keeps the first body's digest, so a
// redelivery of the first stays a duplicate; this key records the second
// body's success, so its redelivery is a duplicate too rather than a
// second forward, and its claim keeps two copies of it from reaching the
// app at once. A message key has no control characters (keys refuses
// them), so no key on the wire names a ReuseKey.
func ReuseKey(full string, d seenset.Digest) string {
	return full + reuseSep + d.String()
}

// reuseSep joins a key and a body's digest in a ReuseKey.
const reuseSep = "\x1freused:"
