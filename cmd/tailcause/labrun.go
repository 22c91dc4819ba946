package main

import (
	"context"
	"io"

	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/lab/eval"
	"github.com/tailcause/tailcause/lab/faultlab"
)

// runLab runs one fault-lab configuration through the real pipeline
// (eval.RunLab): in-process Kafka written as the Collector writes it, the
// enricher, ClickHouse.
func runLab(ctx context.Context, e *env, st *chstore.Store, cfg faultlab.Config, progress io.Writer) (*faultlab.Truth, error) {
	return eval.RunLab(ctx, e.log, st, cfg, progress)
}
