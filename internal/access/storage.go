package access

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/sshapi/sshapi/internal/storage"
	"github.com/sshapi/sshapi/internal/storage/s3"
	"github.com/sshapi/sshapi/internal/storage/sftp"
	"github.com/sshapi/sshapi/internal/store"
)

// S3Config tunes how S3 systems are reached.
type S3Config struct {
	// MaxRequestsPerOwner bounds the S3 requests one owner's systems have in flight at once,
	// across all their buckets and all callers acting through their grants and links (default
	// 16): one tenant's flood waits for its own slots and never starves another's.
	MaxRequestsPerOwner int `yaml:"max_requests_per_owner" env:"MAX_REQUESTS_PER_OWNER"`
	// MaxRequests bounds the S3 requests of all owners in flight at once (default 1024, at
	// least MaxRequestsPerOwner). An owner waits for one of its own slots before it queues for
	// the server's, so at most one owner's share of each owner's requests waits there.
	MaxRequests int `yaml:"max_requests" env:"MAX_REQUESTS"`
	// SlotWait bounds how long a request waits for one of its owner's slots before it is
	// refused as busy (503 with Retry-After; default 30s).
	SlotWait time.Duration `yaml:"slot_wait" env:"SLOT_WAIT"`
	// CAFile is a PEM bundle of further certificate authorities trusted for S3 endpoints (beside
	// the system's). Certificates are always verified.
	CAFile string `yaml:"ca_file" env:"CA_FILE"`
	// PartSize is the part size of uploads through the API (default 8 MiB; at least 5 MiB, and
	// grown for large bodies so that an object fits in 10,000 parts).
	PartSize int64 `yaml:"part_size" env:"PART_SIZE"`
	// PartsInFlight is how many parts one upload sends at once (default 4). An upload holds
	// about 2 × PartSize × PartsInFlight bytes of memory.
	PartsInFlight int `yaml:"parts_in_flight" env:"PARTS_IN_FLIGHT"`
}

// WithDefaults fills unset fields.
func (c S3Config) WithDefaults() S3Config {
	if c.MaxRequestsPerOwner <= 0 {
		c.MaxRequestsPerOwner = 16
	}
	if c.MaxRequests <= 0 {
		c.MaxRequests = 1024
	}
	c.MaxRequests = max(c.MaxRequests, c.MaxRequestsPerOwner)
	if c.SlotWait <= 0 {
		c.SlotWait = 30 * time.Second
	}
	if c.PartSize <= 0 {
		c.PartSize = 8 << 20
	}
	c.PartSize = max(c.PartSize, 5<<20)
	if c.PartsInFlight <= 0 {
		c.PartsInFlight = 4
	}
	return c
}

// S3Keys are an S3 system's access keys as sealed in its credential.
type S3Keys struct {
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
	SessionToken    string `json:"session_token,omitempty"`
}

// SealS3Keys returns the plaintext an S3 credential seals (the caller seals it with
// CredentialAAD(owner, id, keys.AccessKeyID) and clears it).
func SealS3Keys(keys S3Keys) ([]byte, error) { return json.Marshal(keys) }

// notSSH is the error for an SSH connection to an S3 system: it names the capability a bucket
// lacks.
func notSSH(sys *store.System) error {
	return fmt.Errorf("system %q is an S3 bucket: %w", sys.ID,
		&storage.UnsupportedError{Kind: store.KindS3, Capability: storage.Commands, Op: "ssh (commands, jobs, SSH transfers)"})
}

// isNotSSH reports whether err is notSSH's.
func isNotSSH(err error) bool {
	var ue *storage.UnsupportedError
	return errors.As(err, &ue) && ue.Kind == store.KindS3 && ue.Capability == storage.Commands
}

// Storage returns the storage backend of owner's S3 system sys with its decrypted credential,
// cached by (owner, system, credential generation, system version) like SSH targets, and
// bounded to S3Config.MaxRequestsPerOwner requests in flight for the owner. It decides nothing
// about who asks: Resolve does.
func (r *Resolver) Storage(ctx context.Context, sys *store.System) (storage.Backend, error) {
	owner, id := sys.Owner, sys.ID
	cred, err := r.deps.Store.GetCredential(ctx, owner, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, refuse(ErrUnusable, "system %q has no credential: PUT /v1/systems/%s/credential first", id, id)
	}
	if err != nil {
		return nil, err
	}
	key := targetKey{owner: owner, system: id, generation: cred.Generation, updated: sys.UpdatedAt}
	if v, ok := r.derived.get(key, time.Now()); ok {
		if b, ok := v.(storage.Backend); ok {
			return b, nil
		}
	}
	b, err := r.buildStorage(sys, cred)
	if err != nil {
		return nil, err
	}
	r.derived.put(key, b, time.Now()) // in place of any older version of this system
	return b, nil
}

