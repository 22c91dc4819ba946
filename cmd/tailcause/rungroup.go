package main

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"
)

// components runs the parts of a long-running command together (the
// Prometheus run.Group manner, on errgroup): each part serves until its
// context ends. The first part to end — with an error, or without one
// while the command was not asked to stop — cancels the others, and its
// error, named after the part, is what the command returns (exit status
// 1). When the command's own context ends (SIGTERM), every part shuts
// down and a context.Canceled from any of them is no error.
type components struct {
	parent context.Context
	ctx    context.Context // cancelled by the first part to end
	g      *errgroup.Group
}

func newComponents(ctx context.Context) *components {
	g, gctx := errgroup.WithContext(ctx)
	return &components{parent: ctx, ctx: gctx, g: g}
}

// add starts run under the group's context; name says which part failed.
func (c *components) add(name string, run func(ctx context.Context) error) {
	c.g.Go(func() error {
		err := run(c.ctx)
		switch {
		case err == nil && c.ctx.Err() != nil:
			return nil // asked to stop, by the command's context or another part's end
		case err == nil:
			return fmt.Errorf("%s stopped unexpectedly", name)
		case errors.Is(err, context.Canceled) && c.ctx.Err() != nil:
			return nil
		}
		return fmt.Errorf("%s: %w", name, err)
	})
}

// wait waits for every part and returns the first failure.
func (c *components) wait() error { return c.g.Wait() }

// component is one named part, for the functions that take extra parts.
type component struct {
	name string
	run  func(ctx context.Context) error
}
