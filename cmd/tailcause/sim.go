package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/lab/faultlab"
	"github.com/tailcause/tailcause/lab/faultlab/sink"
)

// cmdSim runs the fault lab: a simulated LLM-serving fleet that emits
// real-format telemetry with known root causes, plus its ground truth.
func cmdSim(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	d := faultlab.DefaultConfig()
	var (
		list        = fs.Bool("list", false, "list the built-in scenarios and exit")
		scenario    = fs.String("scenario", "baseline", "built-in scenario name, or a scenario .json file")
		seed        = fs.Uint64("seed", 1, "random seed: the same seed gives the same output")
		duration    = fs.Duration("duration", 0, "simulated time (default: the scenario's, else 1h)")
		rateScale   = fs.Float64("rate-scale", 0, "multiply every model's request rate (default: the scenario's, else 1)")
		compression = fs.Float64("time-compression", 0, "replay traces this many times faster than recorded (0: pick per model from its rate)")
		trace       = fs.String("trace", "", "workload trace for every model: built-in name ("+strings.Join(faultlab.TraceNames(), ", ")+") or an Azure CSV / Mooncake JSONL file")
		start       = fs.String("start", "", `simulated start: RFC3339 time, "now" (the run ends at the wall clock's now), or empty for `+faultlab.DefaultStart().Format(time.RFC3339))
		stepShare   = fs.Float64("step-span-share", d.StepSpanShare, "share of engines exporting SGLang-style spans with per-step decode_loop children")
		vllmIv      = fs.Duration("vllm-interval", d.VLLMScrapeInterval, "scrape interval of the vLLM /metrics endpoints")
		dcgmIv      = fs.Duration("dcgm-interval", d.DCGMScrapeInterval, "collection interval of dcgm-exporter")
		flushIv     = fs.Duration("flush-interval", d.FlushInterval, "simulated time a batch may wait before it is sent")
		out         = fs.String("out", "", `write OTLP-JSON lines to this file ("-": standard output)`)
		otlpGRPC    = fs.String("otlp-grpc", "", "send OTLP/gRPC to host:port")
		otlpHTTP    = fs.String("otlp-http", "", "send OTLP/HTTP protobuf to this base URL (http://host:4318)")
		kafkaAddr   = fs.String("kafka", "", "write to Kafka as the Collector's kafka exporter does: comma-separated brokers")
		spansTopic  = fs.String("kafka-spans-topic", "otlp_spans", "Kafka topic for spans")
		metricTopic = fs.String("kafka-metrics-topic", "otlp_metrics", "Kafka topic for metrics")
		truthPath   = fs.String("truth", "", `write the ground truth JSON here ("-": standard output; default: next to --out, else sim-truth.json)`)
		progress    = fs.Bool("progress", false, "print progress to standard error")
		ks          kafkaSecurityFlags
	)
	ks.register(fs, e)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: tailcause sim [flags]\n\nSimulate an LLM-serving fleet with injected faults and emit its telemetry.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if *list {
		return listScenarios(e.stdout)
	}
	sec, err := ks.security()
	if err != nil {
		return err
	}

	sc, err := faultlab.LoadScenario(*scenario)
	if err != nil {
		return err
	}
	cfg := d
	cfg.Seed = *seed
	cfg.Duration = *duration
	cfg.RateScale = *rateScale
	cfg.TimeCompression = *compression
	cfg.TraceOverride = *trace
	cfg.StepSpanShare = *stepShare
	cfg.VLLMScrapeInterval = *vllmIv
	cfg.DCGMScrapeInterval = *dcgmIv
	cfg.FlushInterval = *flushIv
	cfg.Scenario = sc
	runLen := cfg.Duration
	if runLen == 0 {
		runLen = time.Hour
		if sd, err := time.ParseDuration(sc.Duration); err == nil && sc.Duration != "" {
			runLen = sd
		}
	}
	switch *start {
	case "":
	case "now":
		cfg.Start = time.Now().UTC().Truncate(time.Millisecond).Add(-runLen)
	default:
		t, err := time.Parse(time.RFC3339Nano, *start)
		if err != nil {
			return fmt.Errorf("%w: --start: want RFC3339 or \"now\": %v", errUsage, err)
		}
		cfg.Start = t
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}

	sinks, closers, err := openSinks(*out, *otlpGRPC, *otlpHTTP, *kafkaAddr, *spansTopic, *metricTopic, sec)
	if err != nil {
		return err
	}
	closeAll := func() error {
		var errs []error
		for _, c := range closers {
			errs = append(errs, c.Close())
		}
		return errors.Join(errs...)
	}
	var s faultlab.Sink = sinks[0]
	if len(sinks) > 1 {
		s = sinks
	}
	var opts []faultlab.Option
	if *progress {
		opts = append(opts, faultlab.WithProgress(e.stderr, time.Now, 2*time.Second))
	}
	truth, runErr := faultlab.Run(ctx, cfg, s, opts...)
	closeErr := closeAll()
	if truth != nil {
		tp := *truthPath
		if tp == "" {
			tp = "sim-truth.json"
			if *out != "" && *out != "-" {
				tp = strings.TrimSuffix(*out, ".jsonl") + ".truth.json"
			}
		}
		if err := writeTruth(tp, e.stdout, truth); err != nil {
			return errors.Join(runErr, err)
		}
		if runErr == nil {
			st := truth.Stats
			fmt.Fprintf(e.stderr, "sim %s seed %d: %v simulated, %d requests (%d errors), %d spans (%d step spans), %d metric points; ground truth in %s\n",
				truth.Scenario, truth.Seed, time.Duration(truth.DurationS*float64(time.Second)), st.Requests, st.Errors, st.Spans, st.StepSpans, st.MetricPoints, tp)
		}
	}
	return errors.Join(runErr, closeErr)
}

