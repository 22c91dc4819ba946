package causal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// sweepPool runs the per-scope work of a sweep (every scope's Analyze and
// screenScope, then the focused analyses of the entity breaches) on up to
// Config.SweepParallel analyzers at once. Each job writes its own result
// slot; the sweep merges the slots in scope order, so the answer does not
// depend on which worker ran what, or when.
//
// The sweep's snapshot is a temporary table of one native connection
// (snapshot.go): a connection runs one statement at a time, and no other
// connection sees the table. Concurrent queries over it are therefore
// impossible; a worker other than the first reads a copy of its own,
// made in a session of its own with the same statement as the sweep's
// snapshot, and used only when its row count and checksum (the sum of
// cityHash64 of every row) equal the sweep snapshot's: the same rows, so
// the same answers. A copy that differs (rows written or replaced between
// the two reads), or that the server refuses, leaves its worker out: the
// other workers do its share. Copies are made when first needed, in
// parallel with the first worker's jobs, and kept until the sweep ends;
// the server holds at most Config.SweepCopyRows rows of copies. Without a
// snapshot (direct reads) every worker reads through the analyzer's own
// Querier, which must then be safe for concurrent use (StoreDB is: a
// clickhouse-go pool).
type sweepPool struct {
	main  *Analyzer // the sweep's: its snapshot's session, or direct reads
	store *Analyzer // reads the store: makes the copies
	size  int       // workers at most, main included
	// What the sweep's snapshot holds (withSnapshot's arguments).
	scope map[string]string
	y     string
	ivs   []Interval

	mainSum *snapshotSum // the sweep snapshot's, read once
	copies  []*sweepCopy // the workers beyond the first, made once

	// Statements sent to make and check copies, and their latency; the
	// most workers that ran jobs at once.
	queries int
	qtime   time.Duration
	workers int
}

// sweepCopy is one extra worker's analyzer, reading its verified copy of
// the sweep's snapshot; nil an when the copy could not be used.
type sweepCopy struct {
	once    sync.Once
	an      *Analyzer
	release func()
	queries int
	qtime   time.Duration
}

// snapshotSum identifies a snapshot's rows whatever their order.
type snapshotSum struct {
	rows float64
	sum  string // sum of cityHash64 of every row, UInt64 wrapping
}

// snapshotChecksum is the statement snapshotSum reads.
const snapshotChecksum = "SELECT toFloat64(count()), toString(sum(cityHash64(*))) FROM " + snapshotTable

func readSnapshotSum(ctx context.Context, db Querier) (snapshotSum, error) {
	var s snapshotSum
	n := 0
	err := QueryRows(ctx, db, "snapshot checksum", snapshotChecksum, func(r Rows) error {
		n++
		return r.Scan(&s.rows, &s.sum)
	})
	if err == nil && n != 1 {
		err = fmt.Errorf("query snapshot checksum: %d rows, want 1", n)
	}
	return s, err
}

// newSweepPool returns the pool of a sweep whose analyzer is main (made
// by store.withSnapshot(scope, y, true, ivs)).
func newSweepPool(store, main *Analyzer, scope map[string]string, y string, ivs []Interval) *sweepPool {
	size := max(main.cfg.SweepParallel, 1)
	if main.snap != nil {
		// Each copy holds the snapshot's rows again: within the budget.
		rows := max(main.snap.reads.SnapshotRows, 1)
		size = int(min(int64(size), 1+int64(main.cfg.SweepCopyRows)/rows))
	}
	return &sweepPool{main: main, store: store, size: size, scope: scope, y: y, ivs: ivs}
}

// close releases the copies (their sessions, and the tables with them).
func (p *sweepPool) close() {
	for _, c := range p.copies {
		if c.release != nil {
			c.release()
		}
	}
}

// run calls job(ctx, a, i) for every i in [0, n), each on one worker's
// analyzer a, at most p.size at once (1: in order on the sweep's own
// analyzer, as a sequential loop). It returns the first error a job
// returned (the others are then cancelled); a worker whose copy could not
// be made is not an error.
func (p *sweepPool) run(ctx context.Context, n int, job func(ctx context.Context, a *Analyzer, i int) error) error {
	workers := min(p.size, n)
	if workers <= 1 {
		p.workers = max(p.workers, workers)
		for i := range n {
			if err := job(ctx, p.main, i); err != nil {
				return err
			}
		}
		return nil
	}
	if p.main.snap != nil && p.mainSum == nil {
		t0 := time.Now()
		s, err := readSnapshotSum(ctx, p.main.db)
		p.queries++
		p.qtime += time.Since(t0)
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		p.mainSum = &s
	}
	for len(p.copies) < workers-1 {
		p.copies = append(p.copies, &sweepCopy{})
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	work := func(a *Analyzer) {
		for {
			i := int(next.Add(1) - 1)
			if i >= n || ctx.Err() != nil {
				return
			}
			if err := job(ctx, a, i); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				cancel()
				return
			}
		}
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w == 0 {
				work(p.main)
				return
			}
			if a := p.worker(ctx, p.copies[w-1]); a != nil {
				work(a)
			}
		}()
	}
	wg.Wait()
	used := workers
	for _, c := range p.copies[:workers-1] {
		p.queries, p.qtime = p.queries+c.queries, p.qtime+c.qtime
		c.queries, c.qtime = 0, 0
		if p.main.snap != nil && c.an == nil {
			used--
		}
	}
	p.workers = max(p.workers, used)
	return firstErr
}

// worker returns the analyzer of an extra worker: the sweep's own when it
// reads directly, else one reading the copy c (made on first use); nil
// when the copy cannot be used.
func (p *sweepPool) worker(ctx context.Context, c *sweepCopy) *Analyzer {
	if p.main.snap == nil {
		return p.main
	}
	c.once.Do(func() {
		a, made, release, err := p.store.withSnapshot(ctx, p.scope, p.y, true, p.ivs)
		if err != nil || !made || a.snap == nil {
			if err == nil {
				release()
				err = errors.New(a.reads.Direct)
			}
			p.main.log.Debug("causal sweep: no copy of the snapshot for a worker", "error", err)
			return
		}
		c.queries += snapshotStatements
		c.qtime += a.reads.SnapshotTime
		t0 := time.Now()
		s, err := readSnapshotSum(ctx, a.db)
		c.queries++
		c.qtime += time.Since(t0)
		if err != nil || s != *p.mainSum {
			release()
			p.main.log.Debug("causal sweep: the copy of the snapshot differs from it: the worker is left out", "error", err, "rows", s.rows, "want", p.mainSum.rows)
			return
		}
		// The same rows as the sweep's snapshot: its analyses report that
		// one (and size their reads by it, as the first worker's do).
		snap := *a.snap
		snap.reads = p.main.snap.reads
		a.snap, a.reads = &snap, p.main.reads
		c.an, c.release = a, release
	})
	return c.an
}

// MaxSweepParallel bounds Config.SweepParallel: each worker holds a
// connection, and a copy of the snapshot.
const MaxSweepParallel = 64

// WithSweepParallel returns a copy of a whose sweeps analyze n scopes at
// once (incident.Lifecycle.Round shares Config.SweepParallel among the
// sweeps it runs at once).
func (a *Analyzer) WithSweepParallel(n int) *Analyzer {
	c := *a
	c.cfg.SweepParallel = n
	return &c
}
