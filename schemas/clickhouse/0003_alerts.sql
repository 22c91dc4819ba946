-- The durable alert outbox of `tailcause query`'s webhook dispatcher.
--
-- alert_outbox: one row per (delivery, receiver), written BEFORE any
-- delivery is tried, so an event survives restarts and receiver outages.
-- delivery_id is <incident_id>:<version>:<event>, the idempotency key sent
-- as X-Tailcause-Delivery; re-enqueueing the same event collapses on it
-- (ReplacingMergeTree, read with FINAL).
--
-- alert_attempts: append-only, one row per delivery attempt; the newest row
-- (by attempted_ns) of a (delivery_id, receiver) is its state:
--   delivered  the receiver answered 2xx;
--   retry      a retriable failure, tried again at next_attempt_ns;
--   failed     a permanent failure or the retry budget is spent (given up).
-- A row with no attempt yet is pending.

CREATE TABLE IF NOT EXISTS alert_outbox
(
    delivery_id  String,
    receiver     String,
    incident_id  String,
    version      UInt64,
    event        LowCardinality(String),
    payload      String CODEC(ZSTD(3)),
    created_ns   UInt64 CODEC(Delta, ZSTD(1)),
    created_at   DateTime
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(created_at)
ORDER BY (delivery_id, receiver){{fixedTTL "created_at + INTERVAL 90 DAY"}};

CREATE TABLE IF NOT EXISTS alert_attempts
(
    delivery_id     String,
    receiver        String,
    attempt         UInt32,
    state           LowCardinality(String),
    status_code     UInt16,
    error           String,
    duration_ms     Float64,
    attempted_ns    UInt64 CODEC(Delta, ZSTD(1)),
    attempted_at    DateTime,
    next_attempt_ns UInt64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(attempted_at)
ORDER BY (delivery_id, receiver, attempted_ns){{fixedTTL "attempted_at + INTERVAL 90 DAY"}};
