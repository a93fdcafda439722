package redissource

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
)

// HashTag is the part of a key Redis Cluster hashes: the text between the
// first "{" and the next "}" when it is not empty, else the whole key.
func HashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// keys are the names one source uses next to its queue. Every one
// carries the queue's hash tag, so on Redis Cluster they live in the
// queue's slot and one script can move an element between them.
type keys struct {
	queue string
	tag   string // "{<hash tag of queue>}"
	// redelivered counts, per element digest, how often an element went
	// back to the queue: a list element carries no metadata of its own.
	redelivered string
	replicas    string // set of replica ids that may hold a processing list
	dead        string // dead-letter list, "" for none
	reasons     string // hash: element digest → why it was dead-lettered
	// babelqueue is the one shared processing list of BabelQueue's own Go
	// runtime, "<queue>:processing" (not in the queue's slot on Cluster).
	babelqueue string
}

func newKeys(queue, dead string) keys {
	tag := "{" + HashTag(queue) + "}"
	k := keys{
		queue:       queue,
		tag:         tag,
		redelivered: tag + ":redelivered",
		replicas:    tag + ":replicas",
		babelqueue:  queue + ":processing",
	}
	if dead != "" {
		k.dead = dead
		k.reasons = dead + ":reasons"
	}
	return k
}

func (k keys) processing(replica string) string { return k.tag + ":processing:" + replica }
func (k keys) heartbeat(replica string) string  { return k.tag + ":heartbeat:" + replica }

// session is a key nobody writes: the heartbeat loop blocks on it, so a
// cut connection is noticed while it waits.
func (k keys) session(replica string) string { return k.tag + ":session:" + replica }

// digest names an element in the redelivered and reasons hashes; the
// scripts compute the same with redis.sha1hex. Not a security boundary.
func digest(elem []byte) string {
	sum := sha1.Sum(elem)
	return hex.EncodeToString(sum[:])
}
