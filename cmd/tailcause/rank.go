package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tailcause/tailcause/causal"
	"github.com/tailcause/tailcause/causal/incident"
)

// scopeFlag collects --scope values: each is one or more k=v pairs,
// comma-separated.
type scopeFlag []map[string]string

func (s *scopeFlag) String() string {
	var parts []string
	for _, m := range *s {
		parts = append(parts, causal.ScopeString(m))
	}
	return strings.Join(parts, " ")
}

func (s *scopeFlag) Set(v string) error {
	m, err := parseScope(v)
	if err != nil {
		return err
	}
	*s = append(*s, m)
	return nil
}

// merged is the union of every --scope value (rank: one scope).
func (s scopeFlag) merged() (map[string]string, error) {
	out := map[string]string{}
	for _, m := range s {
		for k, v := range m {
			if old, dup := out[k]; dup && old != v {
				return nil, fmt.Errorf("scope key %s given twice (%q and %q)", k, old, v)
			}
			out[k] = v
		}
	}
	return out, nil
}

// parseScope reads "k=v,k=v" with keys among causal.ScopeColumns.
func parseScope(v string) (map[string]string, error) {
	allowed := map[string]bool{}
	for _, c := range causal.ScopeColumns() {
		allowed[c] = true
	}
	out := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("scope %q: want k=v[,k=v]", v)
		}
		if !allowed[k] {
			return nil, fmt.Errorf("scope key %q: want one of %s", k, strings.Join(causal.ScopeColumns(), ", "))
		}
		if val == "" {
			return nil, fmt.Errorf("scope %q: %s has no value (an unset variable?)", v, k)
		}
		out[k] = val
	}
	return out, nil
}

// sloFlags are the SLO flags rank and causal share.
type sloFlags struct {
	ms       float64
	signal   string
	quantile float64
}

func (s *sloFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&s.ms, "slo-ms", 0, "SLO threshold of the quantile, in ms; it alone decides a breach (0: no threshold, compare with the baseline)")
	fs.StringVar(&s.signal, "signal", "e2e_latency", "SLO signal: e2e_latency, ttft or tpot")
	fs.Float64Var(&s.quantile, "quantile", 0.99, "SLO quantile")
}

func (s *sloFlags) slo(scope map[string]string) causal.SLO {
	return causal.SLO{Signal: s.signal, Quantile: s.quantile, ThresholdMS: s.ms, Scope: scope}
}

func parseTime(name, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: --%s %q: want RFC 3339 (2026-03-14T09:00:00Z)", errUsage, name, v)
	}
	return t, nil
}