// buildStorage opens the credential and makes the backend.
func (r *Resolver) buildStorage(sys *store.System, cred *store.Credential) (storage.Backend, error) {
	if cred.KeyType != store.CredentialS3 {
		return nil, refuse(ErrUnusable, "system %q: its credential is an SSH key, not S3 access keys: PUT access_key_id and secret_access_key to /v1/systems/%s/credential", sys.ID, sys.ID)
	}
	plain, err := r.deps.Keyring.Open(cred.Sealed, CredentialAAD(cred.Owner, cred.SystemID, cred.Username))
	if err != nil {
		return nil, fmt.Errorf("open credential for %s: %w", sys.ID, err)
	}
	var keys S3Keys
	err = json.Unmarshal(plain, &keys)
	clear(plain)
	if err != nil {
		return nil, fmt.Errorf("stored credential for %s: %w", sys.ID, err)
	}
	client, err := r.s3HTTPClient()
	if err != nil {
		return nil, err
	}
	b, err := s3.New(s3.Config{Endpoint: sys.Endpoint, Region: sys.Region, Bucket: sys.Bucket, Prefix: sys.Prefix,
		PathStyle: sys.PathStyle, AccessKeyID: keys.AccessKeyID, SecretAccessKey: keys.SecretAccessKey,
		SessionToken: keys.SessionToken, HTTPClient: client})
	if err != nil {
		return nil, refuse(ErrUnusable, "system %q: %v", sys.ID, err)
	}
	return &limited{Backend: b, slots: r.s3Slots, wait: r.cfg.S3.SlotWait, owner: sys.Owner}, nil
}

// s3HTTPClient is the one HTTP client of every S3 backend: its dialer applies the network
// policy to every address it connects to (a name that resolves to a denied address is refused
// at dial time, whatever it resolved to at registration), certificates are verified (with
// S3Config.CAFile's authorities too), and no proxy from the environment is used (a proxy would
// dial on our behalf, past the policy).
func (r *Resolver) s3HTTPClient() (*http.Client, error) {
	r.s3Once.Do(func() {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if f := r.cfg.S3.CAFile; f != "" {
			pem, err := os.ReadFile(f)
			if err != nil {
				r.s3Err = fmt.Errorf("s3 ca_file: %w", err)
				return
			}
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(pem) {
				r.s3Err = fmt.Errorf("s3 ca_file %s: no PEM certificate in it", f)
				return
			}
			cfg.RootCAs = pool
		}
		tr := &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				return r.deps.Network.DialContext(ctx, network, addr)
			},
			TLSClientConfig:       cfg,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 2 * time.Minute,
			ExpectContinueTimeout: time.Second,
		}
		r.s3Client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // S3 answers redirects as errors; never follow one elsewhere
		}}
	})
	return r.s3Client, r.s3Err
}

// EndpointHost checks an S3 endpoint URL's form (http or https, a host, no user info, query or
// fragment) and returns its host for the network policy.
func EndpointHost(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		return "", errors.New("is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return "", errors.New("must be an http:// or https:// URL")
	case u.User != nil:
		return "", errors.New("must not carry user info: the keys go in the credential")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", errors.New("must not have a query or a fragment")
	case u.Hostname() == "":
		return "", errors.New("must name a host")
	case u.Path != "" && u.Path != "/":
		return "", errors.New("must not have a path: the bucket and prefix are fields of their own")
	}
	if p := u.Port(); p != "" {
		if _, err := net.LookupPort("tcp", p); err != nil {
			return "", errors.New("has an invalid port")
		}
	}
	return u.Hostname(), nil
}

// Capabilities is what a system of kind (store.KindSSH or store.KindS3) can do, as its storage
// backend declares it.
func Capabilities(kind string) storage.Capabilities {
	if kind == store.KindS3 {
		return (*s3.Backend)(nil).Capabilities()
	}
	return (*sftp.Backend)(nil).Capabilities()
}
