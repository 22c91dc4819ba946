// Package incident is the incident side of the causal stage: persistence
// of incident versions in the incidents and culprits tables (Write, Load;
// the lifecycle writes through a small store, store.go) and the scheduled
// detector (Lifecycle, tailcause causal): per scope and round, sweep the
// newest window with a causal.Analyzer, open one incident per breach,
// write a new version when the top culprit changed and held, resolve after
// evaluations without the breach. It imports package causal, which does
// not import it. The decisions are in causal/DESIGN.md, "Persistence and
// lifecycle".
package incident
