package broker

import "context"

// Redriven is one dead letter on its way back to its source.
type Redriven struct {
	// Message is the message as the source will deliver it again: the
	// dead-letter metadata (x-dedupe-* reason headers, RabbitMQ's
	// x-death) removed, the body byte for byte. Its key is what the
	// source's key rules will find.
	Message *Message
	// From and To say where it sits and where it goes, for an operator:
	// "queue orders.dead", "topic orders.dlq[2]@17", "topic orders[2]".
	From, To string
}

// RedriveOptions steer one Redrive.
type RedriveOptions struct {
	// Limit is the most dead letters moved; 0 moves every one.
	Limit int
	// DryRun finds the dead letters that would move and reports them to
	// Moved, changing nothing.
	DryRun bool
	// Before is called for each dead letter about to move, before it is
	// republished; an error stops the redrive with that dead letter
	// still where it was. Not called in a dry run. nil: nothing.
	Before func(ctx context.Context, r Redriven) error
	// Moved is called for each dead letter once it is back in the source
	// and gone from the dead letters (in a dry run: each that would
	// move). nil: nothing.
	Moved func(r Redriven)
}

// RedriveResult counts what a Redrive did.
type RedriveResult struct {
	// Moved dead letters are back in the source (listed, in a dry run).
	Moved int
	// Skipped dead letters belong to another source sharing the
	// dead-letter queue or topic; they were left where they are.
	Skipped int
	// More is true when Limit stopped the redrive before the last dead
	// letter present at its start.
	More bool
}

// Redriver moves a source's dead letters back to the source's queue,
// topic, list or stream, after the bug that failed them is fixed.
//
// Redrive visits the dead letters present when it starts, oldest first
// (a dead letter added meanwhile, such as a redriven message that failed
// again, waits for the next run). Each is republished to the source and
// removed from the dead letters only after the broker confirmed the
// republish, so a failure or a crash between the two leaves it in both
// places — a duplicate the seen-set recognises — and never in neither.
// The first error stops it; the result counts what was done before.
type Redriver interface {
	Redrive(ctx context.Context, o RedriveOptions) (RedriveResult, error)
	// Close releases the connections; safe to call twice.
	Close() error
}

// Done reports whether Limit allows no further move.
func (o RedriveOptions) Done(moved int) bool { return o.Limit > 0 && moved >= o.Limit }

// before calls Before when set.
func (o RedriveOptions) before(ctx context.Context, r Redriven) error {
	if o.Before == nil {
		return nil
	}
	return o.Before(ctx, r)
}

// Run is one step of a redrive: in a dry run it reports r; otherwise it
// calls Before, then move (the republish, confirmed, and the removal
// from the dead letters), then reports r as moved.
func (o RedriveOptions) Run(ctx context.Context, r Redriven, move func() error) error {
	if !o.DryRun {
		if err := o.before(ctx, r); err != nil {
			return err
		}
		if err := move(); err != nil {
			return err
		}
	}
	if o.Moved != nil {
		o.Moved(r)
	}
	return nil
}
