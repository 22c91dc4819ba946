package faultlab

// The paged KV cache of one engine, vLLM-style: fixed blocks of 16 tokens,
// allocated per request as its context grows, and a prefix cache keyed by
// chained block hashes. The hashing unit is a 512-token segment (32 blocks):
// Mooncake's hash_ids name such segments, so matching at that grain is what
// the traces can tell.
//
// Accounting: private blocks belong to one request; a cached segment holds
// segBlocks blocks and a reference count. Segments with no reference stay
// cached (hits are free) but are evictable, least recently released first,
// exactly as vLLM V1 keeps freed blocks hashed in its free queue. KV usage
// (vllm:kv_cache_usage_perc) counts referenced blocks only.

const (
	blockTokens = 16
	segBlocks   = segTokens / blockTokens
)

type segment struct {
	key        uint64
	refs       int32
	prev, next int32 // LRU links while refs == 0
	live       bool
}

type kvCache struct {
	total      int // blocks
	private    int // blocks held by requests outside segments
	segs       []segment
	index      map[uint64]int32
	freeSlots  []int32
	lruHead    int32
	lruTail    int32
	cachedSegs int // live segments
	pinnedSegs int // live segments with refs > 0
	disabled   bool
}

func newKVCache(blocks int) *kvCache {
	return &kvCache{total: blocks, index: make(map[uint64]int32), lruHead: -1, lruTail: -1}
}

func (c *kvCache) free() int { return c.total - c.private - c.cachedSegs*segBlocks }

func (c *kvCache) evictable() int { return (c.cachedSegs - c.pinnedSegs) * segBlocks }

func (c *kvCache) used() int { return c.private + c.pinnedSegs*segBlocks }

func (c *kvCache) usage() float64 {
	if c.total <= 0 {
		return 1
	}
	u := float64(c.used()) / float64(c.total)
	if u > 1 {
		u = 1
	}
	return u
}

// lookup returns how many leading segments of keys are cached.
func (c *kvCache) lookup(keys []uint64) int {
	if c.disabled {
		return 0
	}
	n := 0
	for _, k := range keys {
		if _, ok := c.index[k]; !ok {
			break
		}
		n++
	}
	return n
}

// blocksFor is how many more blocks r needs to hold tokens tokens.
func blocksFor(r *request, tokens int32) int {
	need := int((tokens+blockTokens-1)/blockTokens) - len(r.pinned)*segBlocks - int(r.private)
	if need < 0 {
		return 0
	}
	return need
}

// alloc gives n private blocks to r, evicting unreferenced segments as
// needed; it reports false (and changes nothing) when they cannot be had.
func (c *kvCache) alloc(r *request, n int) bool {
	if n == 0 {
		return true
	}
	if c.free()+c.evictable() < n {
		return false
	}
	for c.free() < n {
		c.evictLRU()
	}
	c.private += n
	r.private += int32(n)
	return true
}

// pin references the first n segments of keys for r (they are cached).
func (c *kvCache) pin(r *request, keys []uint64, n int) {
	for _, k := range keys[:n] {
		slot := c.index[k]
		c.ref(slot)
		r.pinned = append(r.pinned, slot)
	}
}

func (c *kvCache) ref(slot int32) {
	s := &c.segs[slot]
	if s.refs == 0 {
		c.lruRemove(slot)
		c.pinnedSegs++
	}
	s.refs++
}

// register turns r's computed full prompt segments into cached segments.
// Only a chain continuing what r already references is registered, as
// hashes chain on their prefix.
func (c *kvCache) register(r *request, computedPrompt int32) {
	if c.disabled {
		return
	}
	full := int(computedPrompt) / segTokens
	if full > len(r.keys) {
		full = len(r.keys)
	}
	for j := len(r.pinned); j < full; j++ {
		if r.private < segBlocks {
			return
		}
		k := r.keys[j]
		if slot, ok := c.index[k]; ok {
			// Someone registered it meanwhile: share theirs, drop ours.
			c.ref(slot)
			r.pinned = append(r.pinned, slot)
			r.private -= segBlocks
			c.private -= segBlocks
			continue
		}
		var slot int32
		if n := len(c.freeSlots); n > 0 {
			slot = c.freeSlots[n-1]
			c.freeSlots = c.freeSlots[:n-1]
		} else {
			c.segs = append(c.segs, segment{})
			slot = int32(len(c.segs) - 1)
		}
		c.segs[slot] = segment{key: k, refs: 1, prev: -1, next: -1, live: true}
		c.index[k] = slot
		c.cachedSegs++
		c.pinnedSegs++
		r.pinned = append(r.pinned, slot)
		r.private -= segBlocks
		c.private -= segBlocks
	}
}

// release drops everything r holds; its segments stay cached.
func (c *kvCache) release(r *request) {
	c.private -= int(r.private)
	r.private = 0
	for _, slot := range r.pinned {
		s := &c.segs[slot]
		s.refs--
		if s.refs == 0 {
			c.pinnedSegs--
			c.lruPush(slot)
		}
	}
	r.pinned = r.pinned[:0]
}

// flush evicts every unreferenced segment (a cache reset).
func (c *kvCache) flush() {
	for c.lruHead >= 0 {
		c.evictLRU()
	}
}

func (c *kvCache) evictLRU() {
	slot := c.lruHead
	if slot < 0 {
		return
	}
	c.lruRemove(slot)
	s := &c.segs[slot]
	delete(c.index, s.key)
	s.live = false
	c.cachedSegs--
	c.freeSlots = append(c.freeSlots, slot)
}

func (c *kvCache) lruPush(slot int32) {
	s := &c.segs[slot]
	s.prev, s.next = c.lruTail, -1
	if c.lruTail >= 0 {
		c.segs[c.lruTail].next = slot
	} else {
		c.lruHead = slot
	}
	c.lruTail = slot
}

func (c *kvCache) lruRemove(slot int32) {
	s := &c.segs[slot]
	if s.prev >= 0 {
		c.segs[s.prev].next = s.next
	} else {
		c.lruHead = s.next
	}
	if s.next >= 0 {
		c.segs[s.next].prev = s.prev
	} else {
		c.lruTail = s.prev
	}
	s.prev, s.next = -1, -1
}
