// Package model holds the Promela model of the claim protocol
// (claim.pml, checked by check.sh and make model; see docs/model.md) and
// the tests that keep the model and the code from drifting apart: every
// function the model's transition table names must exist, every step of
// internal/claim must be named there, and spin must find the broken
// variant's counterexample and none in the real protocol.
package model
