// Package eval is the fault-lab evaluation of the causal ranking
// (`tailcause eval`): it draws randomized fleets and faults from the fault
// lab (faultlab.RandomCase), runs each through the real pipeline (the lab's
// Kafka output through the Collector's encoding into an in-process broker,
// the enricher, ClickHouse), asks the fleet-wide question an on-call
// engineer asks ((*causal.Analyzer).Sweep over a window chosen without the
// truth, with and without healthy data before it; optionally a replay of
// the scheduled detector), and scores the answers strictly against the
// ground truth (Scorer), next to the two baselines of causal.CompareRankings.
//
// The truth is read only to score: never to choose the window, the scope or
// the candidates of a question.
package eval
