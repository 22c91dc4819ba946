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
ORDER BY (model, service, start_time, uid){{ttl "start_time"}};

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
ORDER BY (model, start_time, request_uid, token_index){{ttl "start_time"}};

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
ORDER BY (host, gpu, metric, time_ns){{ttl "time"}};

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
ORDER BY (host, model, engine, metric, time_ns){{ttl "time"}};

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
ORDER BY (received_at, topic, partition, offset){{fixedTTL "received_at + INTERVAL 7 DAY"}};
