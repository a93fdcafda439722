package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
)

// plan is what one run publishes. Both runs publish the same keys and
// amounts, so their rows compare one to one.
type plan struct {
	keys       []string
	amounts    map[string]int64
	main       []msg          // every key once, a third of the duplicates a few messages after their original
	concurrent map[int][]byte // a third of the duplicates, by key index, published by a second publisher with the original
	later      [][]byte       // a third, published once everything else was processed
}

type msg struct {
	body  []byte
	first int // index of the key when this is its original, else -1
}

func makePlan(n int, dupRatio float64) plan {
	dups := int(float64(n) * dupRatio)
	uniq := n - dups
	run := randHex(3)
	p := plan{amounts: map[string]int64{}, concurrent: map[int][]byte{}}
	for i := range uniq {
		k := fmt.Sprintf("order-%s-%05d", run, i)
		p.keys = append(p.keys, k)
		p.amounts[k] = int64(100 + mrand.IntN(100000))
	}
	nConc, nLater := dups/3, dups/3
	soon := map[int]int{}
	for range dups - nConc - nLater {
		soon[mrand.IntN(uniq)]++
	}
	var pending []msg
	for i, k := range p.keys {
		p.main = append(p.main, msg{p.body(k, i), i})
		p.main = append(p.main, pending...)
		pending = pending[:0]
		for range soon[i] {
			pending = append(pending, msg{p.body(k, i), -1})
		}
	}
	p.main = append(p.main, pending...)
	for _, i := range mrand.Perm(uniq)[:nConc] {
		p.concurrent[i] = p.body(p.keys[i], i)
	}
	for range nLater {
		i := mrand.IntN(uniq)
		p.later = append(p.later, p.body(p.keys[i], i))
	}
	return p
}

// body is a BabelQueue-style envelope; the proxy's default key rule reads
// meta.id, and the example app books data.amount_cents to data.customer_id.
func (p plan) body(key string, i int) []byte {
	b, _ := json.Marshal(map[string]any{
		"job":  "urn:babel:orders:created",
		"meta": map[string]any{"id": key, "schema_version": 1},
		"data": map[string]any{"customer_id": fmt.Sprintf("c-%03d", i%100), "amount_cents": p.amounts[key]},
	})
	return b
}

// expectedCents is what every balance together must hold after exactly one
// effect per key.
func (p plan) expectedCents() int64 {
	var sum int64
	for _, a := range p.amounts {
		sum += a
	}
	return sum
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
