package enrich

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tailcause/tailcause/enrich/enrichtest"
	"github.com/tailcause/tailcause/internal/chstore"
	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// TestRowWriterConformance runs one suite on every RowWriter: the
// in-memory one (enrichtest.Rows) and the ClickHouse store. The sink
// (write.go) relies on what it checks: rows acknowledged are stored, a
// failed insert stores nothing, and its *chstore.InsertError names the
// stage to blame with the retriable/permanent verdict of
// chstore.IsRetriable; the sink's isolation of refused rows then gives the
// same answer over both. Blocks of typed columns (chstore.Values, the
// sink's) and of rows (chstore.RowBlock) are both checked.
func TestRowWriterConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		w := enrichtest.NewRows()
		w.Create("iso", []enrichtest.Column{{Name: "t", Type: reflect.TypeFor[time.Time]()}, {Name: "v", Type: reflect.TypeFor[uint32]()}},
			func(r map[string]any) error {
				if r["v"].(uint32) >= 100 {
					return errors.New("Constraint `small` for table iso is violated")
				}
				return nil
			})
		testRowWriter(t, w, func(t *testing.T) []string {
			var out []string
			for _, r := range w.Rows("iso", "t", "v") {
				out = append(out, fmt.Sprintf("%d/%d", r[0].(time.Time).Unix(), r[1].(uint32)))
			}
			return out
		})
	})
	t.Run("clickhouse", func(t *testing.T) {
		st := chstoretest.Fresh(t)
		if err := st.Conn().Exec(context.Background(), `CREATE TABLE iso (t DateTime, v UInt32, CONSTRAINT small CHECK v < 100)
ENGINE = MergeTree PARTITION BY toYYYYMMDD(t) ORDER BY (t, v)`); err != nil {
			t.Fatal(err)
		}
		testRowWriter(t, st, func(t *testing.T) []string {
			rows, err := st.Conn().Query(context.Background(), "SELECT toUnixTimestamp(t), v FROM iso")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var out []string
			for rows.Next() {
				var ts, v uint32
				if err := rows.Scan(&ts, &v); err != nil {
					t.Fatal(err)
				}
				out = append(out, fmt.Sprintf("%d/%d", ts, v))
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		})
	})
}

