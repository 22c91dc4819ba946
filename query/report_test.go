package query

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tailcause/tailcause/internal/chstore/chstoretest"
)

// wellFormed parses an SVG document to the end.
func wellFormed(t *testing.T, name string, svg []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("%s: not well-formed XML: %v", name, err)
		}
	}
	if !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Errorf("%s: does not start with <svg (the XML prolog must be dropped for inlining)", name)
	}
}

func hexColor(c color.RGBA) string { return fmt.Sprintf("#%02X%02X%02X", c.R, c.G, c.B) }

// TestPlots draws every figure from synthetic data, and the empty cases.
func TestPlots(t *testing.T) {
	levels := quantileLevels()
	base, win := cdf{levels: levels, n: 100}, cdf{levels: levels, n: 100}
	for _, l := range levels {
		base.values = append(base.values, 800+400*l)
		win.values = append(win.values, 900+4000*l*l)
	}
	var pts []seriesPoint
	for m := 0; m < 45; m++ {
		p := 1000.0
		if m >= 30 {
			p = 4000
		}
		pts = append(pts, seriesPoint{minute: t0.Add(time.Duration(m) * time.Minute), p99: p, signal: 0.5 + float64(m)/100})
	}
	pts[3].signal = math.NaN()
	cs := []culpritDoc{
		{Rank: 1, Cause: "kv_cache.preemption", Entity: map[string]string{"host": "node-2", "gpu": "<script>alert(1)</script>"}, AttributableFraction: 0.6, CounterfactualP99MS: 1900, Health: 0.1},
		{Rank: 2, Cause: "queue.saturation", Entity: map[string]string{"host": "node-2"}, AttributableFraction: 0.2, CounterfactualP99MS: 3500, Health: 0.4},
	}
	win2 := interval{winStart, winEnd}
	for _, c := range []struct {
		name   string
		draw   func() ([]byte, error)
		colour color.RGBA
	}{
		{"latency_cdf", func() ([]byte, error) { return plotLatencyCDF("e2e_ms", base, win, 2500) }, colBaseline},
		{"p99_signal", func() ([]byte, error) { return plotP99Signal(pts, 2500, win2, "KV cache usage") }, colSignal},
		{"contributions", func() ([]byte, error) { return plotContributions(cs) }, colContribution},
		{"counterfactual", func() ([]byte, error) { return plotCounterfactual(cs, 4200, 1000, 2500) }, colCounterfactual},
		{"health", func() ([]byte, error) { return plotHealth(cs, nil) }, colHealth},
		{"entity health", func() ([]byte, error) {
			return plotHealth(cs, []healthDoc{{Kind: "host", Entity: map[string]string{"host": "<script>"}, Health: 0.02, Requests: 900, TailRequests: 80}})
		}, colHealth},
		{"empty cdf", func() ([]byte, error) { return plotLatencyCDF("e2e_ms", cdf{}, cdf{}, 2500) }, color.RGBA{A: 255}},
		{"empty series", func() ([]byte, error) { return plotP99Signal(nil, 2500, win2, "x") }, color.RGBA{A: 255}},
		{"no culprits", func() ([]byte, error) { return plotContributions(nil) }, color.RGBA{A: 255}},
		{"no counterfactual", func() ([]byte, error) { return plotCounterfactual(nil, 1, 1, 1) }, color.RGBA{A: 255}},
		{"no health", func() ([]byte, error) { return plotHealth(nil, nil) }, color.RGBA{A: 255}},
	} {
		svg, err := c.draw()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		wellFormed(t, c.name, svg)
		if c.colour != (color.RGBA{A: 255}) && !bytes.Contains(svg, []byte(hexColor(c.colour))) {
			t.Errorf("%s: colour %s not drawn", c.name, hexColor(c.colour))
		}
		if bytes.Contains(svg, []byte("<script>")) {
			t.Errorf("%s: entity text is not escaped", c.name)
		}
	}
}

// chromium finds a headless browser: Debian's chromium package.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on PATH: install Debian's chromium package (apt-get install -y chromium) to run the report browser test"
	if os.Getenv("CI") != "" {
		t.Fatal("CI must not skip the browser test: " + msg)
	}
	t.Skip(msg)
	return ""
}

// runChromium runs one headless invocation and returns its stdout.
func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errOut.String())
	}
	return out.Bytes()
}

