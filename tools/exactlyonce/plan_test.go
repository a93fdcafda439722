package main

import (
	"encoding/json"
	"testing"
)

func TestPlan(t *testing.T) {
	pl := makePlan(1000, 0.3)
	if len(pl.keys) != 700 {
		t.Fatalf("%d keys, want 700", len(pl.keys))
	}
	seen := map[string]int{}
	count := func(b []byte) {
		var m struct {
			Meta struct{ ID string }
			Data struct {
				CustomerID  string `json:"customer_id"`
				AmountCents int64  `json:"amount_cents"`
			}
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if m.Data.AmountCents != pl.amounts[m.Meta.ID] || m.Data.AmountCents <= 0 || m.Data.CustomerID == "" {
			t.Fatalf("message %s: amount %d, want %d", b, m.Data.AmountCents, pl.amounts[m.Meta.ID])
		}
		seen[m.Meta.ID]++
	}
	firsts := 0
	for _, m := range pl.main {
		count(m.body)
		if m.first >= 0 {
			firsts++
		}
	}
	for _, b := range pl.concurrent {
		count(b)
	}
	for _, b := range pl.later {
		count(b)
	}
	total := 0
	for _, k := range pl.keys {
		if seen[k] == 0 {
			t.Errorf("key %s is never published", k)
		}
		total += seen[k]
	}
	if total != 1000 || len(seen) != 700 || firsts != 700 {
		t.Errorf("%d messages on %d keys with %d originals, want 1000 on 700 with 700", total, len(seen), firsts)
	}
}

func TestWithSearchPath(t *testing.T) {
	got := withSearchPath("postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "s1")
	want := "postgres://postgres@127.0.0.1:5432/test?options=-c%20search_path%3Ds1&sslmode=disable"
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
