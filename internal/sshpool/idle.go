package sshpool

import (
	"sync/atomic"
	"time"

	"github.com/pkg/sftp"
)

// Idle data channels: every download and upload needs a dedicated SFTP channel, and opening one
// costs three round trips (channel open, subsystem request, SFTP version exchange) and a fork
// and exec of sftp-server on the server. A dedicated channel whose lease ends is therefore kept
// open on its connection, up to SFTPIdlePerConn per connection for SFTPIdleTimeout, and the
// next lease for the same key takes it. An idle channel holds one of the connection's slots; a
// channel that needs the slot closes the oldest idle one instead of waiting.

// dataChan is one SFTP channel: dedicated (lent or idle) or a connection's shared one. A
// channel may change between the two (takeSharedLocked, reshareLocked).
type dataChan struct {
	cl           *sftp.Client
	since        time.Time   // when it went idle
	closed       atomic.Bool // its channel ended (watchData or watchSFTP saw Wait return)
	watched      bool        // a watchData goroutine runs for it (pool mutex)
	shareWatched bool        // a watchSFTP goroutine runs for it (pool mutex)
}

// takeIdleLocked lends an idle data channel of kp for a channel placed by pl, or returns nil.
// A spread channel takes only one on a connection that carries no file data.
func (kp *keyPool) takeIdleLocked(pl placement) (*conn, *dataChan) {
	var best *conn
	for _, c := range kp.conns {
		if c.dead || (pl == placeSpread && c.bulk > 0) {
			continue
		}
		c.dropClosedIdleLocked()
		if len(c.idle) == 0 {
			continue
		}
		if best == nil || c.bulk < best.bulk {
			best = c
		}
	}
	if best == nil {
		return nil, nil
	}
	ch := best.idle[len(best.idle)-1] // the most recently used; older ones age out
	best.idle = best.idle[:len(best.idle)-1]
	best.lendLocked(pl)
	return best, ch
}

// takeSharedLocked lends, for a channel placed by pl, the shared SFTP channel of one of kp's
// connections that nobody borrows (a listing's, say), or returns nil: the channel is already
// open, so the lease costs no round trip, where opening one costs three. Its slot, which the
// shared channel held for good, is lent instead (c.slots counts it again, c.inUse holds it), so
// the connection's channels and every bound on them stay as they were. The next borrower of a
// shared channel opens a new one, unless the lease gave this one back first (reshareLocked):
// it is taken only from a connection with room for another channel, so that borrower finds a
// slot rather than waiting for the lease to end. A spread channel takes one only on a
// connection that carries no file data.
func (kp *keyPool) takeSharedLocked(pl placement) (*conn, *dataChan) {
	var best *conn
	for _, c := range kp.conns {
		if !c.hasRoom() || c.sftpCh == nil || c.sftpUse > 0 || c.sftpCh.closed.Load() || (pl == placeSpread && c.bulk > 0) {
			continue
		}
		if best == nil || c.bulk < best.bulk {
			best = c
		}
	}
	if best == nil {
		return nil, nil
	}
	ch := best.sftpCh
	best.sftp, best.sftpCh = nil, nil
	best.slots++
	best.lendLocked(pl)
	return best, ch
}

// reshareLocked gives ch, a shared SFTP channel that a dedicated lease took (takeSharedLocked)
// and whose lease ends, back to c as its shared channel where c has none again, and reports
// whether it did: the next listing or stat then needs no channel of its own. Its slot moves from
// lent to the shared channel's. As with parking, not while the pool stops, on a dead
// connection, for a channel that ended, while a shared channel is being opened, or when someone
// waits for a slot of the key. Channels opened as dedicated ones are parked as before.
func (p *Pool) reshareLocked(c *conn, ch *dataChan, pl placement) bool {
	if !ch.shareWatched || p.closing || c.dead || ch.closed.Load() || c.sftp != nil || c.kp.sftpPending != nil || len(c.kp.waiters) > 0 {
		return false
	}
	c.inUse--
	if pl.bulk() {
		c.bulk--
	}
	c.slots--
	c.lastUsed = time.Now()
	p.makeSharedLocked(c, ch)
	return true
}

// parkLocked keeps ch idle on c instead of closing it, moving its slot from lent to idle, and
// reports whether it did. Channels are not kept while the pool stops, on a dead connection,
// past SFTPIdlePerConn, or when someone waits for a slot of the key (they get it at once).
func (p *Pool) parkLocked(c *conn, ch *dataChan, pl placement) bool {
	if p.closing || c.dead || ch.closed.Load() || len(c.idle) >= p.cfg.SFTPIdlePerConn || len(c.kp.waiters) > 0 {
		return false
	}
	c.inUse--
	if pl.bulk() {
		c.bulk--
	}
	ch.since = time.Now()
	c.lastUsed = ch.since
	c.idle = append(c.idle, ch)
	if !ch.watched {
		ch.watched = true
		p.wg.Add(1)
		go p.watchData(c, ch)
	}
	return true
}

// watchData drops ch from c's idle channels when its channel ends (the server closed it, or the
// pool did).
func (p *Pool) watchData(c *conn, ch *dataChan) {
	defer p.wg.Done()
	_ = ch.cl.Wait()
	ch.closed.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.dropIdleLocked(ch) && !c.dead {
		p.serveWaitersLocked(c.kp)
	}
}

// dropClosedIdleLocked forgets the idle channels that already ended (their watcher may not
// have run yet).
func (c *conn) dropClosedIdleLocked() {
	kept := c.idle[:0]
	for _, ch := range c.idle {
		if !ch.closed.Load() {
			kept = append(kept, ch)
		}
	}
	clear(c.idle[len(kept):])
	c.idle = kept
}

// dropIdleLocked removes ch from c's idle channels, reporting whether it was there.
func (c *conn) dropIdleLocked(ch *dataChan) bool {
	for i, x := range c.idle {
		if x == ch {
			c.idle = append(c.idle[:i], c.idle[i+1:]...)
			return true
		}
	}
	return false
}

// reclaimLocked closes the oldest idle data channel of a connection of kp that is full, so its
// slot can be lent, and returns that connection (nil if no connection has an idle channel).
func (kp *keyPool) reclaimLocked() *conn {
	var best *conn
	for _, c := range kp.conns {
		if c.dead || len(c.idle) == 0 || c.inUse+c.tunnels >= c.slots {
			continue
		}
		if best == nil || c.idle[0].since.Before(best.idle[0].since) {
			best = c
		}
	}
	if best == nil {
		return nil
	}
	ch := best.idle[0]
	best.idle = best.idle[1:]
	go ch.cl.Close()
	return best
}

// closeIdleLocked closes the data channels and shared shells idle since before cutoff.
func (p *Pool) closeIdleLocked(cutoff time.Time) {
	for _, kp := range p.keys {
		for _, c := range kp.conns {
			if sh := c.shell; sh != nil && !sh.retired && sh.queued == 0 && sh.lastUsed.Before(cutoff) {
				sh.retired = true
				go sh.in.Close() // sh exits; readShell gives the slot back
			}
			kept := c.idle[:0]
			for _, ch := range c.idle {
				if ch.since.Before(cutoff) {
					go ch.cl.Close()
					continue
				}
				kept = append(kept, ch)
			}
			clear(c.idle[len(kept):])
			c.idle = kept
		}
	}
}