// TestReportInChromium renders the report of the fixture incident in
// headless Chromium and checks the screenshot: the title is in the DOM, and
// every figure's colour is drawn, in its own region, with enough pixels.
// Set TAILCAUSE_REPORT_SCREENSHOT=<file.png> to keep the screenshot.
func TestReportInChromium(t *testing.T) {
	bin := chromium(t)
	srv, hs := testServer(t, nil)
	u, err := url.Parse(srv.ReportURL("inc-kv"))
	if err != nil {
		t.Fatal(err)
	}
	page := hs.URL + u.RequestURI() // a signed link: the browser sends no token

	dom := string(runChromium(t, bin, "--dump-dom", page))
	for _, want := range []string{
		"<title>tailcause incident inc-kv</title>",
		`<h1 id="title">Incident inc-kv: P99 4253 ms against 2500 ms</h1>`,
		"kv_cache.preemption", "host=node-2 engine=0 gpu=GPU-b",
		`<figure id="fig-latency_cdf">`, `<figure id="fig-health">`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("DOM lacks %q", want)
		}
	}
	if n := strings.Count(dom, "<svg"); n != len(plotNames) {
		t.Errorf("DOM has %d <svg> elements, want %d", n, len(plotNames))
	}

	shot := filepath.Join(t.TempDir(), "report.png")
	runChromium(t, bin, "--screenshot="+shot, "--window-size=1280,2000", page)
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("read screenshot: %v", err)
	}
	if keep := os.Getenv("TAILCAUSE_REPORT_SCREENSHOT"); keep != "" {
		if err := os.WriteFile(keep, b, 0o644); err != nil {
			t.Errorf("keep screenshot: %v", err)
		}
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("decode screenshot: %v", err)
	}
	bounds := img.Bounds()
	if bounds.Dx() != 1280 || bounds.Dy() != 2000 {
		t.Fatalf("screenshot is %v, want 1280x2000", bounds.Size())
	}

	// Each figure has a colour of its own; find where it is drawn.
	figures := []struct {
		name    string
		colour  color.RGBA
		minPix  int
		minSize int // px, both sides of the bounding box
	}{
		{"latency_cdf (baseline line)", colBaseline, 150, 40},
		{"p99_signal (signal line)", colSignal, 150, 40},
		{"contributions (bars)", colContribution, 1500, 40},
		{"counterfactual (bars)", colCounterfactual, 1500, 40},
		{"health (bars)", colHealth, 1500, 40},
	}
	boxes := make([]image.Rectangle, len(figures))
	for i, f := range figures {
		n, box := colourPixels(img, f.colour, 10)
		boxes[i] = box
		t.Logf("%-28s %6d px in %v", f.name, n, box)
		if n < f.minPix {
			t.Errorf("%s: %d pixels of %s, want at least %d: the figure is missing or blank", f.name, n, hexColor(f.colour), f.minPix)
			continue
		}
		if box.Dx() < f.minSize || box.Dy() < f.minSize/4 {
			t.Errorf("%s: drawn in %v only", f.name, box)
		}
		// The figure region is not blank: axes, labels and ink around the
		// colour (non-white share of its bounding box, widened).
		region := box.Inset(-20).Intersect(bounds)
		if ink := inkShare(img, region); ink < 0.03 {
			t.Errorf("%s: region %v is %.1f%% non-white, want at least 3%%", f.name, region, 100*ink)
		}
	}
	// Bars of different figures do not overlap: three separate figures.
	for i := 2; i < len(boxes); i++ {
		for j := i + 1; j < len(boxes); j++ {
			if boxes[i].Overlaps(boxes[j]) {
				t.Errorf("%s %v and %s %v overlap", figures[i].name, boxes[i], figures[j].name, boxes[j])
			}
		}
	}
	// The header (title text) is rendered: ink in the top band.
	if ink := inkShare(img, image.Rect(0, 0, 1280, 80)); ink < 0.01 {
		t.Errorf("title band is %.2f%% non-white: the title did not render", 100*ink)
	}
}

func colourPixels(img image.Image, c color.RGBA, tol int) (int, image.Rectangle) {
	b := img.Bounds()
	n := 0
	box := image.Rectangle{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if abs(int(r>>8)-int(c.R)) <= tol && abs(int(g>>8)-int(c.G)) <= tol && abs(int(bl>>8)-int(c.B)) <= tol {
				n++
				box = box.Union(image.Rect(x, y, x+1, y+1))
			}
		}
	}
	return n, box
}

