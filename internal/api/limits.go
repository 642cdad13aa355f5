package api

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// OwnerLimits are each user's shares of the server: concurrent requests of the expensive kinds
// and the rate of credential checks. Over a limit the request is refused with 429 and a
// Retry-After header; nothing waits. Zero fields take the defaults shown.
type OwnerLimits struct {
	// MaxCommandsPerOwner caps one user's command requests in progress (POST …/commands,
	// POST /v1/commands, POST /sshapi/v2/{name}) (512: the
	// study drives 500 concurrent requests as one user).
	MaxCommandsPerOwner int `yaml:"max_commands_per_owner" env:"MAX_COMMANDS_PER_OWNER"`
	// MaxEventStreamsPerOwner caps one user's open GET /v1/transfers/{id}/events streams (16).
	MaxEventStreamsPerOwner int `yaml:"max_event_streams_per_owner" env:"MAX_EVENT_STREAMS_PER_OWNER"`
	// MaxLoadsPerOwner caps one user's POST /sshapi/v2/load runs in progress (1).
	MaxLoadsPerOwner int `yaml:"max_loads_per_owner" env:"MAX_LOADS_PER_OWNER"`
	// MaxSystemsPerOwner caps the systems one user may have registered (1000): more are
	// refused with 409 (POST /v1/systems, POST /sshapi/v2). Every system is a row the user's
	// listings read whole and a parsed credential the resolver may keep.
	MaxSystemsPerOwner int `yaml:"max_systems_per_owner" env:"MAX_SYSTEMS_PER_OWNER"`
	// CredentialChecksPerMinute is how many POST …/credential/check one user may make per
	// minute, in bursts of up to half of that (60); CredentialChecksPerMinutePerCredential the
	// same for one stored credential (12).
	CredentialChecksPerMinute              float64 `yaml:"credential_checks_per_minute" env:"CREDENTIAL_CHECKS_PER_MINUTE"`
	CredentialChecksPerMinutePerCredential float64 `yaml:"credential_checks_per_minute_per_credential" env:"CREDENTIAL_CHECKS_PER_MINUTE_PER_CREDENTIAL"`
}

func (l *OwnerLimits) setDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxCommandsPerOwner, 512)
	def(&l.MaxEventStreamsPerOwner, 16)
	def(&l.MaxLoadsPerOwner, 1)
	def(&l.MaxSystemsPerOwner, 1000)
	if l.CredentialChecksPerMinute <= 0 {
		l.CredentialChecksPerMinute = 60
	}
	if l.CredentialChecksPerMinutePerCredential <= 0 {
		l.CredentialChecksPerMinutePerCredential = 12
	}
}

// limits are the server's per-owner gates.
type limits struct {
	commands, streams  *ownerSlots
	jobStreams         *ownerSlots // job event streams and followed outputs
	checks, credChecks *keyedRate
	maxLoadsPerOwner   int // the load runs' share of the server's (Server.loads)
	maxSystemsPerOwner int // systems one user may have (store.SystemCreateParams.Max)
}

func newLimits(cfg OwnerLimits) *limits {
	cfg.setDefaults()
	return &limits{
		commands:   &ownerSlots{what: "command requests", max: cfg.MaxCommandsPerOwner, retryAfter: 1},
		streams:    &ownerSlots{what: "transfer event streams", max: cfg.MaxEventStreamsPerOwner, retryAfter: 15},
		jobStreams: &ownerSlots{what: "job event streams and output follows", max: cfg.MaxEventStreamsPerOwner, retryAfter: 15},
		checks:     newKeyedRate("credential checks", cfg.CredentialChecksPerMinute),
		credChecks: newKeyedRate("checks of this credential", cfg.CredentialChecksPerMinutePerCredential),

		maxLoadsPerOwner:   cfg.MaxLoadsPerOwner,
		maxSystemsPerOwner: cfg.MaxSystemsPerOwner,
	}
}

// ownerSlots is a per-owner counting semaphore that never waits: at most max holders per owner.
type ownerSlots struct {
	what       string
	max        int
	retryAfter int // seconds suggested to a refused caller

	mu sync.Mutex
	n  map[string]int
}

// acquire takes one of owner's slots, or returns a 429 error when the owner holds all of them.
func (o *ownerSlots) acquire(owner string) (release func(), err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	if o.n[owner] >= o.max {
		return nil, &httpError{status: http.StatusTooManyRequests, retryAfter: o.retryAfter,
			detail: fmt.Sprintf("you already have %d %s in progress (the limit per user); try again when one has finished", o.max, o.what)}
	}
	o.n[owner]++
	var once sync.Once
	return func() {
		once.Do(func() {
			o.mu.Lock()
			defer o.mu.Unlock()
			if o.n[owner]--; o.n[owner] <= 0 {
				delete(o.n, owner)
			}
		})
	}, nil
}

// keyedRate is a token bucket per key (an owner, or a credential), refilled at perMinute/60 per
// second and holding half a minute's allowance. Full buckets are dropped when the map
// grows, so memory follows the keys active in the last minute or so.
type keyedRate struct {
	what  string
	limit rate.Limit
	burst int

	mu sync.Mutex
	m  map[string]*rate.Limiter
}

// keyedRateSweep is the number of buckets above which full ones are dropped on insert.
const keyedRateSweep = 1024

func newKeyedRate(what string, perMinute float64) *keyedRate {
	return &keyedRate{what: what, limit: rate.Limit(perMinute / 60), burst: max(1, int(perMinute/2)), m: map[string]*rate.Limiter{}}
}

// allowCheck takes a credential check from both the owner's and the credential's bucket, or
// from neither.
func (l *limits) allowCheck(owner, credential string, now time.Time) error {
	undo, err := l.checks.take(owner, now)
	if err != nil {
		return err
	}
	if _, err := l.credChecks.take(credential, now); err != nil {
		undo()
		return err
	}
	return nil
}

// take takes a token from key's bucket, or returns a 429 error saying when one will be there.
// undo puts the token back.
func (k *keyedRate) take(key string, now time.Time) (undo func(), err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.m[key]
	if l == nil {
		if len(k.m) >= keyedRateSweep {
			for old, ol := range k.m {
				if ol.TokensAt(now) >= float64(k.burst) {
					delete(k.m, old)
				}
			}
		}
		l = rate.NewLimiter(k.limit, k.burst)
		k.m[key] = l
	}
	res := l.ReserveN(now, 1)
	if res.OK() && res.DelayFrom(now) == 0 {
		return func() { res.CancelAt(now) }, nil
	}
	wait := res.DelayFrom(now)
	res.CancelAt(now)
	secs := int(math.Ceil(wait.Seconds()))
	return nil, &httpError{status: http.StatusTooManyRequests, retryAfter: max(secs, 1),
		detail: fmt.Sprintf("too many %s: at most %g per minute; try again in %d s", k.what, float64(k.limit)*60, max(secs, 1))}
}
