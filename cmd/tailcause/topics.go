package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tailcause/tailcause/internal/kafkax"
	"github.com/tailcause/tailcause/schemas"
)

// cmdTopics creates the declared Kafka topics, or with --check only
// validates them.
func cmdTopics(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("topics", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var kf kafkaFlags
	kf.register(fs, e)
	replication := fs.Int("replication", 0, "replication factor for topics it creates (0: as declared in schemas/kafka/topics.json)")
	check := fs.Bool("check", false, "only validate: fail if a topic is missing or has other partition counts")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	sec, err := kf.security()
	if err != nil {
		return err
	}
	if *replication < 0 {
		return fmt.Errorf("%w: --replication %d: must be >= 0", errUsage, *replication)
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout %v: must be positive", errUsage, *timeout)
	}
	list := kf.list()
	if len(list) == 0 {
		return fmt.Errorf("%w: --kafka: no brokers given", errUsage)
	}
	topics, err := schemas.Topics()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	apply := kafkax.EnsureTopics
	if *check {
		apply = kafkax.CheckTopics
	}
	states, err := apply(ctx, list, sec, topics, *replication)
	if len(states) > 0 {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tSTATE\tPARTITIONS\tREPLICATION\tPROBLEMS")
		for _, st := range states {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", st.Name, st.Action, st.Partitions, st.ReplicationFactor, strings.Join(st.Problems, "; "))
		}
		_ = tw.Flush()
	}
	return err
}
