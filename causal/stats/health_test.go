package stats

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/tailcause/tailcause/causal/stats/statstest"
)

type healthReference struct {
	Betainc []struct{ A, B, X, Betainc float64 } `json:"betainc"`
	PPF     []struct{ A, B, P, PPF float64 }     `json:"beta_ppf"`
	Peers   []struct{ Tail, N float64 }          `json:"peers"`
	Prior   struct{ Alpha, Beta float64 }        `json:"peer_prior_mle"`
	Probe   struct {
		Tail, N, Q90, Health float64
	} `json:"probe"`
	Peer0Health float64 `json:"peer0_health"`
	Ranks       []struct {
		N     int     `json:"n"`
		Q     float64 `json:"q"`
		Level float64 `json:"level"`
		L     int     `json:"l"`
		U     int     `json:"u"`
	} `json:"quantile_ranks"`
}

func loadHealthRef(t *testing.T) healthReference {
	t.Helper()
	b, err := os.ReadFile("testdata/health_reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var r healthReference
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestBetaClosedForms(t *testing.T) {
	ref := loadHealthRef(t)
	for _, c := range ref.Betainc {
		statstest.Near(t, "I_x(a,b)", BetaPrior{Alpha: c.A, Beta: c.B}.CDF(c.X), c.Betainc, 1e-9)
	}
	for _, c := range ref.PPF {
		statstest.Near(t, "beta quantile", BetaPrior{Alpha: c.A, Beta: c.B}.Quantile(c.P), c.PPF, 1e-8)
	}
	// Conjugate update and its moments.
	post := BetaPrior{Alpha: 2, Beta: 98}.Posterior(7, 300)
	if post.Alpha != 9 || post.Beta != 391 {
		t.Fatalf("posterior %+v", post)
	}
	statstest.Near(t, "mean", post.Mean(), 9.0/400, 1e-15)
	statstest.Near(t, "variance", post.Variance(), 9.0*391/(400*400*401), 1e-14)
}

func TestFitBetaPriorMLE(t *testing.T) {
	ref := loadHealthRef(t)
	var peers []EntityCounts
	for _, p := range ref.Peers {
		peers = append(peers, EntityCounts{Tail: p.Tail, N: p.N})
	}
	prior, err := FitBetaPrior(peers, nil)
	if err != nil {
		t.Fatal(err)
	}
	if prior.Method != "mle" {
		t.Errorf("method %q, want mle", prior.Method)
	}
	statstest.Near(t, "alpha", prior.Alpha, ref.Prior.Alpha, 1e-3)
	statstest.Near(t, "beta", prior.Beta, ref.Prior.Beta, 1e-3)

	// Score the probe against these peers (all of them: IncludeSelf with the
	// probe scored separately reproduces the reference computation).
	thr := prior.Quantile(0.9)
	statstest.Near(t, "q90", thr, ref.Probe.Q90, 1e-3)
	h := prior.Posterior(ref.Probe.Tail, ref.Probe.N).CDF(thr)
	statstest.Near(t, "probe health", h, ref.Probe.Health, 1e-2)
	h0 := prior.Posterior(peers[0].Tail, peers[0].N).CDF(thr)
	statstest.Near(t, "peer health", h0, ref.Peer0Health, 1e-6)
}

func TestHealthLeaveOneOut(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var counts []EntityCounts
	for i := 0; i < 16; i++ {
		n := float64(300 + rng.IntN(700))
		rate := 0.01 * math.Exp(rng.NormFloat64()*0.3)
		k := 0.0
		for j := 0; j < int(n); j++ {
			if rng.Float64() < rate {
				k++
			}
		}
		counts = append(counts, EntityCounts{Key: "gpu-" + string(rune('a'+i)), Tail: k, N: n})
	}
	counts = append(counts, EntityCounts{Key: "sick", Tail: 60, N: 800}) // 7.5% tail
	counts = append(counts, EntityCounts{Key: "new", Tail: 0, N: 3})     // no evidence
	hs, err := Health(counts, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		t.Logf("%-6s %3.0f/%4.0f health %.3f (prior %s α=%.1f β=%.0f thr %.4f)", h.Key, counts[indexOf(counts, h.Key)].Tail, counts[indexOf(counts, h.Key)].N, h.Health, h.Prior.Method, h.Prior.Alpha, h.Prior.Beta, h.Threshold)
		switch h.Key {
		case "sick":
			if h.Health > 0.01 {
				t.Errorf("sick entity health %v", h.Health)
			}
		case "new":
			if math.Abs(h.Health-0.9) > 0.05 {
				t.Errorf("entity without data: health %v, want ≈ 0.9 (the prior quantile)", h.Health)
			}
		default:
			if h.Health < 0.3 {
				t.Errorf("healthy peer %s: health %v", h.Key, h.Health)
			}
		}
	}
}

func indexOf(cs []EntityCounts, key string) int {
	for i, c := range cs {
		if c.Key == key {
			return i
		}
	}
	return -1
}

func TestHealthHomogeneousAndFallback(t *testing.T) {
	// Identical peers: no overdispersion, the concentration is capped by
	// MinCV, so a sick entity still shows.
	var counts []EntityCounts
	for i := 0; i < 10; i++ {
		counts = append(counts, EntityCounts{Tail: 10, N: 1000})
	}
	prior, err := FitBetaPrior(counts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if prior.Method != "homogeneous" {
		t.Errorf("method %q, want homogeneous", prior.Method)
	}
	cv := math.Sqrt(prior.Variance()) / prior.Mean()
	statstest.Near(t, "prior cv", cv, 0.25, 1e-3)
	statstest.Near(t, "prior mean", prior.Mean(), 0.01, 1e-3)
	hs, err := Health(append(counts, EntityCounts{Key: "sick", Tail: 40, N: 1000}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if h := hs[len(hs)-1].Health; h > 0.01 {
		t.Errorf("sick among homogeneous peers: health %v", h)
	}
	// No tails anywhere, or a single peer: the weak fallback prior.
	for _, peers := range [][]EntityCounts{
		{{Tail: 0, N: 100}, {Tail: 0, N: 200}},
		{{Tail: 3, N: 100}},
		nil,
	} {
		p, err := FitBetaPrior(peers, nil)
		if err != nil || p.Method != "fallback" || !(p.Alpha > 0 && p.Beta > 0) {
			t.Errorf("peers %v: %+v, %v", peers, p, err)
		}
	}
	if _, err := Health([]EntityCounts{{Tail: 5, N: 3}}, nil); err == nil {
		t.Error("tail > n accepted")
	}
	if _, err := Health(nil, &HealthOptions{Quantile: 1.5}); err == nil {
		t.Error("quantile 1.5 accepted")
	}
}
