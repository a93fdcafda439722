package seenset

import (
	"crypto/rand"
	"encoding/base64"
	"strconv"
	"sync/atomic"
)

// Tokens makes the claim tokens of one process: a random prefix and a
// counter, unique across replicas without a crypto/rand read per claim.
// The prefix has a fixed length (11 characters for 64 bits), so prefix
// and counter need no separator. Every key's value holds a token, and the
// token is short enough that a done value stays in Redis' 48-byte
// allocation class; other replicas only compare a token whole, so its
// shape may change between versions.
type Tokens struct {
	prefix string
	seq    atomic.Uint64
}

// NewTokens returns a source of tokens with its own random prefix.
func NewTokens() *Tokens {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &Tokens{prefix: base64.RawURLEncoding.EncodeToString(b)}
}

// Next returns a token no other call in any process returns.
func (t *Tokens) Next() string {
	return t.prefix + strconv.FormatUint(t.seq.Add(1), 36)
}

// Prefix is the random part shared by this source's tokens.
func (t *Tokens) Prefix() string { return t.prefix }
