package faultlab

import "math/rand/v2"

// randSrc is the random source every component gets its own of, so that
// one component's draws never shift another's.
type randSrc = rand.Rand

// seeder hands out independent PCG sources derived from the run seed in a
// fixed order of creation.
type seeder struct {
	seed uint64
	n    uint64
}

func (s *seeder) next(label string) *randSrc {
	s.n++
	return rand.New(rand.NewPCG(s.seed, mix3(fnv64(label), s.n, 0x5eed)))
}

type eventKind uint8

const (
	evArrival eventKind = iota
	evEnqueue
	evStep
	evHangEnd
	evRestartDone
	evTick
	evScrapeVLLM
	evScrapeDCGM
	evFlush
	evFaultOn
	evFaultOff
	evXID
	evWarmEnd
	evEnd
)

type event struct {
	t     int64 // simulated ns since start (negative during warm-up)
	seq   uint64
	kind  eventKind
	epoch uint32
	a     int32
	r     *request
}

// eventQueue is a binary min-heap ordered by (t, seq): simultaneous events
// run in the order they were scheduled, which keeps runs deterministic.
type eventQueue struct {
	h   []event
	seq uint64
}

func (q *eventQueue) len() int { return len(q.h) }

func (q *eventQueue) less(i, j int) bool {
	if q.h[i].t != q.h[j].t {
		return q.h[i].t < q.h[j].t
	}
	return q.h[i].seq < q.h[j].seq
}

func (q *eventQueue) push(ev event) {
	q.seq++
	ev.seq = q.seq
	q.h = append(q.h, ev)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

func (q *eventQueue) pop() event {
	top := q.h[0]
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	q.h[n] = event{}
	q.h = q.h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}