// cmdRank answers "why was the tail bad inside [from, to]?".
func cmdRank(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("rank", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var (
		sf     storeFlags
		slo    sloFlags
		scopes scopeFlag
	)
	sf.register(fs, e)
	slo.register(fs)
	from := fs.String("from", "", "window start, RFC 3339 (required)")
	to := fs.String("to", "", "window end, RFC 3339 (required)")
	bFrom := fs.String("baseline-from", "", "baseline start, RFC 3339 (default: the hour before --from when it has data, else the healthy start of the window)")
	bTo := fs.String("baseline-to", "", "baseline end, RFC 3339 (with --baseline-from)")
	fs.Var(&scopes, "scope", "k=v[,k=v]: which requests (repeatable), e.g. model=llama-3-8b; keys: "+strings.Join(causal.ScopeColumns(), ", "))
	format := fs.String("format", "json", "output: json (the v1 document) or table")
	store := fs.Bool("store", false, "also write a firing incident to the incidents and culprits tables")
	parallel := fs.Int("sweep-parallel", causal.DefaultConfig().SweepParallel, "without --scope: analyze this many models (then entity breaches) at once, each beyond the first on a copy of the snapshot in a session of its own; the same answer as 1 (one at a time)")
	sampleRows := fs.Int64("sample-rows", causal.DefaultConfig().SampleRows, "above this many window and baseline requests, the fits read every tail request and a hashed sample of the others, weighted (0: every request; counts, P99s and the breach verdict are exact either way)")
	explain := fs.Bool("explain", false, "also print every candidate cause examined, with its estimate or why it was skipped (to standard error)")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: tailcause rank --from RFC3339 --to RFC3339 [flags]\n\nRank the root causes of the tail latency inside [from, to). Without --scope, the whole fleet: every model and every engine or host far worse than its peers; one v1 document per breach (a JSON array, most severe first, when there are several). Prints one document with status \"ok\" and no culprits when nothing broke (exit status 0 either way).\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if *from == "" || *to == "" {
		return fmt.Errorf("%w: --from and --to are required", errUsage)
	}
	if *format != "json" && *format != "table" {
		return fmt.Errorf("%w: --format %q: want json or table", errUsage, *format)
	}
	var req causal.Request
	var err error
	if req.Window.Start, err = parseTime("from", *from); err != nil {
		return err
	}
	if req.Window.End, err = parseTime("to", *to); err != nil {
		return err
	}
	if (*bFrom == "") != (*bTo == "") {
		return fmt.Errorf("%w: --baseline-from and --baseline-to go together", errUsage)
	}
	if *bFrom != "" {
		var b causal.Interval
		if b.Start, err = parseTime("baseline-from", *bFrom); err != nil {
			return err
		}
		if b.End, err = parseTime("baseline-to", *bTo); err != nil {
			return err
		}
		req.Baseline = &b
	}
	scope, err := scopes.merged()
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	req.SLO = slo.slo(scope)

	if b := req.Baseline; b != nil && b.Start.Before(req.Window.End) && req.Window.Start.Before(b.End) {
		return fmt.Errorf("%w: --baseline-from/--baseline-to overlap the window", errUsage)
	}
	cfg := causal.DefaultConfig()
	cfg.Version, cfg.Logger, cfg.SweepParallel, cfg.SampleRows = version, e.log, *parallel, *sampleRows
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	st, err := sf.open(ctx, e, schemaCheck)
	if err != nil {
		return err
	}
	defer st.Close()
	db := causal.StoreDB(st)
	an, err := causal.NewAnalyzer(db, cfg)
	if err != nil {
		return err
	}
	var results []*causal.Analysis
	if len(scope) > 0 {
		res, err := an.Analyze(ctx, req)
		if err != nil {
			return fmt.Errorf("rank %s: %w", causal.ScopeString(scope), err)
		}
		results = append(results, res)
	} else {
		// The fleet-wide question: every scope and entity whose tail broke.
		sw, err := an.Sweep(ctx, causal.SweepRequest{SLO: req.SLO, Window: req.Window, Baseline: req.Baseline, LookBack: true})
		if err != nil {
			return fmt.Errorf("rank: %w", err)
		}
		results = sw.Answer()
	}
	for _, res := range results {
		if *store && res.Incident.Status == causal.StatusFiring {
			if err := storeRanked(ctx, db, res.Incident); err != nil {
				return err
			}
		}
		if *explain {
			writeCandidates(e.stderr, res)
		}
	}
	if *format == "table" {
		for i, res := range results {
			if i > 0 {
				fmt.Fprintln(e.stdout, "\n"+strings.Repeat("-", 72))
			}
			if err := writeTable(e.stdout, res); err != nil {
				return err
			}
		}
		return nil
	}
	if len(results) == 1 {
		return writeJSON(e.stdout, results[0].Incident)
	}
	docs := make([]causal.Incident, len(results))
	for i, res := range results {
		docs[i] = res.Incident
	}
	return writeJSON(e.stdout, docs)
}

// storeRanked writes an on-demand ranking as the next version of its
// incident (the id is derived from the scope and the breach start, so a
// rank of an incident the scheduled mode opened continues it).
func storeRanked(ctx context.Context, db causal.DB, in causal.Incident) error {
	recs, err := incident.Load(ctx, db, "")
	if err != nil {
		return err
	}
	rec := incident.Record{Incident: in, Version: 1, State: incident.StateFiring, OpenedAt: time.Now(), UpdatedAt: time.Now()}
	for _, r := range recs {
		if r.Incident.IncidentID == in.IncidentID {
			rec.Version, rec.State, rec.OpenedAt, rec.ResolvedAt = r.Version+1, r.State, r.OpenedAt, r.ResolvedAt
		}
	}
	return incident.Write(ctx, db, rec)
}

