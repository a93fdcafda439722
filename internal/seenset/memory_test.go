package seenset_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset/storetest"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) seenset.Store {
		s := seenset.NewMemory()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestMemoryClosed(t *testing.T) {
	s := seenset.NewMemory()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(context.Background(), "k", "A", 1); !errors.Is(err, seenset.ErrUnavailable) {
		t.Fatalf("Claim after Close: %v, want ErrUnavailable", err)
	}
	if err := s.Ping(context.Background()); !errors.Is(err, seenset.ErrUnavailable) {
		t.Fatalf("Ping after Close: %v, want ErrUnavailable", err)
	}
}

func TestMemoryCancelledContext(t *testing.T) {
	s := seenset.NewMemory()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Claim(ctx, "k", "A", 1)
	if !errors.Is(err, seenset.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim with cancelled context: %v, want ErrUnavailable and context.Canceled", err)
	}
}