func listScenarios(w io.Writer) error {
	infos, err := faultlab.ListScenarios()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tCAUSES\tDESCRIPTION")
	for _, in := range infos {
		c := strings.Join(in.Causes, ",")
		if c == "" {
			c = "(none)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", in.Name, c, in.Description)
	}
	fmt.Fprintln(tw, "\nCAUSE\tTARGETS\tMAGNITUDE")
	for _, c := range faultlab.Causes() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.ID, strings.Join(c.Targets, ","), c.Magnitude)
	}
	fmt.Fprintln(tw, "\nDECOY\tTARGETS\tMAGNITUDE")
	for _, c := range faultlab.DecoyKinds() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.ID, strings.Join(c.Targets, ","), c.Magnitude)
	}
	return tw.Flush()
}

func openSinks(out, grpcAddr, httpURL, brokers, spansTopic, metricsTopic string, sec kafkax.Security) (sink.Multi, []io.Closer, error) {
	var sinks sink.Multi
	var closers []io.Closer
	fail := func(err error) (sink.Multi, []io.Closer, error) {
		for _, c := range closers {
			c.Close()
		}
		return nil, nil, err
	}
	if out != "" {
		f, err := sink.CreateFile(out)
		if err != nil {
			return fail(err)
		}
		sinks, closers = append(sinks, f), append(closers, f)
	}
	if grpcAddr != "" {
		g, err := sink.DialGRPC(grpcAddr)
		if err != nil {
			return fail(err)
		}
		sinks, closers = append(sinks, g), append(closers, g)
	}
	if httpURL != "" {
		h, err := sink.NewHTTP(httpURL, nil)
		if err != nil {
			return fail(fmt.Errorf("%w: %v", errUsage, err))
		}
		sinks = append(sinks, h)
	}
	if brokers != "" {
		k, err := sink.NewKafka(sink.KafkaConfig{Brokers: strings.Split(brokers, ","), TracesTopic: spansTopic, MetricsTopic: metricsTopic, Security: sec})
		if err != nil {
			return fail(err)
		}
		sinks, closers = append(sinks, k), append(closers, k)
	}
	if len(sinks) == 0 {
		return fail(fmt.Errorf("%w: no output: give --out, --otlp-grpc, --otlp-http or --kafka", errUsage))
	}
	return sinks, closers, nil
}

func writeTruth(path string, stdout io.Writer, t *faultlab.Truth) error {
	if path == "-" {
		return t.WriteJSON(stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write ground truth: %w", err)
	}
	if err := t.WriteJSON(f); err != nil {
		f.Close()
		return fmt.Errorf("write ground truth: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write ground truth: %w", err)
	}
	return nil
}
