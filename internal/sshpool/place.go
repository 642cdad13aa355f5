package sshpool

import "time"

// Placement: which pooled connection a new channel goes on. Control channels (commands, the
// shared SFTP client, a transfer's first data channel) are packed onto the busiest connection
// with room, so surplus connections go idle and are evicted. The further channels of one striped
// transfer are spread instead, one per connection: every channel of a connection shares its one
// TCP connection, whose socket buffers cap it on a real long path, and the one single-threaded
// sshd process that encrypts and decrypts all of them.

// placement says how acquire chooses a connection for a channel.
type placement int

const (
	// placeControl packs a command or other short channel onto the busiest connection with room.
	placeControl placement = iota
	// placeBulk packs a dedicated SFTP channel (file data) like placeControl, and counts it as
	// bulk on its connection so that spread channels avoid that connection.
	placeBulk
	// placeSpread wants a connection with no bulk channel, dialing one within the key's, host's
	// and owner's connection limits; where none can be had it becomes placeLeast.
	placeSpread
	// placeLeast takes the connection with room that carries the fewest bulk channels.
	placeLeast
)

// bulk says whether a channel placed so carries file data.
func (pl placement) bulk() bool { return pl != placeControl }

// lendLocked takes one channel slot on c for a channel placed by pl.
func (c *conn) lendLocked(pl placement) {
	c.inUse++
	if pl.bulk() {
		c.bulk++
	}
}

// hasRoom says whether c can take one more channel (idle data channels hold slots too), and
// the server has not just refused one there (refusedUntil).
func (c *conn) hasRoom() bool {
	return !c.dead && c.inUse+c.tunnels+len(c.idle) < c.slots &&
		(c.refusedUntil.IsZero() || time.Now().After(c.refusedUntil))
}

// connForLocked picks kp's connection for a channel placed by pl, or nil when the channel must
// wait (for a slot, or for a connection being dialed for it). Where only idle data channels
// fill the connections, the oldest is closed for the slot.
func (p *Pool) connForLocked(kp *keyPool, pl placement) *conn {
	c, wait := p.pickConnLocked(kp, pl)
	if c == nil && !wait {
		c = kp.reclaimLocked()
	}
	return c
}

// pickConnLocked is connForLocked without reclaiming idle channels; wait says a spread channel
// waits for a connection being dialed for it.
func (p *Pool) pickConnLocked(kp *keyPool, pl placement) (c *conn, wait bool) {
	switch pl {
	case placeSpread:
		for _, c := range kp.conns {
			if c.hasRoom() && c.bulk == 0 {
				return c, false
			}
		}
		h := p.hostLocked(kp.target.hostID())
		sh := p.shareLocked(h, kp.key.owner())
		defer h.tidyShareLocked(kp.key.owner())
		if kp.authErr == nil && (kp.dialing > 0 || p.mayDialLocked(kp, h, sh)) {
			return nil, true // a connection of its own is, or will be, on its way
		}
		return kp.leastBulkConnLocked(), false
	case placeLeast:
		return kp.leastBulkConnLocked(), false
	default:
		return kp.packedConnLocked(), false
	}
}

// packedConnLocked is the busiest connection with room.
func (kp *keyPool) packedConnLocked() *conn {
	var best *conn
	for _, c := range kp.conns {
		if c.hasRoom() && (best == nil || c.inUse+c.tunnels > best.inUse+best.tunnels) {
			best = c
		}
	}
	return best
}

// leastBulkConnLocked is the connection with room that carries the fewest bulk channels (the
// least busy one among those).
func (kp *keyPool) leastBulkConnLocked() *conn {
	var best *conn
	for _, c := range kp.conns {
		if !c.hasRoom() {
			continue
		}
		if best == nil || c.bulk < best.bulk || (c.bulk == best.bulk && c.inUse+c.tunnels < best.inUse+best.tunnels) {
			best = c
		}
	}
	return best
}

// dialsWanted is how many dials the waiters call for: one per spread waiter (each wants a
// connection of its own) plus enough connections of slots channels for the rest.
func dialsWanted(waiters []*waiter, slots int) int {
	spread, rest := 0, 0
	for _, w := range waiters {
		if w.place == placeSpread {
			spread++
		} else {
			rest++
		}
	}
	return spread + (rest+slots-1)/slots
}

// unspreadLocked turns kp's spread waiters into placeLeast ones, after a dial for them failed:
// they share a connection rather than wait for one that may not come.
func (kp *keyPool) unspreadLocked() {
	for _, w := range kp.waiters {
		if w.place == placeSpread {
			w.place = placeLeast
		}
	}
}
