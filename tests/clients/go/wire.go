package main

import (
	"context"
	"encoding/binary"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// wireLog records the (API key, version) of every request the client writes.
//
// franz-go's hooks report the key of a request but not its version, and the version
// is what this program is for: it shows what franz-go settled on after reading the
// gateway's ApiVersions answer. So the dialer wraps each connection and reads the
// request headers out of the bytes the client writes (Kafka framing: int32 length,
// then int16 key and int16 version), without changing them.
type wireLog struct {
	mu       sync.Mutex
	versions map[int16]map[int16]struct{}
}

func newWireLog() *wireLog {
	return &wireLog{versions: make(map[int16]map[int16]struct{})}
}

func (w *wireLog) add(key, version int16) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.versions[key] == nil {
		w.versions[key] = make(map[int16]struct{})
	}
	w.versions[key][version] = struct{}{}
}

// summary maps request names (keyName) to the sorted
// versions sent.
func (w *wireLog) summary() map[string][]int16 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string][]int16, len(w.versions))
	for key, set := range w.versions {
		name := keyName(key)
		vs := make([]int16, 0, len(set))
		for v := range set {
			vs = append(vs, v)
		}
		sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
		out[name] = vs
	}
	return out
}

// clientMax maps the same request names to the newest version this franz-go knows
// (kmsg): what it would send to a broker that advertised everything.
func (w *wireLog) clientMax() map[string]int16 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int16, len(w.versions))
	for key := range w.versions {
		if req := kmsg.RequestForKey(key); req != nil {
			out[keyName(key)] = req.MaxVersion()
		}
	}
	return out
}

// dial is a kgo.Dialer that wraps every connection in a recordingConn.
func (w *wireLog) dial(ctx context.Context, network, host string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: conn, log: w}, nil
}

// recordingConn follows the request framing of the bytes written through it.
// SASL v0 raw tokens would confuse it, but this program never uses SASL.
type recordingConn struct {
	net.Conn
	log *wireLog

	head      [8]byte // length (4) + key (2) + version (2) of the frame being read
	headLen   int
	remaining int // bytes of the current frame body still to skip after the head
}

func (c *recordingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.observe(p[:n])
	return n, err
}

func (c *recordingConn) observe(p []byte) {
	for len(p) > 0 {
		if c.remaining > 0 {
			skip := min(c.remaining, len(p))
			c.remaining -= skip
			p = p[skip:]
			continue
		}
		take := min(len(c.head)-c.headLen, len(p))
		copy(c.head[c.headLen:], p[:take])
		c.headLen += take
		p = p[take:]
		if c.headLen < len(c.head) {
			return
		}
		size := int(binary.BigEndian.Uint32(c.head[:4]))
		key := int16(binary.BigEndian.Uint16(c.head[4:6]))
		version := int16(binary.BigEndian.Uint16(c.head[6:8]))
		c.log.add(key, version)
		c.headLen = 0
		c.remaining = size - 4 // key and version were part of the frame body
	}
}
