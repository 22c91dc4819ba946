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
