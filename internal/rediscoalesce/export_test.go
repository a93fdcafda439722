package rediscoalesce

// QueuedForTest is the number of calls waiting for the loop, so a test
// can release an in-flight pipeline once the calls it wants coalesced
// are all queued.
func QueuedForTest(b *Coalescer) int { return len(b.calls) }

// MaxBatchForTest is the most calls one pipeline carries.
const MaxBatchForTest = maxBatch
