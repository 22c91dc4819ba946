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
ORDER BY incident_id{{fixedTTL "opened_at + INTERVAL 365 DAY"}};

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
ORDER BY (incident_id, version, rank){{fixedTTL "computed_at + INTERVAL 365 DAY"}};
