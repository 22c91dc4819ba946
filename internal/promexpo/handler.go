package promexpo

import (
	"errors"
	"net/http"
	"strconv"
	"sync"

	"go.opentelemetry.io/collector/pdata/pmetric"
)

// MaxQueue bounds the one-shot expositions a Handler holds.
const MaxQueue = 1 << 14

// ErrQueueFull is returned by Enqueue when MaxQueue would be exceeded.
var ErrQueueFull = errors.New("promexpo: exposition queue full")

// Handler serves an exposition on GET (and HEAD). Its content is swapped
// while it serves:
//
//   - Set replaces the steady content, served to every request.
//   - Enqueue adds one-shot expositions: each GET takes the next one, in
//     order, so that a series of simulated scrapes reaches a scraper
//     exactly once each, whatever its interval; once the queue is empty the
//     steady content is served again. HEAD never takes from the queue.
//
// The zero steady content is an empty exposition (no samples), valid for
// any scraper. A Handler is safe for concurrent use.
type Handler struct {
	opts Options

	mu      sync.Mutex
	current []byte
	queue   [][]byte
	served  int64
}

// NewHandler returns a Handler rendering with o.
func NewHandler(o Options) *Handler { return &Handler{opts: o} }

// Set renders mds as one exposition and makes it the steady content. On
// error the content is unchanged.
func (h *Handler) Set(mds ...pmetric.Metrics) error {
	b, err := Append(nil, h.opts, mds...)
	if err != nil {
		return err
	}
	h.SetText(b)
	return nil
}

// SetText makes text, an exposition already rendered, the steady content.
// The Handler owns text afterwards.
func (h *Handler) SetText(text []byte) {
	h.mu.Lock()
	h.current = text
	h.mu.Unlock()
}

// Enqueue renders each of mds as one exposition and queues them, in order,
// for the next requests. Either all are queued or, on error, none.
func (h *Handler) Enqueue(mds ...pmetric.Metrics) error {
	texts := make([][]byte, 0, len(mds))
	for _, md := range mds {
		b, err := Append(nil, h.opts, md)
		if err != nil {
			return err
		}
		texts = append(texts, b)
	}
	return h.EnqueueText(texts...)
}

// EnqueueText queues expositions already rendered; the Handler owns them
// afterwards.
func (h *Handler) EnqueueText(texts ...[]byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.queue)+len(texts) > MaxQueue {
		return ErrQueueFull
	}
	h.queue = append(h.queue, texts...)
	return nil
}

// Pending returns how many queued expositions have not been served yet.
func (h *Handler) Pending() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.queue)
}

// Served returns how many GET requests were answered.
func (h *Handler) Served() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.served
}

// ServeHTTP answers GET and HEAD with the exposition.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	h.mu.Lock()
	body := h.current
	if r.Method == http.MethodGet {
		if len(h.queue) > 0 {
			body = h.queue[0]
			h.queue[0] = nil
			h.queue = h.queue[1:]
		}
		h.served++
	}
	h.mu.Unlock()
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}
