package alert

import (
	"context"
	"fmt"
	"time"

	"github.com/tailcause/tailcause/internal/chstore"
)

// Claims: one attempt per (delivery, receiver, attempt number) across the
// dispatchers of N `tailcause query` replicas sharing a database.
//
// ClickHouse has no transactions and no compare-and-set, so a claim is
// settled by a rule every dispatcher evaluates alike over an append-only
// table (alert_claims, migration 0005): a dispatcher inserts a claim row per
// (delivery, receiver, attempt), waits ClaimSettle, reads the claims back,
// and acts only where its claim is the first live one — the smallest
// (claimed_ns, claim_id), claimed_ns being the server's clock at the insert
// (a column default: the replicas' clocks do not enter), live meaning not
// expired (claimed_ns + lease_ns after the server's now) and not released.
// (A ReplacingMergeTree read with FINAL would keep the last claim inserted:
// the wrong one.)
//
// Why two dispatchers cannot both act on one key: let A's claim be the
// earlier, tA < tB (ties go by claim_id). B acts only if it did not see A's
// claim. B reads back at least ClaimSettle after its insert returned, so
// after tB + ClaimSettle > tA + ClaimSettle; A's row is committed by then
// unless A's insert took ClaimSettle or longer from tA to its commit. A
// dispatcher whose claim insert took ClaimSettle/2 or longer by its own
// monotonic clock (which bounds the server's time from tA to the commit)
// never acts on that claim and releases it. So B sees A's claim and loses.
// On a single server an acknowledged insert is visible to every later read;
// on a replicated cluster the alert tables need insert_quorum and
// select_sequential_consistency for the same to hold. The rule also takes
// the server's clock not to step back (NTP slews it) while claims race: a
// later claim dated earlier could win a second time.
//
// The lease bounds how long a dead dispatcher's claim holds. A dispatcher
// posts only while its claim, counted from before its insert, still has
// room for the receiver's timeout and the recording of the attempt, so an
// attempt is recorded before its claim expires, or was never sent. One
// that dies between a POST and its attempt row leaves a claim that expires
// after the lease; the next claimant sends again. Delivery is therefore at
// least once, and exactly once when no dispatcher dies (or loses its
// writes) between a POST and its record.

var claimsTable = chstore.Table{Name: "alert_claims", Columns: []string{
	"delivery_id", "receiver", "attempt", "claim_id", "lease_ns",
}}

// recordTimeout bounds the write of a scan's attempt rows.
const recordTimeout = 30 * time.Second

type claimKey struct {
	deliveryID, receiver string
	attempt              uint32
}

func keyOf(p pending) claimKey {
	return claimKey{p.deliveryID, p.receiver, uint32(p.attempts + 1)}
}

// claim settles which of list this dispatcher attempts now. It returns the
// ones it won, its claim id and the monotonic time before the claim was
// inserted (the lease counts from after it). A failed write is an error:
// nothing is sent without a claim.
func (d *Dispatcher) claim(ctx context.Context, list []pending) ([]pending, string, time.Time, error) {
	settle := time.Duration(d.cfg.ClaimSettle)
	var id string
	var start time.Time
	for try := 0; ; try++ {
		d.claimSeq++
		id = fmt.Sprintf("%s/%d", d.owner, d.claimSeq)
		rows := make([][]any, len(list))
		for i, p := range list {
			k := keyOf(p)
			rows[i] = []any{k.deliveryID, k.receiver, k.attempt, id, uint64(d.cfg.lease())}
		}
		start = time.Now()
		if err := d.db.insertClaims(ctx, rows); err != nil {
			return nil, id, start, fmt.Errorf("claim %d deliveries: %w", len(rows), err)
		}
		if time.Since(start) < settle/2 {
			break
		}
		// Too slow to be sure a competitor saw it in time: never act on
		// it. Released (acknowledged before the next claim is inserted,
		// so the next read-back sees the release), it stops no one.
		d.m.claims.WithLabelValues("slow").Add(float64(len(list)))
		d.release(ctx, id, list)
		if try == 2 || ctx.Err() != nil {
			d.slowScan.Store(true) // Run tries again soon, not after a poll interval
			return nil, id, start, nil
		}
	}
	t := time.NewTimer(settle)
	select {
	case <-ctx.Done():
		t.Stop()
		d.release(ctx, id, list)
		return nil, id, start, nil
	case <-t.C:
	}
	winners, err := d.winners(ctx, list)
	if err != nil {
		d.release(ctx, id, list)
		return nil, id, start, err
	}
	done, err := d.attempted(ctx, list)
	if err != nil {
		d.release(ctx, id, list)
		return nil, id, start, err
	}
	var won, lost []pending
	for _, p := range list {
		k := keyOf(p)
		switch {
		case winners[k] != id:
			lost = append(lost, p)
		case done[claimKey{k.deliveryID, k.receiver, 0}] >= k.attempt:
			lost = append(lost, p) // attempted meanwhile, by a claimant whose lease ran out
		default:
			won = append(won, p)
		}
	}
	// A lost claim is released at once: left live, it would be the first
	// claim of the next round if the winner gives its claim up unused, and
	// stop everyone until it expired. Releasing it is safe: the claim that
	// beat it is earlier, so it decides any later read-back alike.
	d.m.claims.WithLabelValues("lost").Add(float64(len(lost)))
	d.release(ctx, id, lost)
	d.m.claims.WithLabelValues("won").Add(float64(len(won)))
	return won, id, start, nil
}

// winners reads the first live claim of each key of list.
func (d *Dispatcher) winners(ctx context.Context, list []pending) (map[claimKey]string, error) {
	return d.db.firstLiveClaims(ctx, deliveryIDs(list))
}

// attempted reads the newest recorded attempt number of each (delivery,
// receiver) of list (keyed with attempt 0).
func (d *Dispatcher) attempted(ctx context.Context, list []pending) (map[claimKey]uint32, error) {
	return d.db.lastAttempts(ctx, deliveryIDs(list))
}

// release gives up claim id's claims on list (a row with lease 0), so the
// next claimant need not wait for the lease. Best effort: a claim that
// cannot be released expires.
func (d *Dispatcher) release(ctx context.Context, id string, list []pending) {
	if len(list) == 0 {
		return
	}
	rows := make([][]any, len(list))
	for i, p := range list {
		k := keyOf(p)
		rows[i] = []any{k.deliveryID, k.receiver, k.attempt, id, uint64(0)}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := d.db.insertClaims(rctx, rows); err != nil {
		d.log.Warn("release alert claims", "claims", len(rows), "err", err)
		return
	}
	d.m.claims.WithLabelValues("released").Add(float64(len(rows)))
}

func deliveryIDs(list []pending) []string {
	seen := map[string]bool{}
	var ids []string
	for _, p := range list {
		if !seen[p.deliveryID] {
			seen[p.deliveryID] = true
			ids = append(ids, p.deliveryID)
		}
	}
	return ids
}
