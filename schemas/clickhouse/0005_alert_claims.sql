-- Claims of alert delivery attempts, so that N `tailcause query` replicas,
-- each running a dispatcher on the same outbox, make each attempt of a
-- (delivery_id, receiver) once (query/alert/claim.go, DESIGN.md "Alerts").
--
-- Append-only: a dispatcher about to make attempt `attempt` inserts one row
-- per (delivery_id, receiver) with its own claim_id (unique per replica and
-- round), waits a settle time, and reads the claims back: the live claim
-- (claimed_ns + lease_ns after the server's now, not released) with the
-- smallest (claimed_ns, claim_id) wins. claimed_ns is the SERVER's clock
-- (the column default), so replicas' clocks do not matter. A row with
-- lease_ns 0 releases the claim_id's claim (claimed, not acted on).
-- Not a ReplacingMergeTree: that keeps the last row inserted, and the
-- first claim must win.

CREATE TABLE IF NOT EXISTS alert_claims
(
    delivery_id String,
    receiver    String,
    attempt     UInt32,
    claim_id    String,
    lease_ns    UInt64,
    claimed_ns  UInt64 DEFAULT toUnixTimestamp64Nano(now64(9)),
    claimed_at  DateTime DEFAULT now()
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(claimed_at)
ORDER BY (delivery_id, receiver, attempt, claimed_ns){{fixedTTL "claimed_at + INTERVAL 7 DAY"}};
