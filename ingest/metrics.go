package ingest

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// transport and signal indices for pre-created series.
type transport int

const (
	transportGRPC transport = iota
	transportHTTP
	numTransports
)

func (t transport) String() string { return [...]string{"grpc", "http"}[t] }

type signal int

const (
	signalTraces signal = iota
	signalMetrics
	signalLogs
	numSignals
)

func (s signal) String() string { return [...]string{"traces", "metrics", "logs"}[s] }

// metrics are the server's Prometheus series. Label values come from the
// fixed sets above and from reasons, so cardinality is bounded.
type metrics struct {
	requests  [numTransports][numSignals]prometheus.Counter
	bytes     [numTransports][numSignals]prometheus.Counter
	items     [numTransports][numSignals]prometheus.Counter
	duration  [numTransports][numSignals]prometheus.Observer
	rejected  *prometheus.CounterVec
	inflight  prometheus.Gauge
	records   [numSignals]prometheus.Counter              // by the signal's topic
	recBytes  [numSignals]prometheus.Counter              // by the signal's topic
	kafkaTime [numSignals][numResults]prometheus.Observer // by topic and result
}

// result of one Kafka write, for kafka_write_duration_seconds.
type result int

const (
	resultOK result = iota
	resultRetriable
	resultPermanent
	numResults
)

func (r result) String() string { return [...]string{"ok", "retriable", "permanent"}[r] }

func newMetrics(reg prometheus.Registerer, topics [numSignals]string) (*metrics, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tailcause", Subsystem: "ingest", Name: "requests_total",
		Help: "OTLP export requests received, by transport and signal.",
	}, []string{"transport", "signal"})
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tailcause", Subsystem: "ingest", Name: "received_bytes_total",
		Help: "Uncompressed OTLP payload bytes of accepted requests.",
	}, []string{"transport", "signal"})
	items := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tailcause", Subsystem: "ingest", Name: "accepted_items_total",
		Help: "Spans, metric data points or log records acknowledged to clients.",
	}, []string{"transport", "signal"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "tailcause", Subsystem: "ingest", Name: "request_duration_seconds",
		Help:    "Time from receiving a request to answering it.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 10),
	}, []string{"transport", "signal"})
	records := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tailcause", Subsystem: "ingest", Name: "kafka_records_total",
		Help: "Records Kafka acknowledged, by topic.",
	}, []string{"topic"})
	recBytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "tailcause", Subsystem: "ingest", Name: "kafka_record_bytes_total",
		Help: "Bytes of record values Kafka acknowledged, by topic.",
	}, []string{"topic"})
	kafkaTime := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "tailcause", Subsystem: "ingest", Name: "kafka_write_duration_seconds",
		Help:    "Time to write one request's records and get Kafka's acknowledgement, by result (ok, retriable, permanent).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
	}, []string{"topic", "result"})
	m := &metrics{
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tailcause", Subsystem: "ingest", Name: "rejected_requests_total",
			Help: "Requests not acknowledged, by reason.",
		}, []string{"transport", "signal", "reason"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "tailcause", Subsystem: "ingest", Name: "inflight_requests",
			Help: "Requests being handled now (bounded by the in-flight limit).",
		}),
	}
	for _, c := range []prometheus.Collector{requests, bytes, items, duration, m.rejected, m.inflight, records, recBytes, kafkaTime} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("register ingest metrics: %w (one registry per server)", err)
			}
			return nil, fmt.Errorf("register ingest metrics: %w", err)
		}
	}
	// Create every series up front: dashboards see zeros, not gaps, and the
	// hot path does no label lookups.
	for t := range numTransports {
		for s := range numSignals {
			m.requests[t][s] = requests.WithLabelValues(t.String(), s.String())
			m.bytes[t][s] = bytes.WithLabelValues(t.String(), s.String())
			m.items[t][s] = items.WithLabelValues(t.String(), s.String())
			m.duration[t][s] = duration.WithLabelValues(t.String(), s.String())
			for _, r := range allReasons {
				m.rejected.WithLabelValues(t.String(), s.String(), string(r))
			}
		}
	}
	for s, topic := range topics {
		m.records[s] = records.WithLabelValues(topic)
		m.recBytes[s] = recBytes.WithLabelValues(topic)
		for r := range numResults {
			m.kafkaTime[s][r] = kafkaTime.WithLabelValues(topic, r.String())
		}
	}
	return m, nil
}
