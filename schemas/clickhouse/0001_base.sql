-- Base tables of the enrich path. Timestamps are UInt64 Unix nanoseconds plus a
-- DateTime column used for partitioning; extra attributes are parallel arrays.
-- Rendered per server version: see schemas/schemas.go.

CREATE TABLE IF NOT EXISTS requests
(
    uid               String,
    trace_id          String,
    span_id           String,
    parent_span_id    String,
    request_id        String,
    source            {{lc "String"}},
    span_name         String,
    service           {{lc "String"}},
    model             {{lc "String"}},
    host              {{lc "String"}},
    pod               String,
    namespace         {{lc "String"}},
    service_instance  String,
    engine            {{lc "String"}},
    gpu               {{lc "String"}},
    gpu_index         {{lc "String"}},
    start_ns          UInt64{{codec "Delta, ZSTD(1)"}},
    end_ns            UInt64{{codec "Delta, ZSTD(1)"}},
    start_time        DateTime,
    error             UInt8,
    finish_reason     {{lc "String"}},
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
    timeline_source   {{lc "String"}},
    itl_p50_ms        Float64,
    itl_p99_ms        Float64,
    itl_max_ms        Float64,
    stall_count       UInt32,
    stall_ms          Float64,
    retracts          UInt32,
    engine_match      {{lc "String"}},
    gpu_match         {{lc "String"}},
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
    enriched_at       DateTime{{index "idx_trace trace_id TYPE bloom_filter(0.01) GRANULARITY 4"}}{{index "idx_request request_id TYPE bloom_filter(0.01) GRANULARITY 4"}}
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(start_time)
ORDER BY (model, service, start_time, uid){{ttl "start_time + INTERVAL 30 DAY"}};

CREATE TABLE IF NOT EXISTS token_stalls
(
    request_uid      String,
    trace_id         String,
    service          {{lc "String"}},
    model            {{lc "String"}},
    host             {{lc "String"}},
    pod              String,
    engine           {{lc "String"}},
    gpu              {{lc "String"}},
    token_index      UInt32,
    start_ns         UInt64{{codec "Delta, ZSTD(1)"}},
    end_ns           UInt64{{codec "Delta, ZSTD(1)"}},
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
ORDER BY (model, start_time, request_uid, token_index){{ttl "start_time + INTERVAL 30 DAY"}};

CREATE TABLE IF NOT EXISTS gpu_samples
(
    host      {{lc "String"}},
    gpu       {{lc "String"}},
    gpu_index {{lc "String"}},
    pod       String,
    namespace {{lc "String"}},
    metric    {{lc "String"}},
    time_ns   UInt64{{codec "Delta, ZSTD(1)"}},
    time      DateTime,
    value     Float64{{codec "Gorilla, ZSTD(1)"}}
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(time)
ORDER BY (host, gpu, metric, time_ns){{ttl "time + INTERVAL 30 DAY"}};

CREATE TABLE IF NOT EXISTS engine_samples
(
    host             {{lc "String"}},
    pod              String,
    model            {{lc "String"}},
    engine           {{lc "String"}},
    service_instance String,
    metric           {{lc "String"}},
    time_ns          UInt64{{codec "Delta, ZSTD(1)"}},
    time             DateTime,
    value            Float64{{codec "Gorilla, ZSTD(1)"}},
    delta            Float64,
    rate_per_s       Float64
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(time)
ORDER BY (host, model, engine, metric, time_ns){{ttl "time + INTERVAL 30 DAY"}};

CREATE TABLE IF NOT EXISTS rejected_input
(
    received_at    DateTime,
    signal         {{lc "String"}},
    reason         {{lc "String"}},
    detail         String,
    topic          String,
    partition      Int32,
    offset         Int64,
    payload_bytes  UInt64,
    payload_prefix String
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(received_at)
ORDER BY (received_at, topic, partition, offset){{ttl "received_at + INTERVAL 7 DAY"}};
