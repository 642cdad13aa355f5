package store

import (
	"reflect"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/secret"
)

// fillAll sets every field of the struct v points to (recursively) to a non-zero value, so a
// field added later is covered by the tests below without changing them.
func fillAll(t *testing.T, v reflect.Value) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Int, reflect.Int64:
			f.SetInt(7)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			s := reflect.MakeSlice(f.Type(), 1, 1)
			switch f.Type().Elem().Kind() {
			case reflect.String:
				s.Index(0).SetString("x")
			case reflect.Uint8:
				s.Index(0).SetUint(7)
			default:
				t.Fatalf("field %s: slice of %s: teach fillAll and Clone about it", v.Type().Field(i).Name, f.Type().Elem())
			}
			f.Set(s)
		case reflect.Struct:
			if f.Type() == reflect.TypeFor[time.Time]() {
				f.Set(reflect.ValueOf(time.Unix(7, 0)))
				continue
			}
			fillAll(t, f)
		default:
			t.Fatalf("field %s of kind %s: teach fillAll and Clone about it", v.Type().Field(i).Name, f.Kind())
		}
	}
}

// changeSlices changes the first element of every slice in the struct v points to.
func changeSlices(v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		switch {
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
			f.Index(0).SetString("changed")
		case f.Kind() == reflect.Slice:
			f.Index(0).SetUint(9)
		case f.Kind() == reflect.Struct:
			changeSlices(f)
		}
	}
}

func TestCloneSharesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		orig  any
		clone func(any) any
	}{
		{"System", &System{}, func(v any) any { return v.(*System).Clone() }},
		{"Credential", &Credential{}, func(v any) any { return v.(*Credential).Clone() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fillAll(t, reflect.ValueOf(tc.orig).Elem())
			c := tc.clone(tc.orig)
			if !reflect.DeepEqual(c, tc.orig) {
				t.Fatalf("clone %+v differs from %+v", c, tc.orig)
			}
			changeSlices(reflect.ValueOf(c).Elem())
			if reflect.DeepEqual(c, tc.orig) {
				t.Fatal("changing the clone's slices changed nothing: test broken")
			}
			fresh := reflect.New(reflect.TypeOf(tc.orig).Elem())
			fillAll(t, fresh.Elem())
			if !reflect.DeepEqual(tc.orig, fresh.Interface()) {
				t.Errorf("changing the clone changed the original: %+v", tc.orig)
			}
		})
	}
	if (*System)(nil).Clone() != nil || (*Credential)(nil).Clone() != nil {
		t.Error("Clone of nil is not nil")
	}
}

func TestSystemCache(t *testing.T) {
	sys := &System{Owner: "alice", ID: "hpc", Host: "h1", HostKeys: []string{"k1"}}
	cred := &Credential{Owner: "alice", SystemID: "hpc", Username: "u", Generation: 1, Sealed: secret.Sealed{Ciphertext: []byte{1}}}
	c := NewSystemCache(2)
	c.Put("alice", "hpc", 5, sys, cred)
	sys.HostKeys[0] = "changed after Put"
	for _, tc := range []struct {
		name      string
		owner, id string
		gen       int64
		hit       bool
	}{
		{"same generation", "alice", "hpc", 5, true},
		{"newer generation", "alice", "hpc", 6, false},
		{"older generation", "alice", "hpc", 4, false},
		{"other owner", "bob", "hpc", 5, false},
		{"other system", "alice", "hpc2", 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, cr, ok := c.Get(tc.owner, tc.id, tc.gen)
			if ok != tc.hit {
				t.Fatalf("Get(%s, %s, %d) hit = %v, want %v", tc.owner, tc.id, tc.gen, ok, tc.hit)
			}
			if ok && (s.HostKeys[0] != "k1" || cr.Username != "u" || cr.Sealed.Ciphertext[0] != 1) {
				t.Errorf("Get returned %+v %+v, not what was Put", s, cr)
			}
		})
	}
	got, _, _ := c.Get("alice", "hpc", 5)
	got.HostKeys[0] = "changed after Get"
	if again, _, _ := c.Get("alice", "hpc", 5); again.HostKeys[0] != "k1" {
		t.Errorf("a caller's change reached the cache: %q", again.HostKeys[0])
	}

	t.Run("newer generation empties", func(t *testing.T) {
		c.Put("alice", "other", 6, &System{ID: "other"}, nil)
		if _, _, ok := c.Get("alice", "hpc", 5); ok {
			t.Error("an entry of generation 5 survived generation 6")
		}
		if s, cr, ok := c.Get("alice", "other", 6); !ok || s.ID != "other" || cr != nil {
			t.Errorf("Get(other) = %+v, %+v, %v; want the system without credential", s, cr, ok)
		}
	})
	t.Run("late put of an older read is dropped", func(t *testing.T) {
		c.Put("alice", "hpc", 5, sys, cred)
		if _, _, ok := c.Get("alice", "hpc", 5); ok {
			t.Error("an entry read under generation 5 was kept after generation 6 was seen")
		}
	})
	t.Run("bounded", func(t *testing.T) {
		c.Put("alice", "a", 6, &System{ID: "a"}, nil)
		c.Put("alice", "b", 6, &System{ID: "b"}, nil) // third entry: the full cache is emptied first
		if n := len(c.entries); n > 2 {
			t.Errorf("%d entries in a cache of 2", n)
		}
		if _, _, ok := c.Get("alice", "b", 6); !ok {
			t.Error("the newest entry is missing")
		}
	})
	t.Run("zero size caches nothing", func(t *testing.T) {
		z := NewSystemCache(0)
		z.Put("alice", "hpc", 1, sys, cred)
		if _, _, ok := z.Get("alice", "hpc", 1); ok {
			t.Error("a cache of size 0 returned an entry")
		}
	})
}
