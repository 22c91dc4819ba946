-- 0001_base.sql
-- Base tables of the enrich path. Timestamps are UInt64 Unix nanoseconds plus a
-- DateTime column used for partitioning; extra attributes are parallel arrays.
-- ClickHouse 24.8 or newer. The template call ttl "column" renders the telemetry
-- TTL of the deployment (schemas.Options.TTL, `--ttl`, default 30 days) on the
-- event-time column, fixedTTL the fixed TTL of an operational table; with TTL 0
-- both render nothing (see schemas/schemas.go).

CREATE TABLE IF NOT EXISTS requests
(
    uid               String,
    trace_id          String,
    span_id           String,
    parent_span_id    String,
    request_id        String,
    source            LowCardinality(String),
    span_name         String,
    service           LowCardinality(String),
    model             LowCardinality(String),
    host              LowCardinality(String),
    pod               String,
    namespace         LowCardinality(String),
    service_instance  String,
    engine            LowCardinality(String),
    gpu               LowCardinality(String),
    gpu_index         LowCardinality(String),
    start_ns          UInt64 CODEC(Delta, ZSTD(1)),
    end_ns            UInt64 CODEC(Delta, ZSTD(1)),
    start_time        DateTime,
    error             UInt8,
    finish_reason     LowCardinality(String),
    e2e_ms            Float64,
    ttft_ms           Float64,
    queue_ms          Float64,
    prefill_ms        Float64,
    decode_ms         Float64,
    inference_ms      Float64,
    tpot_ms           Float64,
    kv_transfer_ms    Float64,
    prompt_tokens     Int64,
    completion_tokens Int64,
    cached_tokens     Int64,
    max_tokens        Int64,
    timeline_source   LowCardinality(String),
    itl_p50_ms        Float64,
    itl_p99_ms        Float64,
    itl_max_ms        Float64,
    stall_count       UInt32,
    stall_ms          Float64,
    retracts          UInt32,
    engine_match      LowCardinality(String),
    gpu_match         LowCardinality(String),
    running_at_arrival     Float64,
    running_age_ms         Float64,
    waiting_at_arrival     Float64,
    waiting_age_ms         Float64,
    kv_usage_at_arrival    Float64,
    kv_usage_max           Float64,
    kv_usage_age_ms        Float64,
    preemptions_during     Float64,
    preemptions_age_ms     Float64,
    prefix_hit_ratio       Float64,
    prefix_age_ms          Float64,
    engine_prompt_tps      Float64,
    engine_gen_tps         Float64,
    engine_tps_age_ms      Float64,
    engine_mean_prompt_tokens Float64,
    engine_mean_output_tokens Float64,
    sm_clock_min_mhz       Float64,
    sm_clock_norm_mhz      Float64,
    sm_clock_ratio         Float64,
    sm_clock_age_ms        Float64,
    throttle_reasons       UInt32,
    throttle_age_ms        Float64,
    gpu_temp_max_c         Float64,
    gpu_temp_age_ms        Float64,
    power_max_w            Float64,
    power_age_ms           Float64,
    dram_active_max        Float64,
    dram_active_age_ms     Float64,
    pcie_bytes_per_s_max   Float64,
    pcie_age_ms            Float64,
    xid_last               UInt32,
    xid_age_ms             Float64,
    attr_keys         Array(String),
    attr_values       Array(String),
    kafka_partition   Int32,
    kafka_offset      Int64,
    enriched_at       DateTime,
    INDEX idx_trace trace_id TYPE bloom_filter(0.01) GRANULARITY 4,
    INDEX idx_request request_id TYPE bloom_filter(0.01) GRANULARITY 4
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(start_time)
ORDER BY (model, service, start_time, uid)
TTL start_time + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS token_stalls
(
    request_uid      String,
    trace_id         String,
    service          LowCardinality(String),
    model            LowCardinality(String),
    host             LowCardinality(String),
    pod              String,
    engine           LowCardinality(String),
    gpu              LowCardinality(String),
    token_index      UInt32,
    start_ns         UInt64 CODEC(Delta, ZSTD(1)),
    end_ns           UInt64 CODEC(Delta, ZSTD(1)),
    start_time       DateTime,
    duration_ms      Float64,
    preemptions      Float64,
    retracts         UInt32,
    kv_usage_max     Float64,
    throttle_reasons UInt32,
    sm_clock_min_mhz Float64,
    xid_last         UInt32,
    engine_prompt_tps Float64,
    events           Array(String)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(start_time)
ORDER BY (model, start_time, request_uid, token_index)
TTL start_time + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS gpu_samples
(
    host      LowCardinality(String),
    gpu       LowCardinality(String),
    gpu_index LowCardinality(String),
    pod       String,
    namespace LowCardinality(String),
    metric    LowCardinality(String),
    time_ns   UInt64 CODEC(Delta, ZSTD(1)),
    time      DateTime,
    value     Float64 CODEC(Gorilla, ZSTD(1))
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(time)
ORDER BY (host, gpu, metric, time_ns)
TTL time + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS engine_samples
(
    host             LowCardinality(String),
    pod              String,
    model            LowCardinality(String),
    engine           LowCardinality(String),
    service_instance String,
    metric           LowCardinality(String),
    time_ns          UInt64 CODEC(Delta, ZSTD(1)),
    time             DateTime,
    value            Float64 CODEC(Gorilla, ZSTD(1)),
    delta            Float64,
    rate_per_s       Float64
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(time)
ORDER BY (host, model, engine, metric, time_ns)
TTL time + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS rejected_input
(
    received_at    DateTime,
    signal         LowCardinality(String),
    reason         LowCardinality(String),
    detail         String,
    topic          String,
    partition      Int32,
    offset         Int64,
    payload_bytes  UInt64,
    payload_prefix String
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(received_at)
ORDER BY (received_at, topic, partition, offset)
TTL received_at + INTERVAL 7 DAY;

-- 0002_causal.sql
-- What the causal module writes: incidents (one row per state change,
-- the newest version wins) and their ranked culprits (all rows of an
-- incident's newest version). The v1 JSON shape is schemas/culprits.v1.schema.json.

CREATE TABLE IF NOT EXISTS incidents
(
    incident_id      String,
    version          UInt64,
    status           LowCardinality(String),
    scope            String,
    scope_keys       Array(String),
    scope_values     Array(String),
    signal           LowCardinality(String),
    quantile         Float64,
    threshold_ms     Float64,
    window_start     DateTime,
    window_end       DateTime,
    baseline_start   DateTime,
    baseline_end     DateTime,
    opened_at        DateTime,
    updated_at       DateTime,
    resolved_at      DateTime,
    observed_p99_ms  Float64,
    baseline_p99_ms  Float64,
    requests         UInt64,
    tail_requests    UInt64,
    top_cause        LowCardinality(String),
    top_entity       String,
    method_estimator LowCardinality(String),
    method_dag       LowCardinality(String),
    method_version   String,
    payload          String CODEC(ZSTD(3))
)
ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(opened_at)
ORDER BY incident_id
TTL opened_at + INTERVAL 365 DAY;

CREATE TABLE IF NOT EXISTS culprits
(
    incident_id           String,
    version               UInt64,
    rank                  UInt16,
    cause                 LowCardinality(String),
    entity_host           String,
    entity_gpu            String,
    entity_engine         String,
    entity_model          String,
    entity_pod            String,
    entity_service        String,
    effect_ms             Float64,
    ci95_low_ms           Float64,
    ci95_high_ms          Float64,
    attributable_fraction Float64,
    counterfactual_p99_ms Float64,
    health                Float64,
    adjusted_for          Array(String),
    evidence              Array(String),
    exemplar_trace_ids    Array(String),
    computed_at           DateTime
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(computed_at)
ORDER BY (incident_id, version, rank)
TTL computed_at + INTERVAL 365 DAY;

-- 0003_alerts.sql
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
ORDER BY (delivery_id, receiver)
TTL created_at + INTERVAL 90 DAY;

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
ORDER BY (delivery_id, receiver, attempted_ns)
TTL attempted_at + INTERVAL 90 DAY;

-- 0004_views.sql
-- Views for analysts (documented with example queries in schemas/SQL.md).
-- They read with FINAL, so rows written twice by the at-least-once enrich
-- path are counted once. A view is a stored query: filter it
-- on its leading columns (model, host, minute) and ClickHouse still reads
-- the underlying table once per query, so keep time filters tight.

-- P99 (and P50, max, TTFT P99, error count) of end-to-end latency per model
-- per minute, by request start time. quantileExact: the value at index
-- floor(0.99 * n) of the minute's sorted latencies.
CREATE VIEW IF NOT EXISTS p99_by_model_minute AS
SELECT
    model,
    toStartOfMinute(start_time) AS minute,
    count() AS requests,
    sum(error) AS errors,
    quantileExact(0.5)(e2e_ms) AS p50_ms,
    quantileExact(0.99)(e2e_ms) AS p99_ms,
    max(e2e_ms) AS max_ms,
    quantileExact(0.99)(ttft_ms) AS ttft_p99_ms
FROM requests FINAL
GROUP BY model, minute;

-- Tail requests: every request whose e2e latency is at or above its model's
-- P99 for the minute it started in, with its token-timeline features and the
-- engine/GPU state it ran under (NaN = unknown; *_age_ms = staleness).
-- A plain (ALL) INNER JOIN: the right side has one row per key, and ANY
-- INNER JOIN would join each right row only once (one request per minute).
CREATE VIEW IF NOT EXISTS tail_requests AS
SELECT
    minute,
    model,
    service,
    host,
    engine,
    gpu,
    uid,
    trace_id,
    start_time,
    e2e_ms,
    p99_ms,
    ttft_ms,
    queue_ms,
    prefill_ms,
    decode_ms,
    tpot_ms,
    prompt_tokens,
    completion_tokens,
    cached_tokens,
    error,
    finish_reason,
    itl_p99_ms,
    itl_max_ms,
    stall_count,
    stall_ms,
    retracts,
    running_at_arrival,
    waiting_at_arrival,
    kv_usage_at_arrival,
    kv_usage_max,
    preemptions_during,
    prefix_hit_ratio,
    sm_clock_ratio,
    throttle_reasons,
    gpu_temp_max_c,
    power_max_w,
    dram_active_max,
    pcie_bytes_per_s_max,
    xid_last,
    engine_match,
    gpu_match
FROM
(
    SELECT
        *,
        toStartOfMinute(start_time) AS minute
    FROM requests FINAL
) AS r
INNER JOIN
(
    SELECT
        model,
        toStartOfMinute(start_time) AS minute,
        quantileExact(0.99)(e2e_ms) AS p99_ms
    FROM requests FINAL
    GROUP BY model, minute
) AS p USING (model, minute)
WHERE e2e_ms >= p99_ms;

-- Culprit history: the ranked culprits of every incident's newest version,
-- with the incident they belong to; one row per (incident, rank).
-- incidents FINAL has one row per incident (its newest version), so the
-- INNER JOIN keeps exactly the culprits of that version.
CREATE VIEW IF NOT EXISTS culprit_history AS
SELECT
    opened_at,
    incident_id,
    version,
    status,
    scope,
    window_start,
    window_end,
    observed_p99_ms,
    baseline_p99_ms,
    threshold_ms,
    rank,
    cause,
    entity_host,
    entity_gpu,
    entity_engine,
    entity_model,
    entity_pod,
    entity_service,
    effect_ms,
    ci95_low_ms,
    ci95_high_ms,
    attributable_fraction,
    counterfactual_p99_ms,
    health,
    adjusted_for,
    evidence,
    exemplar_trace_ids
FROM culprits
INNER JOIN
(
    SELECT
        incident_id,
        version,
        status,
        scope,
        opened_at,
        window_start,
        window_end,
        observed_p99_ms,
        baseline_p99_ms,
        threshold_ms
    FROM incidents FINAL
) AS i USING (incident_id, version);

-- GPU health per GPU per minute from the dcgm-exporter samples: SM clock,
-- temperature, power, utilisation, DRAM and PCIe activity, throttle reasons
-- (OR of the bitmask: 96 = SW/HW thermal, 132 = SW power cap/HW power
-- brake) and XID errors. NaN where the GPU reported no sample of a metric
-- in that minute.
CREATE VIEW IF NOT EXISTS gpu_health_minute AS
SELECT
    host,
    gpu,
    toStartOfMinute(time) AS minute,
    count() AS samples,
    if(countIf(metric = 'sm_clock_mhz') = 0, nan, minIf(value, metric = 'sm_clock_mhz')) AS sm_clock_min_mhz,
    if(countIf(metric = 'sm_clock_mhz') = 0, nan, avgIf(value, metric = 'sm_clock_mhz')) AS sm_clock_avg_mhz,
    if(countIf(metric = 'gpu_temp_c') = 0, nan, maxIf(value, metric = 'gpu_temp_c')) AS gpu_temp_max_c,
    if(countIf(metric = 'power_w') = 0, nan, maxIf(value, metric = 'power_w')) AS power_max_w,
    if(countIf(metric = 'gpu_util') = 0, nan, avgIf(value, metric = 'gpu_util')) AS gpu_util_avg,
    if(countIf(metric = 'dram_active') = 0, nan, maxIf(value, metric = 'dram_active')) AS dram_active_max,
    if(countIf(metric IN ('pcie_tx_bytes_per_s', 'pcie_rx_bytes_per_s')) = 0, nan, maxIf(value, metric IN ('pcie_tx_bytes_per_s', 'pcie_rx_bytes_per_s'))) AS pcie_bytes_per_s_max,
    groupBitOrIf(toUInt32(value), metric = 'clock_event_reasons') AS throttle_reasons,
    bitAnd(throttle_reasons, 96) != 0 AS thermal_throttled,
    bitAnd(throttle_reasons, 132) != 0 AS power_capped,
    maxIf(value, metric = 'xid_last') AS xid_last,
    countIf(metric = 'xid_last' AND value > 0) AS xid_samples
FROM gpu_samples FINAL
GROUP BY host, gpu, minute;

-- 0005_alert_claims.sql
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
ORDER BY (delivery_id, receiver, attempt, claimed_ns)
TTL claimed_at + INTERVAL 7 DAY;

-- 0006_step_tokens.sql
-- The engine's step size while a request ran (enrich/join, "The join" in
-- DESIGN.md): the token-weighted mean number of tokens per engine step,
-- from the step-size histogram vLLM exports (vllm:iteration_tokens_total).
-- Large prefills batched with a request's decodes raise it; chunked prefill
-- caps it at the step budget. NaN where the engine exports no such
-- histogram, and in rows written before this migration.

ALTER TABLE requests ADD COLUMN IF NOT EXISTS engine_step_tokens Float64 DEFAULT nan AFTER engine_mean_output_tokens;