func writeJSON(w io.Writer, in any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // evidence reads "kv_usage_max >= 0.9", not \u003e
	return enc.Encode(in)
}

func writeTable(w io.Writer, res *causal.Analysis) error {
	in := res.Incident
	fmt.Fprintf(w, "status      %s %s\n", in.Status, in.IncidentID)
	fmt.Fprintf(w, "slo         %s P%g", in.SLO.Signal, 100*in.SLO.Quantile)
	if in.SLO.ThresholdMS > 0 {
		fmt.Fprintf(w, " <= %.0f ms", in.SLO.ThresholdMS)
	}
	fmt.Fprintf(w, "  scope %s\n", orDefault(causal.ScopeString(in.SLO.Scope), "(all)"))
	fmt.Fprintf(w, "window      %s .. %s  P%g %.0f ms [%.0f, %.0f], %d requests, %d in the tail\n",
		in.Window.Start.UTC().Format(time.RFC3339), in.Window.End.UTC().Format(time.RFC3339), 100*in.SLO.Quantile,
		in.ObservedP99MS, res.WindowQuantile.Lower, res.WindowQuantile.Upper, in.Requests, in.TailRequests)
	fmt.Fprintf(w, "baseline    %s .. %s  P%g %.0f ms (%s)\n",
		in.Baseline.Start.UTC().Format(time.RFC3339), in.Baseline.End.UTC().Format(time.RFC3339), 100*in.SLO.Quantile, in.BaselineP99MS, res.BaselineSource)
	for _, n := range in.Notes {
		fmt.Fprintf(w, "note        %s\n", n)
	}
	if len(in.Culprits) == 0 {
		if in.Status == causal.StatusFiring {
			fmt.Fprintln(w, "\nno credible culprit")
		}
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tCAUSE\tENTITY\tATTRIB\tEFFECT ms [95% CI]\tCOUNTERFACTUAL P99\tHEALTH")
	for _, c := range in.Culprits {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.0f%%\t%.0f [%.0f, %.0f]\t%.0f ms\t%.2f\n", c.Rank, c.Cause, causal.EntityString(c.Entity),
			100*c.AttributableFraction, c.EffectMS, c.CI95MS[0], c.CI95MS[1], c.CounterfactualP99MS, c.Health)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range in.Culprits {
		fmt.Fprintf(w, "\n%d. %s on %s\n", c.Rank, c.Cause, causal.EntityString(c.Entity))
		if len(c.AdjustedFor) > 0 {
			fmt.Fprintf(w, "   adjusted for: %s\n", strings.Join(c.AdjustedFor, ", "))
		}
		for _, ev := range c.Evidence {
			fmt.Fprintf(w, "   - %s\n", ev)
		}
		if len(c.ExemplarTraceIDs) > 0 {
			fmt.Fprintf(w, "   exemplars (slowest first): %s\n", strings.Join(c.ExemplarTraceIDs, " "))
		}
	}
	return nil
}

// writeCandidates lists every cause examined: why it is or is not a culprit.
func writeCandidates(w io.Writer, res *causal.Analysis) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CANDIDATE\tNODE\tENTITY\tCULPRIT\tATTRIB [95% CI]\tEFFECT ms\tADJUSTED FOR / SKIPPED")
	for _, c := range res.Candidates {
		why := strings.Join(c.AdjustedFor, ",")
		if c.Skipped != "" {
			why = "skipped: " + c.Skipped
		}
		af := c.Estimate.Attributed
		culprit := fmt.Sprint(c.Culprit)
		if c.Symptom {
			culprit += " (symptom)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.3f [%.3f, %.3f]\t%.0f\t%s\n", c.Cause, c.Node, causal.EntityString(c.Entity), culprit,
			af.Value, af.CI[0], af.CI[1], c.Estimate.EffectMS, why)
	}
	tw.Flush()
}
