package ingest

import (
	"testing"

	"github.com/tailcause/tailcause/internal/kafkax"
)

// TestProducerConfigHoldsLargestRecord: every command that builds ingest's
// producer gets batches that hold the largest record it may write.
func TestProducerConfigHoldsLargestRecord(t *testing.T) {
	for _, max := range []int{100_000, 1_000_000, 4_000_000} {
		cfg := DefaultConfig()
		cfg.Encoding.MaxMessageBytes = max
		pc := cfg.ProducerConfig(kafkax.DefaultConfig())
		if pc.BatchBytes < int64(max)+recordOverhead {
			t.Errorf("max message bytes %d: batch bytes %d", max, pc.BatchBytes)
		}
		if pc.BatchBytes < kafkax.DefaultConfig().BatchBytes {
			t.Errorf("max message bytes %d: batch bytes %d lowered below the producer's", max, pc.BatchBytes)
		}
	}
}