func inkShare(img image.Image, r image.Rectangle) float64 {
	if r.Empty() {
		return 0
	}
	ink := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			if cr>>8 < 235 || cg>>8 < 235 || cb>>8 < 235 {
				ink++
			}
		}
	}
	return float64(ink) / float64(r.Dx()*r.Dy())
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// TestReportRoutes: every plot of the fixture incident is served as SVG,
// and the report of an incident without culprits renders with its notes.
func TestReportRoutes(t *testing.T) {
	st := chstoretest.Fresh(t)
	loadFixture(t, st)
	f := incFix{"inc-quiet", 1, "firing", "mistral-7b", t0.Add(5 * time.Minute), [2]time.Time{t0.Add(5 * time.Minute), t0.Add(15 * time.Minute)},
		v1("inc-quiet", "ok", "mistral-7b", [2]time.Time{t0.Add(5 * time.Minute), t0.Add(15 * time.Minute)}, [2]time.Time{}, 500, nil)}
	f.doc["baseline"] = map[string]string{"start": "0001-01-01T00:00:00Z", "end": "0001-01-01T00:00:00Z"}
	row, _ := incidentRow(f)
	row[11], row[12] = time.Unix(0, 0).UTC(), time.Unix(0, 0).UTC()
	if err := st.Insert(context.Background(), incidentCols, [][]any{row}); err != nil {
		t.Fatal(err)
	}
	_, hs := serverOver(t, st, nil)
	for _, name := range plotNames {
		status, ct, body := call(t, hs, "GET", "/incidents/inc-kv/plots/"+name+".svg", testToken)
		if status != 200 || ct != "image/svg+xml" {
			t.Fatalf("%s: %d %s", name, status, ct)
		}
		wellFormed(t, name, body)
	}
	status, ct, body := call(t, hs, "GET", "/incidents/inc-quiet/report", testToken)
	if status != 200 || !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("report without culprits: %d %s\n%s", status, ct, body)
	}
	for _, want := range []string{"No culprits", "no culprits", "window (20 requests)"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("report without culprits lacks %q", want)
		}
	}
	problem(t, hs, "GET", "/incidents/nope/report", testToken, 404, "not-found")
}

// TestEntityCondsTensorParallelGPU: the requests of a GPU that a
// tensor-parallel engine shares name no GPU; entityConds finds them
// through the engine's GPU samples, and only them.
func TestEntityCondsTensorParallelGPU(t *testing.T) {
	st := chstoretest.Fresh(t)
	ctx := context.Background()
	mk := func(uid, host, pod, gpu string) []any {
		r := requestRow(reqFix{uid: uid, trace: "t" + uid, model: "llama-70b", service: "chat", host: host, gpu: gpu, engine: "0", start: winStart, e2e: 900, ttft: 90, kvMax: 0.5})
		r[8] = pod // requestCols: pod
		return r
	}
	rows := [][]any{
		mk("tp-1", "node-4", "tp-pod", ""), mk("tp-2", "node-4", "tp-pod", ""),
		mk("other-engine", "node-4", "other-pod", ""), mk("single", "node-4", "single-pod", "GPU-s"),
	}
	if err := st.Insert(ctx, requestCols, rows); err != nil {
		t.Fatal(err)
	}
	samples := requestCols
	samples.Name, samples.Columns = "gpu_samples", []string{"host", "gpu", "gpu_index", "pod", "namespace", "metric", "time_ns", "time", "value"}
	var srows [][]any
	for i, g := range []string{"GPU-t0", "GPU-t1"} {
		srows = append(srows, []any{"node-4", g, fmt.Sprint(i), "tp-pod", "default", "clock_event_reasons", uint64(winStart.UnixNano()), winStart, 0.0})
	}
	srows = append(srows, []any{"node-4", "GPU-o", "0", "other-pod", "default", "clock_event_reasons", uint64(winStart.UnixNano()), winStart, 0.0})
	if err := st.Insert(ctx, samples, srows); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		entity map[string]string
		want   []string
	}{
		{map[string]string{"host": "node-4", "gpu": "GPU-t1"}, []string{"tp-1", "tp-2"}},
		{map[string]string{"host": "node-4", "gpu": "GPU-s"}, []string{"single"}},
		{map[string]string{"host": "node-4", "pod": "other-pod", "engine": "0"}, []string{"other-engine"}},
	} {
		where, args := entityConds(tc.entity)
		var got []string
		rs, err := st.Conn().Query(ctx, "SELECT uid FROM requests WHERE "+where+" ORDER BY uid", args...)
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var u string
			if err := rs.Scan(&u); err != nil {
				t.Fatal(err)
			}
			got = append(got, u)
		}
		rs.Close()
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%v: requests %v, want %v", tc.entity, got, tc.want)
		}
	}
}