// testRowWriter checks w, whose table iso (t DateTime, v UInt32) refuses
// v >= 100 as a CHECK constraint; stored reads iso's rows as "unix/v".
func testRowWriter(t *testing.T, w RowWriter, stored func(t *testing.T) []string) {
	ctx := context.Background()
	iso := chstore.Table{Name: "iso", Columns: []string{"t", "v"}}
	day := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	var want []string
	check := func(what string) {
		t.Helper()
		got := stored(t)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: iso holds %v, want %v", what, got, want)
		}
	}
	refused := func(what string, err error, stage chstore.InsertStage, row int) {
		t.Helper()
		var ie *chstore.InsertError
		if !errors.As(err, &ie) {
			t.Errorf("%s: %v, want a *chstore.InsertError", what, err)
			return
		}
		if ie.Stage != stage || stage == chstore.StageAppend && ie.Row != row {
			t.Errorf("%s: stage %v row %d (%v), want stage %v row %d", what, ie.Stage, ie.Row, err, stage, row)
		}
		if chstore.IsRetriable(err) {
			t.Errorf("%s: %v is retriable, want permanent", what, err)
		}
	}

	rowBlock := func(rows [][]any) chstore.Block {
		t.Helper()
		b, err := chstore.RowBlock(len(iso.Columns), rows)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	typed := func(ts []time.Time, vs []uint32) chstore.Block {
		return chstore.Block{chstore.Values[time.Time](ts), chstore.Values[uint32](vs)}
	}
	if err := w.InsertBlock(ctx, iso, typed(nil, nil)); err != nil {
		t.Errorf("insert of no rows: %v", err)
	}
	if err := w.InsertBlock(ctx, iso, nil); err != nil {
		t.Errorf("insert of no columns: %v", err)
	}
	good := [][]any{{day, uint32(1)}, {day.Add(time.Hour), uint32(2)}, {day.AddDate(0, 0, 1), uint32(3)}}
	if err := w.InsertBlock(ctx, iso, rowBlock(good)); err != nil {
		t.Fatalf("insert good rows: %v", err)
	}
	for _, r := range good {
		want = append(want, fmt.Sprintf("%d/%d", r[0].(time.Time).Unix(), r[1].(uint32)))
	}
	check("after good rows")
	goodTyped := typed([]time.Time{day.Add(2 * time.Hour), day.AddDate(0, 0, 2)}, []uint32{7, 8})
	if err := w.InsertBlock(ctx, iso, goodTyped); err != nil {
		t.Fatalf("insert a typed block: %v", err)
	}
	want = append(want, fmt.Sprintf("%d/7", day.Add(2*time.Hour).Unix()), fmt.Sprintf("%d/8", day.AddDate(0, 0, 2).Unix()))
	check("after a typed block")

	refused("unknown table", w.InsertBlock(ctx, chstore.Table{Name: "nope", Columns: iso.Columns}, rowBlock(good)), chstore.StagePrepare, 0)
	refused("unknown column", w.InsertBlock(ctx, chstore.Table{Name: "iso", Columns: []string{"t", "w"}}, goodTyped), chstore.StagePrepare, 0)
	refused("a block of the wrong width", w.InsertBlock(ctx, iso, goodTyped[:1]), chstore.StagePrepare, 0)
	refused("columns of unequal length", w.InsertBlock(ctx, iso, typed([]time.Time{day, day}, []uint32{9})), chstore.StagePrepare, 0)
	refused("an empty first column", w.InsertBlock(ctx, iso, typed(nil, []uint32{9})), chstore.StagePrepare, 0)
	refused("a value the client cannot encode", w.InsertBlock(ctx, iso, rowBlock([][]any{{day, uint32(4)}, {day, uint32(5)}, {day, "seven"}})), chstore.StageAppend, 2)
	refused("a column the client cannot encode", w.InsertBlock(ctx, iso, chstore.Block{chstore.Values[time.Time]{day, day}, chstore.Values[string]{"4", "5"}}), chstore.StageAppend, 0)
	refused("a row the table's check refuses", w.InsertBlock(ctx, iso, rowBlock([][]any{{day, uint32(500)}, {day, uint32(6)}})), chstore.StageSend, 0)
	refused("a typed row the table's check refuses", w.InsertBlock(ctx, iso, typed([]time.Time{day, day}, []uint32{6, 600})), chstore.StageSend, 0)
	check("after refused inserts (none may store a row)")

	// The sink's isolation: the refused rows are named, every other row
	// is written.
	p, err := New(testConfig([]string{"127.0.0.1:1"}, "s", "m", "d"), w, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]any
	for i := range 200 {
		rows = append(rows, []any{day.Add(time.Duration(i) * time.Minute), uint32(10 + i%80)})
	}
	rows[17][1] = uint32(500) // refused with the block
	rows[120][1] = uint32(700)
	rows[50][1] = "seven" // cannot be encoded
	got, err := p.insertRows(ctx, iso, rowBlock(rows))
	if err != nil {
		t.Fatal(err)
	}
	var idx []int
	for _, r := range got {
		idx = append(idx, r.index)
	}
	if fmt.Sprint(idx) != "[17 50 120]" {
		t.Errorf("refused rows %v, want [17 50 120]", idx)
	}
	for i, r := range rows {
		if i != 17 && i != 50 && i != 120 {
			want = append(want, fmt.Sprintf("%d/%d", r[0].(time.Time).Unix(), r[1].(uint32)))
		}
	}
	check("after the sink's isolation")
}
